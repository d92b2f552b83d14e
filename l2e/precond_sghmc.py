"""Preconditioned SGHMC: a diagonal mass adapted during burn-in and frozen for the sampling window.

Burn-in (updates t < freeze_step) is SGHMC with M = I; statistics are gathered over the adaptation window, the last
`adapt_fraction` of the burn-in. At update freeze_step the inverse mass M⁻¹ (a diagonal, normalised to largest value
1: no coordinate moves further per update than under SGHMC at the same lr, so an lr that is stable for SGHMC stays
stable, and the grid reaches larger lr to let the preconditioner pay off) is set and the momentum rescaled r ← r·sqrt(M) (r ~ N(0, T) becomes
r ~ N(0, M·T), the window's law). The window is SGHMC with that constant mass:

    r' = r − ε·∇Ũ(θ) − ε·C·M⁻¹r + N(0, 2·C·ε·T),     θ' = θ + ε·M⁻¹r',     ε = sqrt(lr/N),

whose stationary law is exp(−U(θ)/T − ½rᵀM⁻¹r/T) for every constant M: correct by construction. Two rules:

- "rmsprop" (Izmailov et al., 2021; pSGLD's preconditioner frozen): V = exponential average (decay RMS_DECAY) of the
  squared per-datum gradient ḡ² over the adaptation window, M⁻¹ ∝ 1 / (RMS_EPS + sqrt V).
- "fisher" (Seyboldt, Carlson & Carpenter, 2026, as nutpie adapts its diagonal): M⁻¹ ∝ σ², σ_i = (Var θ_i /
  Var ∇_iU)^{1/4}, the variances over the adaptation window's states and potential gradients (Welford). The
  minibatch gradient's noise variance is subtracted from Var ∇_iU: during the adaptation window the minibatch is cut
  into two halves (every leaf's leading axis; an even batch size) and ∇Ũ = (∇Ũ₁ + ∇Ũ₂)/2 — the full minibatch's
  gradient, at the same cost — while (∇Ũ₁ − ∇Ũ₂)²/4 estimates that gradient's noise variance per coordinate
  (for i.i.d. examples Var(ḡ_B) = σ²/B and Var(ḡ_{B/2} − ḡ'_{B/2}) = 4σ²/B); its mean over the window is
  subtracted, floored at FLOOR × Var ∇_iU. `noise_halves=False` skips the split (for minibatches without a batch
  axis, e.g. one noise vector).

log M⁻¹ is shrunk towards its mean over all coordinates with weight SHRINK/(n + SHRINK) for n adaptation states
("fisher"; Stan's regularisation of its adapted diagonal, in log space so it has no units), shifted so its largest
value is 0 and clipped below at −LOG_CLIP. Cost per update: SGHMC's plus a few elementwise ops (the
adaptation statistics only inside the adaptation window).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.adaptation import halved_gradients, welford
from l2e.chains import PHASES, adaptation_start
from l2e.checks import check_flag, check_in_range, check_positive, check_step_count
from l2e.diffusions import physical_step_size, sghmc_noise_std
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["PRECONDITIONERS", "PrecondSGHMCInfo", "PrecondSGHMCState", "build_kernel", "init", "precond_sghmc"]

PRECONDITIONERS = ("rmsprop", "fisher")
RMS_DECAY, RMS_EPS = 0.99, 1e-8
FLOOR = 1e-2
LOG_CLIP = 10.0
SHRINK = 5.0


class PrecondSGHMCState(NamedTuple):
    """position, momentum: θ, r; step: updates done (int32 scalar); inv_mass: M⁻¹ per coordinate (1 before the
    freeze); count: states in the adaptation window so far (f32 scalar); mean_x, m2_x, mean_g, m2_g: Welford mean and
    sum of squared deviations of θ and ∇Ũ ("fisher"); sq: exponential average of ḡ² ("rmsprop"); noise: running mean
    of the minibatch-noise variance estimate of ∇Ũ ("fisher")."""

    position: PyTree
    momentum: PyTree
    step: jax.Array
    inv_mass: PyTree
    count: jax.Array
    mean_x: PyTree
    m2_x: PyTree
    mean_g: PyTree
    m2_g: PyTree
    sq: PyTree
    noise: PyTree


class PrecondSGHMCInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and kinetic finite (bool scalar);
    kinetic: Σ r'·M⁻¹r' at the new momentum (= Σ r'·∇_rK; ≈ d·T at equilibrium)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> PrecondSGHMCState:
    """The state before the first update: r₀ = 0, M⁻¹ = 1, empty statistics.

    Args:
      position: θ₀, a pytree of float32 arrays.
    Returns:
      PrecondSGHMCState.
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    ones = jax.tree.map(jnp.ones_like, position)
    return PrecondSGHMCState(position, zeros, jnp.zeros((), jnp.int32), ones, jnp.zeros((), jnp.float32),
                             zeros, zeros, zeros, zeros, zeros, zeros)


