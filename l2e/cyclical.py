"""Cyclical SGHMC (Zhang et al., 2020) in SGD-with-momentum form, mean-loss units.

Cycle length L = ceil(K/M); k counts updates from 0. Cosine step lr_k = lr0/2·(cos(π·(k mod L)/L) + 1).
Exploration while (k mod L)/L < β (no noise), sampling otherwise:
v ← (1 − a)·v − lr_k·(ḡ − ∇log p(θ)/N) [+ sqrt(2·lr_k·a·T/N)·ξ while sampling],  θ ← θ + v.
a = 1 gives cyclical SGLD.  Momentum persists across phases and cycles.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.sgld import check_positive
from l2e.types import Posterior, PyTree, SamplingAlgorithm, normal_like


class CyclicalState(NamedTuple):
    position: PyTree
    velocity: PyTree
    step: jax.Array


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
    check_positive(learning_rate=learning_rate, momentum_decay=momentum_decay, num_steps=num_steps,
                   num_cycles=num_cycles)
    if not 0.0 <= exploration_ratio < 1.0:
        raise ValueError(f"exploration_ratio must be in [0, 1), got {exploration_ratio}")
    n = posterior.data_size
    a = momentum_decay

    def init(position: PyTree) -> CyclicalState:
        return CyclicalState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))

    def step(key: jax.Array, state: CyclicalState, minibatch) -> CyclicalState:
        lr, sampling = cyclical_schedule(state.step, learning_rate, num_steps, num_cycles, exploration_ratio)
        _, grad_u = posterior.potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        noise_std = jnp.where(sampling, jnp.sqrt(2.0 * lr * a * temperature / n), 0.0)
        vel = jax.tree.map(
            lambda v, g, z: (1.0 - a) * v - (lr / n) * g + noise_std * z, state.velocity, grad_u, noise
        )
        pos = jax.tree.map(lambda x, v: x + v, state.position, vel)
        return CyclicalState(pos, vel, state.step + 1)

    return SamplingAlgorithm(init, step)
