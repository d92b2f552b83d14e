"""L2E: the learned SGHMC-style step (Kim et al., 2024, eq. 6), as decided in docs/l2e.md § This project's choices.

r' = r − ε[∇Ũ(θ) + α_φ(θ, r) + C·β_φ(θ, r)] + N(0, 2·C·ε·T)
θ' = θ + ε·β_φ(θ, r')
with ε = sqrt(lr/N), α = alpha_scale·out0, β = beta_scale·out1 and two meta-model passes per step
(the second sees the new momentum, the same g and averages). α ≡ 0, β ≡ r gives SGHMC exactly.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from l2e.meta_model import (
    DECAYS, FEATURE_NAMES, NORM_EPS, NUM_FEATURES, apply_per_coordinate, check_mlp_shapes, features, mlp_layers,
    sghmc_like_meta_params, update_averages,
)
from l2e.meta_model import init_meta_params as random_meta_params
from l2e.checks import check_finite, check_positive
from l2e.diffusions import learned_momentum, physical_step_size, position_update, sghmc_noise_std
from l2e.types import (
    LearnedSampler, Posterior, PyTree, SamplingAlgorithm, Shipped, all_finite, normal_like, settled, tree_vdot,
)

NOISE_MODES = ("sghmc", "reference")


@dataclasses.dataclass(frozen=True)
class L2EConfig:
    """Hyperparameters of the L2E step.

    learning_rate: lr = ε²·N (mean-loss units); friction: C; temperature: T.
    alpha_scale / beta_scale: output multipliers of the meta-model (1e-3 in the released code).
    noise: "sghmc" → N(0, 2CεT) (default); "reference" → the released code's N(0, 2·C·T) (no ε).
    """

    learning_rate: float = 0.5
    friction: float = 0.1
    temperature: float = 1.0
    alpha_scale: float = 1e-3
    beta_scale: float = 1e-3
    noise: str = "sghmc"

    def __post_init__(self):
        check_positive(learning_rate=self.learning_rate, friction=self.friction, temperature=self.temperature)
        check_finite(alpha_scale=self.alpha_scale, beta_scale=self.beta_scale)
        if self.noise not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, got {self.noise!r}")


class L2EState(NamedTuple):
    """position: θ (pytree); momentum: r (pytree like θ, physical units); averages: running averages of the mean
    minibatch NLL gradient ḡ, leaves shaped (6, *param_shape), one slice per decay in DECAYS; step: int32 scalar,
    updates done."""

    position: PyTree
    momentum: PyTree
    averages: PyTree
    step: jax.Array


class L2EInfo(NamedTuple):
    """Per-step diagnostics of the paper-form L2E step (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ r'·β(θ, r') at the new momentum r', with the (scaled) β the position update uses (the fused
    step takes β as applied, (θ' − θ)/ε: see `_applied_kinetic`); β plays ∇_rK's role, so its mean ÷ d is the
    step's T_kin (≈ d·T at equilibrium only for a correct sampler; docs/sampling.md § Why the paper-form step is
    not a sampler).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


# meta_fn(meta_params, grad, position, momentum, averages) -> (α, β) pytrees, already scaled
MetaFn = Callable[[PyTree, PyTree, PyTree, PyTree, PyTree], tuple[PyTree, PyTree]]


def mlp_meta_fn(alpha_scale: float, beta_scale: float) -> MetaFn:
    """The paper's meta-model: per-coordinate MLP on normalised features, outputs scaled.

    Args:
      alpha_scale: α = alpha_scale·out₀.
      beta_scale: β = beta_scale·out₁.
    Returns:
      meta_fn(meta_params, grad, position, momentum, averages) -> (α, β), pytrees shaped like `position`
      (grad ḡ: per-datum gradient; averages: leaves (6, *shape)).
    """

    def meta_fn(meta_params, grad, position, momentum, averages):
        out0, out1 = apply_per_coordinate(meta_params, features(grad, position, momentum, averages), position)
        return (jax.tree.map(lambda a: alpha_scale * a, out0), jax.tree.map(lambda b: beta_scale * b, out1))

    return meta_fn


