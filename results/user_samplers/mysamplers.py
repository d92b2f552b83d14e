"""A user's own sampler, outside the repository: RMS-preconditioned Langevin dynamics (pSGLD without its
correction term), written against l2e's public interface only (l2e.Posterior, l2e.SamplingAlgorithm)."""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import l2e


class RMSState(NamedTuple):
    position: Any  # θ
    v: Any  # running average of squared per-datum gradients


class RMSInfo(NamedTuple):
    loss: jax.Array
    is_finite: jax.Array


def rms_langevin(posterior, learning_rate, decay=0.99, eps=1e-5):
    """θ ← θ − ε·m·∇Ũ + √(2ε·m)·ξ with ε = learning_rate / N and m = 1 / (√v + eps), v the EMA of ḡ²."""

    def init(position):
        return RMSState(position, jax.tree.map(jnp.zeros_like, position))

    def step(key, state, minibatch):
        loss, g, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        v = jax.tree.map(lambda v, gi: decay * v + (1 - decay) * gi * gi, state.v, g)
        leaves, treedef = jax.tree.flatten(state.position)
        keys = jax.tree.unflatten(treedef, list(jax.random.split(key, len(leaves))))
        step_size = learning_rate / posterior.data_size

        def move(p, gu, vi, k):
            m = 1.0 / (jnp.sqrt(vi) + eps)
            return p - step_size * m * gu + jnp.sqrt(2 * step_size * m) * jax.random.normal(k, p.shape, p.dtype)

        position = jax.tree.map(move, state.position, grad_u, v, keys)
        finite = jnp.isfinite(loss) & jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(position)]))
        return RMSState(position, v), RMSInfo(loss, finite)

    return l2e.SamplingAlgorithm(init, step)


rms_langevin.grid = {"learning_rate": (0.0003, 0.001, 0.003)}
