"""StepScale-L2E: SGHMC whose global step-size scale and friction a small MLP sets once, at the freeze, from burn-in
statistics — the smallest member of the learned-sampler registry (l2e.learned).

During the sampling window (updates t ≥ freeze_step) the step is SGHMC with constants ε' = s·ε and C' = c·C,

    r' = r − ε'·∇Ũ(θ) − ε'·C'·r + N(0, 2·C'·ε'·T),     θ' = θ + ε'·r',     ε = sqrt(lr/N),

so exp(−U(θ)/T − ½‖r‖²/T) is stationary for every meta-parameter value (it is SGHMC; docs/sampling.md, "Learned
samplers that are correct by construction"). (log s, log c) = LOG_BOUND·tanh(MLP_φ(f)/LOG_BOUND) of five global
features f of the burn-in, evaluated once at update freeze_step:

    0: ½·log avg(mean_i g_i²)   the gradient's scale per datum (g = ∇Ũ/N, averaged over coordinates and burn-in)
    1: ½·log mean_i θ_i²        the weights' scale at the freeze
    2: log(avg(‖r‖²/d) / T)     the burn-in's kinetic temperature relative to T (0 at equilibrium)
    3: log(N) / 10              data size
    4: log(d) / 10              dimension

(avg: exponential averages with decay STATS_DECAY over the burn-in updates.) Before freeze_step the step is SGHMC with
ε and C. An output layer of zeros gives s = c = 1: exactly `l2e.sghmc` (tests/test_step_scale.py). Cost per update:
SGHMC's plus two scalar reductions during burn-in.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from l2e.chains import freeze_at
from l2e.checks import check_positive, check_step_count
from l2e.diffusions import physical_step_size, position_update, sghmc_momentum, sghmc_noise_std
from l2e.meta_model import MetaMLP, check_mlp_shapes, hidden_sizes, mlp_layers_names
from l2e.types import (
    LearnedSampler, Posterior, Protocol, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_size,
    tree_vdot,
)

__all__ = ["FEATURE_NAMES", "LEARNED", "LOG_BOUND", "StepScaleConfig", "StepScaleInfo", "StepScaleState",
           "build_kernel", "constants", "features", "init", "init_meta_params", "step_scale"]

FEATURE_NAMES = ("log_grad_rms", "log_theta_rms", "log_kinetic_temperature", "log_data_size", "log_dim")
LOG_BOUND = 3.0
"""|log s| and |log c| are at most this: s, c within e^±3 ≈ [0.05, 20]."""
STATS_DECAY = 0.99
_TINY = 1e-12


@dataclasses.dataclass(frozen=True)
class StepScaleConfig:
    """Hyperparameters of the StepScale-L2E step.

    learning_rate: lr = ε²·N (mean-loss units), the burn-in step and the scale of the window's; friction: C, likewise;
    temperature: T; freeze_step: the update at which s and c are set and frozen (the first update of the sampling
    window).
    """

    learning_rate: float = 0.1
    friction: float = 10.0
    temperature: float = 1.0
    freeze_step: int = 1000

    def __post_init__(self):
        check_positive(learning_rate=self.learning_rate, friction=self.friction, temperature=self.temperature)
        check_step_count("freeze_step", self.freeze_step, 1)


class StepScaleState(NamedTuple):
    """position, momentum: θ, r (pytrees); step: updates done (int32 scalar); scale, friction: s and c (f32
    scalars, 1 before the freeze); avg_grad_sq: burn-in average of mean_i g_i² (g = ∇Ũ/N); avg_kinetic: burn-in
    average of ‖r‖²/d (both f32 scalars, frozen with the constants)."""

    position: PyTree
    momentum: PyTree
    step: jax.Array
    scale: jax.Array
    friction: jax.Array
    avg_grad_sq: jax.Array
    avg_kinetic: jax.Array


class StepScaleInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and kinetic finite (bool scalar);
    kinetic: Σ r'² at the new momentum (= Σ r'·∇_rK for K = ½‖r‖²; ≈ d·T at equilibrium)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> StepScaleState:
    """The state before the first update: r₀ = 0, s = c = 1, zero averages.

    Args:
      position: θ₀, a pytree of float32 arrays.
    Returns:
      StepScaleState.
    """
    one, zero = jnp.ones((), jnp.float32), jnp.zeros((), jnp.float32)
    return StepScaleState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32), one, one,
                          zero, zero)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (16,), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ, len(FEATURE_NAMES) → hidden → 2 (haiku-default init).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      start: "sghmc" — the output layer at 0, so s = c = 1: exactly SGHMC; "random" — every layer random.
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (5, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 2), (2,)}}.
    """
    if start not in ("sghmc", "random"):
        raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")
    params = MetaMLP(tuple(hidden), outputs=2).init(key, jnp.zeros((1, len(FEATURE_NAMES))))["params"]
    if start == "sghmc":
        last = mlp_layers_names(params)[-1]
        params = {**params, last: jax.tree.map(jnp.zeros_like, params[last])}
    return params


