"""SGHMC with persistent momentum (Chen et al., 2014), physical form, mass M = I, symplectic Euler:

r ← r − ε∇Ũ(θ) − εC·r + N(0, 2CεT),   θ ← θ + ε·r,   with ε = sqrt(lr/N).

Momentum starts at 0 and is never resampled (unlike `blackjax.sghmc`).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import physical_step_size, position_update, sghmc_momentum, sghmc_noise_std
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["SGHMCInfo", "SGHMCState", "build_kernel", "init", "sghmc"]


class SGHMCState(NamedTuple):
    """position: θ (pytree); momentum: r (pytree like θ, physical units: θ moves by ε·r); step: int32 scalar,
    updates done."""

    position: PyTree
    momentum: PyTree
    step: jax.Array


class SGHMCInfo(NamedTuple):
    """Per-step diagnostics of SGHMC (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ r'² at the new momentum (= Σ r'·∇_rK for K = ½|r|², nats; ≈ d·T at equilibrium, so its mean
    ÷ d is T_kin).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> SGHMCState:
    """The SGHMC state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      SGHMCState with momentum 0 and step 0.
    """
    return SGHMCState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The SGHMC kernel (module doc); the key draws the momentum noise.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, friction, temperature=1.0) -> (SGHMCState, SGHMCInfo):
      learning_rate = ε²·N (mean-loss units), friction C (1/time), temperature T; scalars, traceable.
    """

    def kernel(key: jax.Array, state: SGHMCState, minibatch, learning_rate, friction, temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        kick = functools.partial(sghmc_momentum, step_size=eps, friction=friction, noise_std=noise_std)
        mom = jax.tree.map(kick, state.momentum, grad_u, noise)
        pos = jax.tree.map(functools.partial(position_update, step_size=eps), state.position, mom)
        kinetic = tree_vdot(settled(mom), settled(mom))
        return SGHMCState(pos, mom, state.step + 1), SGHMCInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def sghmc(
    posterior: Posterior, learning_rate: float, friction: float = 0.1, temperature: float = 1.0
) -> SamplingAlgorithm:
    """SGHMC with persistent momentum (module doc).

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε²·N > 0 (mean-loss units).
      friction: C > 0 (1/time).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> SGHMCState, step(key, state, minibatch) -> (SGHMCState, SGHMCInfo).
    """
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGHMCState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, temperature)

    return SamplingAlgorithm(init, step)
