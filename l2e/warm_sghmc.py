"""Warm-started SGHMC (MILE's recipe with a stochastic optimiser): Adam on the minibatch potential towards a MAP for
the first `warm_steps` updates, then SGHMC at temperature T from where Adam stopped.

    t < warm_steps:  θ ← θ + Adam(∇Ũ(θ)/N; lr = warm_lr)          (optax.adam, default moments; r stays 0)
    t ≥ warm_steps:  r ← r − ε·∇Ũ(θ) − ε·C·r + N(0, 2·C·ε·T),  θ ← θ + ε·r,   ε = sqrt(lr/N)

The optimiser phase is burn-in only (no sample is taken there in the evaluation's schedules), so the chain's law in
the window is SGHMC's: correct whatever the warm start did. One minibatch gradient per update in both phases.
warm_lr is in parameter units per update (Adam's step is ≈ warm_lr per coordinate); ∇Ũ/N is the gradient of the
mean minibatch loss plus the prior's share, so the optimiser's target is the MAP.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from l2e.checks import check_positive, check_step_count
from l2e.diffusions import physical_step_size, position_update, sghmc_momentum, sghmc_noise_std
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["WarmSGHMCInfo", "WarmSGHMCState", "build_kernel", "init", "warm_sghmc"]


class WarmSGHMCState(NamedTuple):
    """position, momentum: θ, r (r = 0 through the optimiser phase); opt_state: optax Adam's state (count, first and
    second moments, pytrees like θ); step: updates done (int32 scalar)."""

    position: PyTree
    momentum: PyTree
    opt_state: Any
    step: jax.Array


class WarmSGHMCInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and kinetic finite (bool scalar);
    kinetic: Σ r'² at the new momentum (0 in the optimiser phase; ≈ d·T at equilibrium in the SGHMC phase)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> WarmSGHMCState:
    """The state before the first update: r₀ = 0, Adam's state empty.

    Args:
      position: θ₀, a pytree of float32 arrays.
    Returns:
      WarmSGHMCState.
    """
    return WarmSGHMCState(position, jax.tree.map(jnp.zeros_like, position), optax.adam(1.0).init(position),
                          jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior, warm_steps: int):
    """kernel(key, state, minibatch, learning_rate, friction, warm_lr, temperature=1.0) -> (WarmSGHMCState,
    WarmSGHMCInfo).

    Args:
      posterior: the target (l2e.Posterior).
      warm_steps: updates of the optimiser phase (≥ 0; an int, or a traced integer scalar).
    Returns:
      The kernel; learning_rate = ε²·N (SGHMC, mean-loss units), friction = C, warm_lr = Adam's step (parameter
      units), temperature = T are call arguments.
    """
    check_step_count("warm_steps", warm_steps, 0)
    n = posterior.data_size

    def kernel(key: jax.Array, state: WarmSGHMCState, minibatch, learning_rate, friction, warm_lr,
               temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, n)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)

        def optimise(s):
            updates, opt_state = optax.adam(warm_lr).update(jax.tree.map(lambda g: g / n, grad_u), s.opt_state)
            return s._replace(position=optax.apply_updates(s.position, updates), opt_state=opt_state)

        def sample(s):
            kick = functools.partial(sghmc_momentum, step_size=eps, friction=friction, noise_std=noise_std)
            mom = jax.tree.map(kick, s.momentum, grad_u, normal_like(key, s.position))
            pos = jax.tree.map(functools.partial(position_update, step_size=eps), s.position, mom)
            return s._replace(position=pos, momentum=mom)

        new = jax.lax.cond(state.step < warm_steps, optimise, sample, state)
        kinetic = tree_vdot(settled(new.momentum), settled(new.momentum))
        return new._replace(step=state.step + 1), WarmSGHMCInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def warm_sghmc(posterior: Posterior, learning_rate: float, friction: float = 1.0, warm_steps: int = 1000,
               warm_lr: float = 1e-3, temperature: float = 1.0) -> SamplingAlgorithm:
    """Adam to a MAP for `warm_steps` updates, then SGHMC (module docstring).

    Args:
      posterior: the target (l2e.Posterior).
      learning_rate: SGHMC's lr = ε²·N (mean-loss units).
      friction: SGHMC's C.
      warm_steps: updates of the optimiser phase.
      warm_lr: Adam's learning rate (parameter units per update).
      temperature: T of the SGHMC phase.
    Returns:
      SamplingAlgorithm: init(position) -> WarmSGHMCState; step(key, state, minibatch) -> (state, WarmSGHMCInfo).
    """
    check_positive(learning_rate=learning_rate, friction=friction, warm_lr=warm_lr, temperature=temperature)
    kernel = build_kernel(posterior, warm_steps)

    def step(key: jax.Array, state: WarmSGHMCState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, warm_lr, temperature)

    return SamplingAlgorithm(init, step)
