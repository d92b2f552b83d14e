"""Prototype of a cheaper L2E step (same mathematics as l2e.l2e.build_kernel, fewer operations).

What the reference step (l2e/l2e.py + l2e/meta_model.py) does per update, for d coordinates in L tensors:
  pass 1: per tensor, stack 9 feature rows, normalise each to unit RMS, transpose to (n, 9); concatenate
          to (d, 9); MLP 9→32→32→2; split both outputs back into tensors;
  pass 2: the same again with the new momentum (the 8 other feature columns are unchanged).
The prototype ("fused"):
  * builds the 8 unchanged feature rows once, already normalised, in a feature-major (8, d) matrix
    (no (d, 9) transpose), and computes the first layer's pre-activation for them once:
    P = W1[fixed]ᵀ · F + b1, a (32, d) matrix shared by both passes;
  * each pass adds only the momentum's rank-1 contribution w1[r] ⊗ r̂ (r̂ = r / rms_tensor(r));
  * runs the MLP feature-major ((32, 32)ᵀ · (32, d)), so every matmul is a plain GEMM on the long axis;
  * pass 2 computes only the β output row (its α is unused).
`layout="coord"` keeps the coordinate-major (d, ·) layout of the reference with the same sharing.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from l2e.l2e import L2EConfig, L2EState
from l2e.meta_model import DECAYS, NORM_EPS, update_averages
from l2e.sghmc import physical_step_size
from l2e.types import Posterior

MOMENTUM = 2  # column of r in FEATURE_NAMES
FIXED = (0, 1) + tuple(range(3, 3 + len(DECAYS)))  # g, θ, m_0.1 … m_0.9999


def _rms_scale(rows: jax.Array) -> jax.Array:
    """(k, n) → (k, n) each row divided by sqrt(eps + mean(row²))."""
    return rows * jax.lax.rsqrt(NORM_EPS + jnp.mean(jnp.square(rows), axis=1, keepdims=True))


def _mlp_layers(meta_params):
    layers = sorted(meta_params, key=lambda k: int(k.split("_")[-1]))
    return [(meta_params[k]["kernel"], meta_params[k]["bias"]) for k in layers]


def build_fused_kernel(posterior: Posterior, config: L2EConfig, layout: str = "feature"):
    """kernel(key, state, minibatch, meta_params) -> state, numerically the reference L2E step."""
    eps = physical_step_size(config.learning_rate, posterior.data_size)
    c = config.friction
    noise_std = jnp.sqrt(2.0 * c * eps * config.temperature) if config.noise == "sghmc" else \
        jnp.sqrt(2.0 * c * config.temperature)
    a_scale, b_scale = config.alpha_scale, config.beta_scale
    fixed = jnp.asarray(FIXED)

    def kernel(key, state: L2EState, minibatch, meta_params):
        g, grad_u = posterior.potential_grad(state.position, minibatch)
        avgs = update_averages(state.averages, g)
        leaves_x, treedef = jax.tree.flatten(state.position)
        leaves_g, leaves_r = jax.tree.leaves(g), jax.tree.leaves(state.momentum)
        leaves_m, leaves_gu = jax.tree.leaves(avgs), jax.tree.leaves(grad_u)
        sizes = [x.size for x in leaves_x]
        offs = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        (w1, b1), *hidden, (w3, b3) = _mlp_layers(meta_params)
        w1f, w1r = w1[fixed], w1[MOMENTUM]

        # (8, d): normalised fixed features, feature-major
        f = jnp.concatenate([
            _rms_scale(jnp.concatenate([gl.reshape(1, -1), xl.reshape(1, -1), ml.reshape(len(DECAYS), -1)]))
            for gl, xl, ml in zip(leaves_g, leaves_x, leaves_m)], axis=1)

        def rhat(leaves):
            return jnp.concatenate([_rms_scale(r.reshape(1, -1))[0] for r in leaves])

        flat = lambda leaves: jnp.concatenate([l.reshape(-1) for l in leaves])

        if layout == "feature":
            pre = w1f.T @ f + b1[:, None]  # (32, d)

            def mlp(r_hat, rows):
                h = jax.nn.relu(pre + w1r[:, None] * r_hat[None, :])
                for w, b in hidden:
                    h = jax.nn.relu(w.T @ h + b[:, None])
                return w3[:, rows].T @ h + b3[rows][:, None]  # (len(rows), d)

            out1 = mlp(rhat(leaves_r), jnp.array([0, 1]))
            alpha, beta_old = a_scale * out1[0], b_scale * out1[1]
        else:
            pre = f.T @ w1f + b1  # (d, 32)

            def mlp(r_hat, rows):
                h = jax.nn.relu(pre + r_hat[:, None] * w1r[None, :])
                for w, b in hidden:
                    h = jax.nn.relu(h @ w + b)
                return (h @ w3[:, rows] + b3[rows]).T

            out1 = mlp(rhat(leaves_r), jnp.array([0, 1]))
            alpha, beta_old = a_scale * out1[0], b_scale * out1[1]

        r = flat(leaves_r)
        z = jax.random.normal(key, r.shape, r.dtype)
        mom = r - eps * (flat(leaves_gu) + alpha + c * beta_old) + noise_std * z
        mom_leaves = [mom[offs[i]:offs[i + 1]].reshape(x.shape) for i, x in enumerate(leaves_x)]
        beta_new = b_scale * mlp(rhat(mom_leaves), jnp.array([1]))[0]
        pos = flat(leaves_x) + eps * beta_new
        pos_leaves = [pos[offs[i]:offs[i + 1]].reshape(x.shape) for i, x in enumerate(leaves_x)]
        return L2EState(jax.tree.unflatten(treedef, pos_leaves), jax.tree.unflatten(treedef, mom_leaves), avgs,
                        state.step + 1)

    return kernel