def _normalised(log_inv_mass: PyTree, weight=1.0) -> PyTree:
    """M⁻¹ = exp(clip(s − max s, −LOG_CLIP, 0)) with s = weight·log M⁻¹ (the shrinkage towards the mean, which the
    shift to max s removes again): largest value 1, spread scaled by `weight` ∈ (0, 1]."""
    top = jnp.max(jnp.stack([jnp.max(v) for v in jax.tree.leaves(log_inv_mass)]))
    return jax.tree.map(lambda v: jnp.exp(jnp.clip(weight * (v - top), -LOG_CLIP, 0.0)), log_inv_mass)


def _inverse_mass(state: PrecondSGHMCState, preconditioner: str) -> PyTree:
    if preconditioner == "rmsprop":
        return _normalised(jax.tree.map(lambda v: -jnp.log(RMS_EPS + jnp.sqrt(v)), state.sq))
    n = jnp.maximum(state.count - 1.0, 1.0)

    def log_sigma_sq(m2x, m2g, noise):  # log σ² = ½·(log Var θ − log Var ∇U), noise subtracted with a floor
        var_x, var_g = m2x / n + 1e-30, m2g / n
        var_g = jnp.maximum(var_g - noise, FLOOR * var_g) + 1e-30
        return 0.5 * (jnp.log(var_x) - jnp.log(var_g))

    return _normalised(jax.tree.map(log_sigma_sq, state.m2_x, state.m2_g, state.noise),
                       state.count / (state.count + SHRINK))


def _gradients(posterior: Posterior, state: PrecondSGHMCState, minibatch, split: bool, inside):
    """(loss, ∇Ũ, noise-variance estimate or None): with `split`, l2e.adaptation.halved_gradients; else one
    gradient."""
    if not split:
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        return loss, grad_u, None
    return halved_gradients(posterior, state.position, minibatch, inside)


def _adapt(state: PrecondSGHMCState, grad_u, noise, preconditioner: str, data_size: int) -> PrecondSGHMCState:
    """The statistics with this update's θ and ∇Ũ added (called inside the adaptation window only)."""
    count = state.count + 1.0
    new = state._replace(count=count)
    if preconditioner == "rmsprop":
        sq = jax.tree.map(lambda v, g: RMS_DECAY * v + (1 - RMS_DECAY) * jnp.square(g / data_size), state.sq, grad_u)
        return new._replace(sq=sq)
    mean_x, m2_x = welford(count, state.mean_x, state.m2_x, state.position)
    mean_g, m2_g = welford(count, state.mean_g, state.m2_g, grad_u)
    new = new._replace(mean_x=mean_x, m2_x=m2_x, mean_g=mean_g, m2_g=m2_g)
    if noise is not None:
        new = new._replace(noise=jax.tree.map(lambda m, v: m + (v - m) / count, state.noise, noise))
    return new


def _freeze(state: PrecondSGHMCState, preconditioner: str) -> PrecondSGHMCState:
    """M⁻¹ set from the statistics and the momentum rescaled r ← r·sqrt(M)."""
    inv_mass = _inverse_mass(state, preconditioner)
    mom = jax.tree.map(lambda r, m: r / jnp.sqrt(m), state.momentum, inv_mass)
    return state._replace(inv_mass=inv_mass, momentum=mom)