def features(state: StepScaleState, data_size: int, temperature) -> jax.Array:
    """The (1, 5) float32 feature row of the module docstring, from a state at the freeze."""
    d = tree_size(state.position)
    theta_sq = tree_vdot(state.position, state.position) / d
    return jnp.stack([0.5 * jnp.log(state.avg_grad_sq + _TINY), 0.5 * jnp.log(theta_sq + _TINY),
                      jnp.log((state.avg_kinetic + _TINY) / temperature),
                      jnp.full((), math.log(data_size) / 10.0), jnp.full((), math.log(d) / 10.0)]
                     ).astype(jnp.float32)[None, :]


def constants(meta_params: PyTree, row: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(s, c): the window's step-size and friction multipliers (f32 scalars) from the meta-model on a feature row."""
    out = MetaMLP(hidden_sizes(meta_params), outputs=2).apply({"params": meta_params}, row)[0]
    out = jnp.exp(LOG_BOUND * jnp.tanh(out / LOG_BOUND))
    return out[0], out[1]


def build_kernel(posterior: Posterior, config: StepScaleConfig = StepScaleConfig()):
    """kernel(key, state, minibatch, meta_params, learning_rate=config.learning_rate, friction=config.friction,
    temperature=config.temperature) -> (StepScaleState, StepScaleInfo).

    Args:
      posterior: the target (l2e.Posterior).
      config: the hyperparameters; freeze_step is static, the others are defaults of the kernel's call arguments.
    Returns:
      The kernel; meta_params (φ) and the hyperparameters are call arguments (traced for ES and tuning grids).
    """
    freeze, n = int(config.freeze_step), posterior.data_size

    def freeze_constants(state, meta_params, temperature):
        scale, friction = constants(meta_params, features(state, n, temperature))
        return state._replace(scale=scale, friction=friction)

    def kernel(key: jax.Array, state: StepScaleState, minibatch, meta_params: PyTree,
               learning_rate=config.learning_rate, friction=config.friction, temperature=config.temperature):
        with jax.ensure_compile_time_eval():
            eps0 = physical_step_size(learning_rate, n)
        state = jax.lax.cond(state.step == freeze, lambda s: freeze_constants(s, meta_params, temperature),
                             lambda s: s, state)
        eps, c = eps0 * state.scale, friction * state.friction
        noise_std = sghmc_noise_std(eps, c, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        kick = functools.partial(sghmc_momentum, step_size=eps, friction=c, noise_std=noise_std)
        mom = jax.tree.map(kick, state.momentum, grad_u, noise)
        pos = jax.tree.map(functools.partial(position_update, step_size=eps), state.position, mom)
        kinetic = tree_vdot(settled(mom), settled(mom))
        d = tree_size(state.position)
        burn_in = state.step < freeze
        grad_sq = tree_vdot(*settled((grad_u, grad_u))) / (float(n) * float(n) * float(d))
        avg_g = jnp.where(burn_in, STATS_DECAY * state.avg_grad_sq + (1 - STATS_DECAY) * grad_sq, state.avg_grad_sq)
        avg_k = jnp.where(burn_in, STATS_DECAY * state.avg_kinetic + (1 - STATS_DECAY) * kinetic / d,
                          state.avg_kinetic)
        new = StepScaleState(pos, mom, state.step + 1, state.scale, state.friction, avg_g, avg_k)
        return new, StepScaleInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def step_scale(posterior: Posterior, meta_params: PyTree, config: StepScaleConfig = StepScaleConfig()
               ) -> SamplingAlgorithm:
    """A ready StepScale-L2E sampler.

    Args:
      posterior: the target (l2e.Posterior).
      meta_params: φ, a 5 → … → 2 Dense stack (`init_meta_params`).
      config: StepScaleConfig.
    Returns:
      SamplingAlgorithm: init(position) -> StepScaleState; step(key, state, minibatch) -> (StepScaleState,
      StepScaleInfo).
    """
    check_mlp_shapes(meta_params, len(FEATURE_NAMES), 2)
    kernel = build_kernel(posterior, config)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


LEARNED = LearnedSampler(
    name="step_scale", title="StepScale-L2E", config=StepScaleConfig, config_group="step_scale", init=init,
    build_kernel=build_kernel, factory=step_scale, features=FEATURE_NAMES, outputs=2,
    init_meta_params=init_meta_params, protocol=Protocol(window=freeze_at),
)
"""StepScale-L2E in the learned-sampler registry: no shipped checkpoint (meta-train one with
`python -m meta_train --set sampler_kind=step_scale …`)."""
