"""The L2E meta-model: one tiny MLP applied to every coordinate of every parameter tensor.

Input features per coordinate, in the released code's order (so its checkpoint loads):
    [g, θ, r, m_0.1, m_0.5, m_0.9, m_0.99, m_0.999, m_0.9999]
with g the mean-minibatch NLL gradient (not ×N), r the raw momentum and m_d running averages of g.
Each feature is normalised per tensor to unit RMS: x / sqrt(1e-5 + mean_tensor(x²)).
MLP 9 → 32 → ReLU → 32 → ReLU → 2 (1,442 parameters); out0 → α, out1 → β.

Kinetic-L2E's μ-MLP (l2e.kinetic) is the same per-coordinate MLP with 1 output on features that are functions
of θ alone (`theta_features`: θ normalised per tensor, the tensor's log RMS, its log size).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from l2e.types import PyTree

DECAYS = (0.1, 0.5, 0.9, 0.99, 0.999, 0.9999)
FEATURE_NAMES = ("grad", "position", "momentum") + tuple(f"avg_{d}" for d in DECAYS)
NUM_FEATURES = len(FEATURE_NAMES)
NORM_EPS = 1e-5
# XLA:CPU splits a long matmul contraction according to its intra-op thread pool, which forcing ≥ 4 host devices
# resizes (measured on the 2-core box: a 4096-row contraction differs between 1-3 and 4 devices). So the fit's
# loss is summed over blocks of this many rows in a fixed order; with 1024-row blocks φ₀ still differed by 4e-5
# between 1 and 4 devices, with 256 it is bit-identical (tests/test_paper_scale.py).
FIT_BLOCK_ROWS = 256


class MetaMLP(nn.Module):
    """Per-coordinate MLP: (n, 9) → (n, 2), haiku-default init (truncated normal, std 1/sqrt(fan_in); zero bias)."""

    hidden: Sequence[int] = (32, 32)
    outputs: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=init)(x))
        return nn.Dense(self.outputs, kernel_init=init)(x)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (32, 32)) -> PyTree:
    """Fresh meta-parameters φ of the paper-form MLP (haiku-default init; the learned samplers' `init_meta_params`
    add the "equals SGHMC" start).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (9, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 2), (2,)}}.
    """
    return MetaMLP(tuple(hidden)).init(key, jnp.zeros((1, NUM_FEATURES)))["params"]


def check_mlp_shapes(meta_params: PyTree, inputs: int = NUM_FEATURES, outputs: int = 2,
                     where: str = "meta_params") -> None:
    """Check that `meta_params` is a Dense stack `inputs` → … → `outputs` with consistent shapes (where parameters
    enter a kernel: JAX would otherwise clamp out-of-range feature indices and run silently).

    Args:
      meta_params: a flax params dict {"Dense_i": {"kernel", "bias"}}.
      inputs: the expected input width.
      outputs: the expected output width.
      where: the name in the error message.
    Returns:
      None.
    Raises:
      ValueError: another structure or shape.
    """
    try:
        layers = sorted(meta_params, key=lambda k: int(k.split("_")[-1]))
        shapes = [(tuple(np.shape(meta_params[k]["kernel"])), tuple(np.shape(meta_params[k]["bias"])))
                  for k in layers]
    except (TypeError, KeyError, ValueError, AttributeError, IndexError):
        raise ValueError(f"{where}: not a meta-model parameter tree (Dense_0 … Dense_n with kernel and bias)") from None
    fan_in = inputs
    for i, (kernel, bias) in enumerate(shapes):
        if len(kernel) != 2 or kernel[0] != fan_in or bias != kernel[1:]:
            raise ValueError(f"{where}: layer {i} has kernel {kernel} and bias {bias}; expected a kernel "
                             f"({fan_in}, n) and bias (n,) (a meta-model for {inputs} inputs and {outputs} outputs)")
        fan_in = kernel[1]
    if not shapes or fan_in != outputs:
        raise ValueError(f"{where}: meta-model has {fan_in if shapes else 0} outputs, expected {outputs}")


def mlp_layers(meta_params: PyTree) -> list[tuple[jax.Array, jax.Array]]:
    """The layers of a meta-parameter dict, input layer first.

    Args:
      meta_params: a flax params dict {"Dense_i": {"kernel", "bias"}}.
    Returns:
      [(kernel (n_in, n_out), bias (n_out,)), …].
    """
    return [(meta_params[k]["kernel"], meta_params[k]["bias"])
            for k in sorted(meta_params, key=lambda k: int(k.split("_")[-1]))]


def hidden_sizes(meta_params: PyTree) -> tuple[int, ...]:
    """The hidden widths of a meta-parameter dict (for rebuilding the module from a checkpoint).

    Args:
      meta_params: a flax params dict {"Dense_i": {"kernel", "bias"}}.
    Returns:
      (h1, …, h_n), a tuple of Python ints.
    """
    layers = sorted(meta_params, key=lambda k: int(k.split("_")[-1]))
    return tuple(int(meta_params[k]["kernel"].shape[1]) for k in layers[:-1])


def update_averages(averages: PyTree, grad: PyTree) -> PyTree:
    """m_k ← d_k·m_k + (1 − d_k)·g for each decay in DECAYS; no bias correction.

    Args:
      averages: pytree whose leaves are (6, *shape), one slice per decay.
      grad: ḡ, the mean minibatch NLL gradient, a pytree of leaves (*shape).
    Returns:
      the updated averages, leaves (6, *shape).
    """
    d = jnp.asarray(DECAYS)

    def upd(m, g):
        dk = d.reshape((-1,) + (1,) * g.ndim).astype(m.dtype)
        return dk * m + (1.0 - dk) * g[None]

    return jax.tree.map(upd, averages, grad)


def leaf_features(g: jax.Array, x: jax.Array, r: jax.Array, m: jax.Array) -> jax.Array:
    """Normalised features of one tensor, each column unit RMS over the tensor.

    Args:
      g: ḡ of the tensor (*shape).
      x: θ of the tensor (*shape).
      r: the momentum of the tensor (*shape).
      m: the averages of the tensor (6, *shape).
    Returns:
      (size, 9), columns in FEATURE_NAMES order (dimensionless).
    """
    cols = jnp.concatenate([g.reshape(1, -1), x.reshape(1, -1), r.reshape(1, -1), m.reshape(len(DECAYS), -1)])
    rms = jnp.sqrt(NORM_EPS + jnp.mean(jnp.square(cols), axis=1, keepdims=True))
    return (cols / rms).T


def features(grad: PyTree, position: PyTree, momentum: PyTree, averages: PyTree) -> jax.Array:
    """All coordinates' normalised features stacked leaf after leaf (jax.tree order).

    Args:
      grad: ḡ (pytree).
      position: θ (pytree like grad).
      momentum: r (pytree like grad).
      averages: the running averages (leaves (6, *shape)).
    Returns:
      (d, 9), columns in FEATURE_NAMES order.
    """
    leaves = jax.tree.leaves(jax.tree.map(leaf_features, grad, position, momentum, averages))
    return jnp.concatenate(leaves, axis=0)


def apply_per_coordinate(meta_params: PyTree, feats: jax.Array, like: PyTree) -> tuple[PyTree, PyTree]:
    """Run the MLP on per-coordinate features and split its two outputs into pytrees shaped like `like`.

    Args:
      meta_params: φ (9 → … → 2).
      feats: (d, 9) features.
      like: a pytree with d coordinates in all (its leaves' shapes and dtypes are used).
    Returns:
      (out0, out1), unscaled, each a pytree shaped like `like`.
    """
    out = MetaMLP(hidden_sizes(meta_params)).apply({"params": meta_params}, feats)
    leaves, treedef = jax.tree.flatten(like)
    sizes = [x.size for x in leaves]
    offsets = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    outs = []
    for j in range(out.shape[1]):
        col = out[:, j]
        outs.append(jax.tree.unflatten(
            treedef, [col[offsets[i]:offsets[i + 1]].reshape(x.shape).astype(x.dtype) for i, x in enumerate(leaves)]
        ))
    return outs[0], outs[1]


def sghmc_like_meta_params(key: jax.Array, hidden: Sequence[int] = (32, 32), steps: int = 500,
                           num_points: int = 4096) -> PyTree:
    """Meta-parameters fitted so that out0 ≈ 0 and out1 ≈ the normalised momentum feature.

    With these, L2E moves θ along its (per-tensor normalised) momentum: an SGHMC-like start for
    meta-training, instead of a random MLP whose β points anywhere (often up the loss).  A short
    deterministic least-squares fit with Adam on N(0, I) feature vectors.

    Args:
      key: PRNG key (initial φ and the fit's feature vectors).
      hidden: hidden layer widths.
      steps: Adam steps (learning rate 1e-2).
      num_points: feature vectors in the fit.
    Returns:
      φ, a flax params dict 9 → hidden → 2.
    """
    import optax

    k_init, k_data = jax.random.split(key)
    params = init_meta_params(k_init, hidden)
    x = jax.random.normal(k_data, (num_points, NUM_FEATURES))
    target = jnp.stack([jnp.zeros(num_points), x[:, FEATURE_NAMES.index("momentum")]], axis=1)
    module = MetaMLP(tuple(hidden))
    opt = optax.adam(1e-2)

    def loss(p):  # summed over row blocks in a fixed order (see FIT_BLOCK_ROWS)
        sq = [jnp.sum(jnp.square(module.apply({"params": p}, x[i:i + FIT_BLOCK_ROWS]) - target[i:i + FIT_BLOCK_ROWS]))
              for i in range(0, num_points, FIT_BLOCK_ROWS)]
        return sum(sq) / target.size

    @jax.jit
    def fit(p):
        def body(carry, _):
            p, s = carry
            g = jax.grad(loss)(p)
            u, s = opt.update(g, s)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (p, opt.init(p)), None, length=steps)[0][0]

    return fit(params)


# ------------------------------------------------------------------------ θ-only features and the μ-MLP (Kinetic-L2E)

THETA_FEATURE_NAMES = ("position", "log_rms", "log_size")
"""Per-coordinate features that are functions of θ alone (l2e.kinetic): θ_i normalised to unit RMS over its
tensor, the tensor's log RMS ½·log(1e-5 + mean θ²) (a function of θ too) and log(size)/10 (a constant)."""
NUM_THETA_FEATURES = len(THETA_FEATURE_NAMES)


def theta_leaf_features(x: jax.Array) -> jax.Array:
    """The θ-only features of one tensor.

    Args:
      x: θ of the tensor (*shape).
    Returns:
      (size, 3), columns in THETA_FEATURE_NAMES order.
    """
    flat = x.reshape(-1)
    ms = NORM_EPS + jnp.mean(jnp.square(flat))
    consts = jnp.stack([0.5 * jnp.log(ms), jnp.asarray(math.log(flat.size) / 10.0, flat.dtype)])
    return jnp.concatenate([(flat * jax.lax.rsqrt(ms))[:, None], jnp.broadcast_to(consts, (flat.size, 2))], axis=1)


def theta_features(position: PyTree) -> jax.Array:
    """Every coordinate's θ-only features, leaf after leaf in jax.tree order.

    Args:
      position: θ (pytree).
    Returns:
      (d, 3), columns in THETA_FEATURE_NAMES order.
    """
    return jnp.concatenate([theta_leaf_features(x) for x in jax.tree.leaves(position)], axis=0)


def init_mu_params(key: jax.Array, hidden: Sequence[int] = (32, 32), zero_output: bool = True) -> PyTree:
    """Meta-parameters of the μ-MLP, 3 → hidden → 1 (haiku-default init).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      zero_output: the output layer's kernel and bias are 0, so μ ≡ 0 exactly (Kinetic-L2E is then SGHMC).
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (3, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 1), (1,)}}.
    """
    params = MetaMLP(tuple(hidden), outputs=1).init(key, jnp.zeros((1, NUM_THETA_FEATURES)))["params"]
    if zero_output:
        last = mlp_layers_names(params)[-1]
        params = {**params, last: jax.tree.map(jnp.zeros_like, params[last])}
    return params


def mlp_layers_names(meta_params: PyTree) -> list[str]:
    """The Dense layer names of a meta-parameter dict, input layer first.

    Args:
      meta_params: a flax params dict {"Dense_i": …}.
    Returns:
      ["Dense_0", …, "Dense_n"], sorted by index.
    """
    return sorted(meta_params, key=lambda k: int(k.split("_")[-1]))


def apply_mu(meta_params: PyTree, position: PyTree) -> PyTree:
    """The μ-MLP's output per coordinate of θ (unscaled).

    Args:
      meta_params: φ of the μ-MLP (3 → … → 1).
      position: θ (pytree).
    Returns:
      a pytree shaped like `position` (momentum units once scaled by mu_scale).
    """
    out = MetaMLP(hidden_sizes(meta_params), outputs=1).apply({"params": meta_params}, theta_features(position))[:, 0]
    leaves, treedef = jax.tree.flatten(position)
    bounds = [0]
    for x in leaves:
        bounds.append(bounds[-1] + x.size)
    return jax.tree.unflatten(treedef, [out[lo:hi].reshape(x.shape).astype(x.dtype)
                                        for lo, hi, x in zip(bounds[:-1], bounds[1:], leaves)])


# ------------------------------------------------------------------------ restored meta-parameter trees


def check_stack(tree: Any, where: str, inputs: int, outputs: int) -> PyTree:
    """Validate a restored Dense stack `inputs` → … → `outputs`.

    Args:
      tree: {"Dense_i": {"kernel", "bias"}}.
      where: the name in the error message.
      inputs: the expected input width.
      outputs: the expected output width.
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      ValueError: naming `where`.
    """
    try:
        layers = sorted(tree, key=lambda k: int(k.split("_")[-1]))
        shapes = [(tuple(np.shape(tree[k]["kernel"])), tuple(np.shape(tree[k]["bias"]))) for k in layers]
        fan_in = inputs
        for (kin, kout), (b,) in shapes:
            if kin != fan_in or b != kout:
                raise ValueError(f"{where}: meta-model of another shape (layer {kin}x{kout}, expected input {fan_in})")
            fan_in = kout
    except (TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{where}: not an L2E meta-model parameter tree") from e
    except ValueError as e:
        if str(e).startswith(f"{where}: meta-model"):
            raise
        raise ValueError(f"{where}: not an L2E meta-model parameter tree") from None
    if fan_in != outputs:
        raise ValueError(f"{where}: meta-model has {fan_in} outputs, expected {outputs}")
    return {k: {name: np.asarray(v, np.float32) for name, v in tree[k].items()} for k in layers}


def check_tree(tree, where: str, fixed: dict, stack: str, inputs: int, outputs: int) -> PyTree:
    """Validate a restored meta-parameter tree of fixed-shape arrays plus one Dense stack.

    Args:
      tree: the restored tree.
      where: the name in error messages.
      fixed: the expected nested dict of array shapes, e.g. {"window": {"kappa": ()}}.
      stack: the key of the Dense stack (`check_stack`), `inputs` → … → `outputs`.
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      ValueError: one line naming `where` and the field.
    """
    if not isinstance(tree, dict) or sorted(tree) != sorted([*fixed, stack]):
        got = ", ".join(map(str, sorted(tree))) if isinstance(tree, dict) else type(tree).__name__
        raise ValueError(f"{where}: expected the entries {', '.join(sorted([*fixed, stack]))}, got {got}")

    def check(node, spec, path):
        if isinstance(spec, dict):
            if not isinstance(node, dict) or sorted(node) != sorted(spec):
                raise ValueError(f"{where}: {path} must hold {', '.join(sorted(spec))}")
            return {k: check(node[k], spec[k], f"{path}.{k}") for k in spec}
        arr = np.asarray(node, np.float32)
        if arr.shape != tuple(spec) or not np.all(np.isfinite(arr)):
            raise ValueError(f"{where}: {path} must be a finite array of shape {tuple(spec)}, got {arr.shape}")
        return arr

    out = {k: check(tree[k], fixed[k], k) for k in fixed}
    out[stack] = check_stack(tree[stack], f"{where} ({stack})", inputs, outputs)
    return out