def init(position: PyTree) -> L2EState:
    """The L2E state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      L2EState with momentum 0, averages 0 (leaves (6, *shape)) and step 0.
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    avgs = jax.tree.map(lambda x: jnp.zeros((len(DECAYS),) + x.shape, x.dtype), position)
    return L2EState(position, zeros, avgs, jnp.zeros((), jnp.int32))


def _coefficients(config: L2EConfig, learning_rate, friction, temperature, data_size: int):
    """(ε, noise std) of a step: ε = sqrt(lr/N); noise N(0, 2CεT) ("sghmc") or N(0, 2CT) ("reference").
    Computed at trace time when the hyperparameters are Python numbers."""
    with jax.ensure_compile_time_eval():
        eps = physical_step_size(learning_rate, data_size)
        if config.noise == "sghmc":
            return eps, sghmc_noise_std(eps, friction, temperature)
        return eps, jnp.sqrt(2.0 * friction * temperature)


def build_kernel(posterior: Posterior, config: L2EConfig, meta_fn: MetaFn | None = None):
    """The L2E kernel (module doc); the key draws the momentum noise.

    meta_params and the hyperparameters are call arguments (traced for ES and tuning grids); the noise
    mode and output scales are fixed by `config`. With `meta_fn=None` (the paper's MLP) the fused step
    `_fused_mlp_kernel` is used: the same mathematics as the generic two-`meta_fn` step, with the work the
    two passes share done once.

    Args:
      posterior: the model (`l2e.Posterior`).
      config: L2EConfig (noise mode and output scales static; lr, friction, temperature the call defaults).
      meta_fn: a custom meta-model (`MetaFn`, outputs already scaled); None: the paper's MLP, fused.
    Returns:
      kernel(key, state, minibatch, meta_params, learning_rate=config.learning_rate, friction=config.friction,
      temperature=config.temperature) -> (L2EState, L2EInfo): meta_params φ (a flax params dict, 9 → … → 2 for
      the MLP); learning_rate = ε²·N (mean-loss units), friction C, temperature T scalars.
    """
    if meta_fn is None:
        return _fused_mlp_kernel(posterior, config)

    def kernel(key: jax.Array, state: L2EState, minibatch, meta_params: PyTree, learning_rate=config.learning_rate,
               friction=config.friction, temperature=config.temperature):
        eps, noise_std = _coefficients(config, learning_rate, friction, temperature, posterior.data_size)
        loss, g, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        avgs = update_averages(state.averages, g)
        alpha, beta_old = meta_fn(meta_params, g, state.position, state.momentum, avgs)
        noise = normal_like(key, state.position)
        kick = functools.partial(learned_momentum, step_size=eps, friction=friction, noise_std=noise_std)
        mom = jax.tree.map(kick, state.momentum, grad_u, alpha, beta_old, noise)
        _, beta_new = meta_fn(meta_params, g, state.position, mom, avgs)
        pos = jax.tree.map(functools.partial(position_update, step_size=eps), state.position, beta_new)
        kinetic = tree_vdot(*settled((mom, beta_new)))
        return L2EState(pos, mom, avgs, state.step + 1), L2EInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def mlp_from_preactivation(meta_params: PyTree, pre: jax.Array, r_hat: jax.Array, cols: slice) -> jax.Array:
    """The meta-MLP's outputs `cols` from the first layer's pre-activation without the momentum term.

    Args:
      meta_params: φ, the paper-form MLP's flax params.
      pre: F·W1[other features] + b1, (d, hidden).
      r_hat: the normalised momentum feature, (d,).
      cols: the output columns wanted (slice of 0 … 1).
    Returns:
      (d, len(cols)) unscaled outputs.
    """
    (w1, _), *hidden, (w3, b3) = mlp_layers(meta_params)
    h = jax.nn.relu(pre + r_hat[:, None] * w1[FEATURE_NAMES.index("momentum")][None, :])
    for w, b in hidden:
        h = jax.nn.relu(h @ w + b)
    return h @ w3[:, cols] + b3[cols]


def _rms_rows(rows: jax.Array) -> jax.Array:
    """(k, n): each row scaled to unit RMS (the meta-model's per-tensor feature normalisation)."""
    return rows * jax.lax.rsqrt(NORM_EPS + jnp.mean(jnp.square(rows), axis=1, keepdims=True))


def _flat(leaves) -> jax.Array:
    return jnp.concatenate([leaf.reshape(-1) for leaf in leaves])


_FIXED = np.asarray([i for i in range(NUM_FEATURES) if i != FEATURE_NAMES.index("momentum")])

BLOCK_ROWS = 16384
BLOCK_MIN_D = 65536
"""On XLA:CPU, for d > BLOCK_MIN_D coordinates, the fused step's meta-MLP runs in blocks of BLOCK_ROWS coordinates
(first layer included, `lax.map`): the (block, hidden) activations stay in cache instead of streaming (d, hidden)
arrays through memory. Measured (`python -m bench --only step_cost`, quiet machine): the MLP 3.1–3.6× faster on the
269k / 126k / 106k-parameter families with α, β bit-identical and pass 2's β within 1e-10 relative; at d = 32k
blocking was 1.16× slower, hence the threshold. GPU/TPU keep the one-call path."""


def _fixed_features(gs, xs, ms) -> jax.Array:
    """F (d, 8): the 8 normalised features other than the momentum, rows in jax.tree order (leaves gs, xs of ḡ
    and θ; ms of the averages, (6, *shape))."""
    return jnp.concatenate([  # columns FEATURE_NAMES without momentum
        _rms_rows(jnp.concatenate([gl.reshape(1, -1), xl.reshape(1, -1), ml.reshape(len(DECAYS), -1)])).T
        for gl, xl, ml in zip(gs, xs, ms)])


def _fixed_preactivation(meta_params: PyTree, gs, xs, ms) -> jax.Array:
    """P = F·W1[fixed] + b1 (d, hidden): the first layer on `_fixed_features`."""
    (w1, b1), *_ = mlp_layers(meta_params)
    return _fixed_features(gs, xs, ms) @ w1[_FIXED] + b1


def _blocked(meta_params: PyTree, feats: jax.Array, r_hat: jax.Array, cols: slice) -> jax.Array:
    """The meta-MLP's outputs `cols` (d, len(cols)) from F (d, 8) and r̂ (d,), BLOCK_ROWS rows at a time (zero-padded
    rows are dropped); the first layer is recomputed per block, so nothing (d, hidden) is materialised."""
    (w1, b1), *_ = mlp_layers(meta_params)
    d = feats.shape[0]
    pad = (-d) % BLOCK_ROWS
    blocks = (jnp.pad(feats, ((0, pad), (0, 0))).reshape(-1, BLOCK_ROWS, feats.shape[1]),
              jnp.pad(r_hat, (0, pad)).reshape(-1, BLOCK_ROWS))
    out = jax.lax.map(lambda b: mlp_from_preactivation(meta_params, b[0] @ w1[_FIXED] + b1, b[1], cols), blocks)
    return out.reshape(-1, out.shape[-1])[:d]


def _applied_kinetic(position: PyTree, new: L2EState, eps) -> jax.Array:
    """Σ r'·β with β as applied, (θ' − θ)/ε, from the finished new state (ε the physical step).

    The optimisation barrier keeps this reduction out of the step's fusions (reading β or r' inside them
    changes how XLA:CPU fuses the per-tensor reductions, and with it the state's last bits). Equals
    Σ r'·β(θ, r') up to the rounding of θ' (relative error ~ulp(θ)/(ε·|β|) per coordinate, averaging out
    over coordinates)."""
    pos, mom = settled((new.position, new.momentum))
    return tree_vdot(mom, jax.tree.map(jnp.subtract, pos, position)) / eps


def _fused_mlp_kernel(posterior: Posterior, config: L2EConfig):
    """The L2E step with the paper's MLP, fused (measured 1.37 → 1.03 × an SGHMC step on a 32k-parameter CNN).

    Only the momentum feature changes between the two meta-model passes, so the other 8 normalised
    features and their first-layer pre-activation P = F·W1[fixed] + b1 (d × hidden) are computed once per
    step; each pass adds the momentum's rank-1 term r̂ ⊗ W1[momentum]. Updates run on one flat (d,)
    vector (coordinates in jax.tree order, as `features`), and pass 2 computes only the β output.
    """
    a_scale, b_scale = config.alpha_scale, config.beta_scale

    def kernel(key: jax.Array, state: L2EState, minibatch, meta_params: PyTree, learning_rate=config.learning_rate,
               friction=config.friction, temperature=config.temperature):
        check_mlp_shapes(meta_params)  # at trace time: shapes are static
        eps, noise_std = _coefficients(config, learning_rate, friction, temperature, posterior.data_size)
        loss, g, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        avgs = update_averages(state.averages, g)
        xs, treedef = jax.tree.flatten(state.position)
        bounds = np.cumsum([0] + [x.size for x in xs])
        blocked = int(bounds[-1]) > BLOCK_MIN_D and jax.default_backend() == "cpu"
        if blocked:
            feats = _fixed_features(jax.tree.leaves(g), xs, jax.tree.leaves(avgs))
        else:
            pre = _fixed_preactivation(meta_params, jax.tree.leaves(g), xs, jax.tree.leaves(avgs))

        def mlp(r_flat, cols):
            r_hat = jnp.concatenate([_rms_rows(r_flat[None, lo:hi])[0] for lo, hi in zip(bounds[:-1], bounds[1:])])
            if blocked:
                return _blocked(meta_params, feats, r_hat, cols)
            return mlp_from_preactivation(meta_params, pre, r_hat, cols)

        r = _flat(jax.tree.leaves(state.momentum))
        out = mlp(r, slice(0, 2))
        z = jax.random.normal(key, r.shape, r.dtype)  # = normal_like(key, position), flattened
        mom = learned_momentum(r, _flat(jax.tree.leaves(grad_u)), a_scale * out[:, 0], out[:, 1], z, eps,
                               friction * b_scale, noise_std)
        x_flat, pos_step = _flat(xs), eps * b_scale
        pos = position_update(x_flat, mlp(mom, slice(1, 2))[:, 0], pos_step)

        def unflat(v):
            leaves = [v[lo:hi].reshape(x.shape) for lo, hi, x in zip(bounds[:-1], bounds[1:], xs)]
            return jax.tree.unflatten(treedef, leaves)

        new = L2EState(unflat(pos), unflat(mom), avgs, state.step + 1)
        kinetic = _applied_kinetic(state.position, new, eps)
        return new, L2EInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def l2e(posterior: Posterior, meta_params: PyTree, config: L2EConfig = L2EConfig(),
        meta_fn: MetaFn | None = None) -> SamplingAlgorithm:
    """A ready L2E sampler.

    Args:
      posterior: the model (`l2e.Posterior`).
      meta_params: φ, the meta-model's flax params (9 → … → 2 for the paper's MLP).
      config: L2EConfig (lr = ε²·N, friction C, temperature T, output scales, noise mode).
      meta_fn: a custom meta-model; None: the paper's MLP (fused step).
    Returns:
      SamplingAlgorithm: init(position) -> L2EState, step(key, state, minibatch) -> (L2EState, L2EInfo).
    Raises:
      ValueError: `meta_params` is not a 9 → … → 2 meta-model (with the paper's MLP, `meta_fn=None`).
    """
    if meta_fn is None:
        check_mlp_shapes(meta_params)
    kernel = build_kernel(posterior, config, meta_fn)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (32, 32), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ of the paper-form meta-model, NUM_FEATURES → hidden → 2 (a flax params dict).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      start: "sghmc" — fitted so that α ≈ 0 and β ≈ the normalised momentum (an SGHMC-like step: θ moves along its
        per-tensor normalised momentum; `l2e.meta_model.sghmc_like_meta_params`); "random" — haiku-default init
        (the paper's).
    Returns:
      φ, {"Dense_0": {"kernel": (9, h1), "bias": (h1,)}, …, "Dense_n": {"kernel": (h_n, 2), "bias": (2,)}}.
    """
    if start == "sghmc":
        return sghmc_like_meta_params(key, hidden)
    if start == "random":
        return random_meta_params(key, hidden)
    raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")


LEARNED = LearnedSampler(
    name="l2e", title="L2E (paper form)", config=L2EConfig, config_group="sampler", init=init,
    build_kernel=build_kernel, factory=l2e, features=FEATURE_NAMES, outputs=2, init_meta_params=init_meta_params,
    lrs=(0.25, 0.5, 1.0), shipped=(Shipped("paper-form"), Shipped("small-l2e", "small_l2e")), samples=False,
)
"""The paper-form L2E in the learned-sampler registry (l2e.learned): not a sampler for general φ (docs/sampling.md)."""
