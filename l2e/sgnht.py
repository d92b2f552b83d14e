"""Stochastic gradient Nosé–Hoover thermostat, SGNHT (Ding et al., 2014, Algorithm 1), mass I, mean-loss units:

r ← r − ε∇Ũ(θ) − εξ·r + N(0, 2AεT),   θ ← θ + ε·r,   ξ ← ξ + ε·(r·r/d − T),   with ε = sqrt(lr/N).

The thermostat ξ (a scalar) takes the place of SGHMC's friction and adapts so that the kinetic temperature
r·r/d tracks T, absorbing the unknown minibatch gradient noise; A ("diffusion") is the injected noise's
friction-equivalent (SGHMC's C). ξ starts at A; the momentum starts at 0 and is never resampled.

Relation to `blackjax.sgmcmc.sgnht` (step size h, `alpha` = A, `beta` = 0): the momentum and thermostat
updates are the same (h = ε, ∇log p = −∇Ũ, noise sqrt(h·T·2A)), but blackjax moves θ with the momentum
*before* the update (θ ← θ + h·r, explicit Euler) while this module moves it with the updated one
(symplectic Euler, as `l2e.sghmc`); blackjax also starts from r ~ N(0, I).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import physical_step_size, position_update, sghmc_momentum, sghmc_noise_std
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, tree_size, tree_vdot

DEFAULT_DIFFUSION = 0.1


class SGNHTState(NamedTuple):
    """position: θ (pytree); momentum: r (pytree like θ, physical units: θ moves by ε·r); thermostat: ξ, a scalar
    in friction units (1/time); step: int32 scalar, updates done."""

    position: PyTree
    momentum: PyTree
    thermostat: jax.Array
    step: jax.Array


class SGNHTInfo(NamedTuple):
    """Per-step diagnostics of SGNHT (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ r'² at the new momentum (= Σ r'·∇_rK for K = ½|r|², nats; ≈ d·T at equilibrium, which the
    thermostat enforces).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree, thermostat: float = DEFAULT_DIFFUSION) -> SGNHTState:
    """The SGNHT state at `position`: momentum 0, ξ = `thermostat` (Ding et al. start ξ at the diffusion A).

    Args:
      position: θ, a pytree of float arrays.
      thermostat: the initial ξ (1/time).
    Returns:
      SGNHTState (step 0).
    """
    dtype = jax.tree.leaves(position)[0].dtype
    return SGNHTState(position, jax.tree.map(jnp.zeros_like, position), jnp.asarray(thermostat, dtype),
                      jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The SGNHT kernel (module doc); the key draws the momentum noise.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, diffusion=DEFAULT_DIFFUSION, temperature=1.0) ->
      (SGNHTState, SGNHTInfo): learning_rate = ε²·N (mean-loss units), diffusion A (1/time), temperature T;
      scalars, traceable.
    """

    def kernel(key: jax.Array, state: SGNHTState, minibatch, learning_rate, diffusion=DEFAULT_DIFFUSION,
               temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, diffusion, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        kick = functools.partial(sghmc_momentum, step_size=eps, friction=state.thermostat, noise_std=noise_std)
        mom = jax.tree.map(kick, state.momentum, grad_u, noise)
        pos = jax.tree.map(functools.partial(position_update, step_size=eps), state.position, mom)
        kinetic = tree_vdot(mom, mom)
        xi = state.thermostat + eps * (kinetic / tree_size(mom) - temperature)
        return SGNHTState(pos, mom, xi, state.step + 1), SGNHTInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def sgnht(posterior: Posterior, learning_rate: float, diffusion: float = DEFAULT_DIFFUSION,
          temperature: float = 1.0) -> SamplingAlgorithm:
    """SGNHT (module doc).

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε²·N > 0 (mean-loss units).
      diffusion: A > 0 (1/time), the injected noise's friction and ξ's initial value.
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> SGNHTState (ξ = A), step(key, state, minibatch) -> (SGNHTState,
      SGNHTInfo).
    """
    check_positive(learning_rate=learning_rate, diffusion=diffusion, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGNHTState, minibatch):
        return kernel(key, state, minibatch, learning_rate, diffusion, temperature)

    return SamplingAlgorithm(functools.partial(init, thermostat=diffusion), step)
