"""Cyclical SGHMC (Zhang et al., 2020) in SGD-with-momentum form, mean-loss units.

Cycle length L = ceil(K/M); k counts updates from 0. Cosine step lr_k = lr0/2·(cos(π·(k mod L)/L) + 1).
Exploration while (k mod L)/L < β (no noise), sampling otherwise:
v ← (1 − a)·v − lr_k·(ḡ − ∇log p(θ)/N) [+ sqrt(2·lr_k·a·T/N)·ξ while sampling],  θ ← θ + v.
a = 1 gives cyclical SGLD.  Momentum persists across phases and cycles.

The schedule is ours, not optax's: `optax.cosine_decay_schedule(lr0, L)(k mod L)` is the same function, but
computes π·k/L and lr0·(0.5·(1 + cos)) in another order; evaluated op by op it differs from this formula in
the last bit at about a quarter of the steps (equal only after XLA's simplifier rewrites both under jit),
so chains would be bit-identical only by the grace of the compiler.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_in_range, check_positive
from l2e.diffusions import sgd_momentum
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot


class CyclicalState(NamedTuple):
    position: PyTree
    velocity: PyTree  # v, parameter units per update
    step: jax.Array


class CyclicalInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ; is_finite: loss and kinetic finite;
    kinetic: Σ r'² with the physical momentum r' = v'/ε, ε = sqrt(lr_k/N) (≈ d·T at equilibrium while
    sampling); learning_rate: lr_k of this update; sampling: whether noise was on."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    learning_rate: jax.Array
    sampling: jax.Array


def cycle_length(num_steps: int, num_cycles: int) -> int:
    return math.ceil(num_steps / num_cycles)


def cyclical_schedule(step, learning_rate: float, num_steps: int, num_cycles: int, exploration_ratio: float):
    """(lr_k, sampling) at update index `step` (0-based): cosine step size and whether noise is on."""
    length = cycle_length(num_steps, num_cycles)
    phase = jnp.mod(step, length) / length
    lr = 0.5 * learning_rate * (jnp.cos(jnp.pi * phase) + 1.0)
    return lr, phase >= exploration_ratio


def is_sampling_step(step: int, num_steps: int, num_cycles: int, exploration_ratio: float) -> bool:
    """Whether update `step` (0-based) falls in a sampling phase (for choosing which samples to keep)."""
    length = cycle_length(num_steps, num_cycles)
    return (step % length) / length >= exploration_ratio


def init(position: PyTree) -> CyclicalState:
    return CyclicalState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior, num_steps: int, num_cycles: int = 4, exploration_ratio: float = 0.8):
    """kernel(key, state, minibatch, learning_rate, momentum_decay=0.1, temperature=1.0)
    -> (CyclicalState, CyclicalInfo). The schedule (num_steps K, num_cycles M, exploration_ratio β) is
    static; `learning_rate` = lr0, `momentum_decay` = a (= 1 − momentum)."""
    check_positive(num_steps=num_steps, num_cycles=num_cycles)
    check_in_range("exploration_ratio", exploration_ratio, 0.0, 1.0, include_high=False)
    n = posterior.data_size

    def kernel(key: jax.Array, state: CyclicalState, minibatch, learning_rate, momentum_decay=0.1,
               temperature=1.0):
        a = momentum_decay
        lr, sampling = cyclical_schedule(state.step, learning_rate, num_steps, num_cycles, exploration_ratio)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        noise_std = jnp.where(sampling, jnp.sqrt(2.0 * lr * a * temperature / n), 0.0)
        kick = functools.partial(sgd_momentum, momentum=1.0 - a, step_size=lr / n, noise_std=noise_std)
        vel = jax.tree.map(kick, state.velocity, grad_u, noise)
        pos = jax.tree.map(jnp.add, state.position, vel)
        kinetic = tree_vdot(settled(vel), settled(vel)) * (n / lr)
        info = CyclicalInfo(loss, all_finite(loss, kinetic), kinetic, lr, sampling)
        return CyclicalState(pos, vel, state.step + 1), info

    return kernel


def cyclical_sghmc(
    posterior: Posterior,
    learning_rate: float,
    num_steps: int,
    num_cycles: int = 4,
    exploration_ratio: float = 0.8,
    momentum_decay: float = 0.1,
    temperature: float = 1.0,
) -> SamplingAlgorithm:
    """Cyclical SGHMC; `momentum_decay` is a (= 1 − momentum)."""
    check_positive(learning_rate=learning_rate, momentum_decay=momentum_decay)
    kernel = build_kernel(posterior, num_steps, num_cycles, exploration_ratio)

    def step(key: jax.Array, state: CyclicalState, minibatch):
        return kernel(key, state, minibatch, learning_rate, momentum_decay, temperature)

    return SamplingAlgorithm(init, step)
