"""Functional SGHMC (Wu, Xuan & Lu, 2025): SGHMC on the GP-prior potential Ũ of a `FunctionalPosterior`
(l2e.fsgmcmc; docs/samplers.md § Functional SGLD / SGHMC), ε = sqrt(lr/N), mass I, **position first**:

θ_{t+1} = θ_t + ε·r_t,   r_{t+1} = r_t − ε∇Ũ(θ_{t+1}) − εC·r_t + N(0, 2CεT)

(blackjax's `sgmcmc.diffusions.sghmc` with alpha = C, beta = 0; `l2e.sghmc` updates the momentum first). The
measurement points and the minibatch of step t enter ∇Ũ(θ_{t+1}). The momentum starts at 0 and persists, unless
`resample_momentum_every` = m redraws r_t ~ N(0, T·I) before every m-th update (Algorithm 2 per a third-party
reading). The key is split in three: measurement points, momentum noise, momentum redraw.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from l2e.checks import check_positive, check_step_count
from l2e.diffusions import physical_step_size, position_update, sghmc_momentum, sghmc_noise_std
from l2e.fsgmcmc import FunctionalPosterior, functional_posterior, per_class_kernel, rbf_kernel
from l2e.types import PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["FSGHMCInfo", "FSGHMCState", "FunctionalPosterior", "build_kernel", "fsghmc", "functional_posterior",
           "init", "per_class_kernel", "rbf_kernel"]


class FSGHMCState(NamedTuple):
    """position: θ (pytree); momentum: r (pytree like θ, physical units: θ moves by ε·r); step: int32 scalar,
    updates done; chol_ok: bool scalar, every Cholesky factor so far was finite; jitter: f32 scalar, the largest
    relative jitter used so far (× mean diag K)."""

    position: PyTree
    momentum: PyTree
    step: jax.Array
    chol_ok: jax.Array
    jitter: jax.Array


class FSGHMCInfo(NamedTuple):
    """Per-step diagnostics of fSGHMC (all scalars).

    loss: f32, mean minibatch NLL at the *post-update* θ_{t+1}, where fSGHMC takes its gradient (nats per example);
    is_finite: bool, loss and kinetic finite; kinetic: f32, Σ r_{t+1}² at the new momentum (= Σ r·∇_rK for
    K = ½|r|²; its mean ÷ d is T_kin, ≈ T at equilibrium); chol_ok: bool, this step's Cholesky factor of K_MM was
    finite; prior_energy: f32, ½ Σ_c rᵀK⁻¹r at θ_{t+1} and this step's points (nats); jitter: f32, this step's
    relative jitter (× mean diag K).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    chol_ok: jax.Array
    prior_energy: jax.Array
    jitter: jax.Array


def init(position: PyTree) -> FSGHMCState:
    """The fSGHMC state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      FSGHMCState with momentum 0, step 0, chol_ok True, jitter 0.
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    return FSGHMCState(position, zeros, jnp.zeros((), jnp.int32), jnp.ones((), bool), jnp.zeros((), jnp.float32))


def build_kernel(posterior: FunctionalPosterior, resample_momentum_every: Optional[int] = None):
    """The fSGHMC kernel, position first (module doc):

        θ_{t+1} = θ_t + ε·r_t,   r_{t+1} = r_t − ε∇Ũ(θ_{t+1}) − εC·r_t + N(0, 2CεT).

    Args:
      posterior: the functional-prior potential (`l2e.fsgmcmc.functional_posterior`).
      resample_momentum_every: m (static): draw r_t ~ N(0, T·I) before every m-th update; None = persistent
        momentum.
    Returns:
      kernel(key, state, minibatch, learning_rate, friction, temperature=1.0) -> (FSGHMCState, FSGHMCInfo):
      learning_rate = ε²·N (mean-loss units), friction C (1/time), temperature T; scalars, traceable.
    """

    def kernel(key: jax.Array, state: FSGHMCState, minibatch, learning_rate, friction, temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        k_m, k_n, k_r = jax.random.split(key, 3)
        mom = state.momentum
        if resample_momentum_every is not None:
            fresh = jax.tree.map(lambda z: jnp.sqrt(temperature) * z, normal_like(k_r, mom))
            redraw = jnp.mod(state.step, resample_momentum_every) == 0
            mom = jax.tree.map(lambda a, b: jnp.where(redraw, a, b), fresh, mom)
        pos = jax.tree.map(functools.partial(position_update, step_size=eps), state.position, mom)
        loss, grad_u, prior = posterior.value_and_potential_grad(pos, minibatch, k_m)
        noise = normal_like(k_n, pos)
        kick = functools.partial(sghmc_momentum, step_size=eps, friction=friction, noise_std=noise_std)
        mom = jax.tree.map(kick, mom, grad_u, noise)
        kinetic = tree_vdot(settled(mom), settled(mom))
        info = FSGHMCInfo(loss, all_finite(loss, kinetic), kinetic, prior.chol_ok, prior.prior_energy, prior.jitter)
        jit = jnp.maximum(state.jitter, prior.jitter.astype(state.jitter.dtype))
        return FSGHMCState(pos, mom, state.step + 1, state.chol_ok & prior.chol_ok, jit), info

    return kernel


def fsghmc(
    posterior: FunctionalPosterior,
    learning_rate: float,
    friction: float = 0.1,
    temperature: float = 1.0,
    resample_momentum_every: Optional[int] = None,
) -> SamplingAlgorithm:
    """fSGHMC on Ũ (ε = sqrt(lr/N), mass I, persistent momentum starting at 0), position first:
    θ ← θ + ε·r,  r ← r − ε∇Ũ(θ_new) − εC·r + N(0, 2CεT)  (`l2e.sghmc` updates the momentum first).

    Args:
      posterior: the functional-prior potential (`l2e.fsgmcmc.functional_posterior`).
      learning_rate: lr = ε²·N > 0 (mean-loss units).
      friction: C > 0 (1/time).
      temperature: T > 0 (1: the posterior).
      resample_momentum_every: m: draw r ~ N(0, T·I) before every m-th update (Algorithm 2 per a third-party
        reading); None (default) = persistent momentum.
    Returns:
      SamplingAlgorithm: init(position) -> FSGHMCState, step(key, state, minibatch) -> (FSGHMCState, FSGHMCInfo).
    """
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    if resample_momentum_every is not None:
        check_step_count("resample_momentum_every", resample_momentum_every, 1)
    kernel = build_kernel(posterior, resample_momentum_every)

    def step(key: jax.Array, state: FSGHMCState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, temperature)

    return SamplingAlgorithm(init, step)