def build_kernel(posterior: Posterior, preconditioner: str = "fisher", freeze_step: int = 1000,
                 adapt_fraction: float = 0.5, noise_halves: bool = True, phase: str | None = None):
    """kernel(key, state, minibatch, learning_rate, friction, temperature=1.0) -> (PrecondSGHMCState,
    PrecondSGHMCInfo).

    Args:
      posterior: the target (l2e.Posterior).
      preconditioner: "rmsprop" or "fisher" (module docstring).
      freeze_step: the update at which M⁻¹ is set and frozen (the first update of the sampling window), ≥ 1; an
        int, or a traced integer scalar (one compiled kernel for every freeze step).
      adapt_fraction: the adaptation window is the last adapt_fraction of the burn-in, in (0, 1].
      noise_halves: "fisher" only: estimate the minibatch-noise variance from two half-batches.
      phase: None — one kernel for every update, branching on the step; "burn_in" / "adapt" / "window" — a kernel
        for the updates before the adaptation window / in it / after freeze_step only, without those branches and
        with the same numbers there (l2e.chains.freeze_phase says which a chunk may use).
    Returns:
      The kernel; learning_rate = ε²·N (mean-loss units), friction = C, temperature = T are call arguments.
    """
    if preconditioner not in PRECONDITIONERS:
        raise ValueError(f"preconditioner must be one of {PRECONDITIONERS}, got {preconditioner!r}")
    if phase not in (None,) + PHASES:
        raise ValueError(f"phase must be None or one of {', '.join(PHASES)}, got {phase!r}")
    check_step_count("freeze_step", freeze_step, 1)
    check_in_range("adapt_fraction", adapt_fraction, 0, 1, include_low=False)
    check_flag(noise_halves=noise_halves)
    freeze = freeze_step if isinstance(freeze_step, jax.core.Tracer) else int(freeze_step)
    adapt_start = adaptation_start(freeze, adapt_fraction)
    split = preconditioner == "fisher" and noise_halves

    def kernel(key: jax.Array, state: PrecondSGHMCState, minibatch, learning_rate, friction, temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        if phase is None:
            state = jax.lax.cond(state.step == freeze, lambda s: _freeze(s, preconditioner), lambda s: s, state)
        inside = (state.step >= adapt_start) & (state.step < freeze) if phase is None else phase == "adapt"
        loss, grad_u, noise_var = _gradients(posterior, state, minibatch, split and inside is not False, inside)
        if phase is None:
            state = jax.lax.cond(inside, lambda s: _adapt(s, grad_u, noise_var, preconditioner, posterior.data_size),
                                 lambda s: s, state)
        elif inside:
            state = _adapt(state, grad_u, noise_var, preconditioner, posterior.data_size)
        z = normal_like(key, state.position)
        mom = jax.tree.map(lambda r, g, m, n: r - eps * g - eps * friction * m * r + noise_std * n,
                           state.momentum, grad_u, state.inv_mass, z)
        velocity = jax.tree.map(jnp.multiply, state.inv_mass, mom)
        pos = jax.tree.map(lambda x, v: x + eps * v, state.position, velocity)
        kinetic = tree_vdot(*settled((mom, velocity)))
        new = state._replace(position=pos, momentum=mom, step=state.step + 1)
        return new, PrecondSGHMCInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def precond_sghmc(posterior: Posterior, learning_rate: float, friction: float = 1.0, temperature: float = 1.0,
                  preconditioner: str = "fisher", freeze_step: int = 1000, adapt_fraction: float = 0.5,
                  noise_halves: bool = True, phase: str | None = None) -> SamplingAlgorithm:
    """Preconditioned SGHMC with a diagonal mass adapted in burn-in and frozen (module docstring).

    Args:
      posterior: the target (l2e.Posterior).
      learning_rate: lr = ε²·N (mean-loss units, as l2e.sghmc).
      friction: C.
      temperature: T.
      preconditioner: "rmsprop" or "fisher".
      freeze_step: the first update of the sampling window (M⁻¹ frozen from there on).
      adapt_fraction: the last fraction of the burn-in over which the statistics are gathered.
      noise_halves: "fisher": subtract the minibatch-noise variance estimated from two half-batches.
      phase: None (a step for every update) or a step for one phase's updates only (`build_kernel`).
    Returns:
      SamplingAlgorithm: init(position) -> PrecondSGHMCState; step(key, state, minibatch) -> (state, PrecondSGHMCInfo).
    """
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    kernel = build_kernel(posterior, preconditioner, freeze_step, adapt_fraction, noise_halves, phase)

    def step(key: jax.Array, state: PrecondSGHMCState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, temperature)

    return SamplingAlgorithm(init, step)
