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
    """position: θ (pytree); velocity: v (pytree like θ, parameter units per update); step: int32 scalar, updates
    done (k)."""

    position: PyTree
    velocity: PyTree
    step: jax.Array


class CyclicalInfo(NamedTuple):
    """Per-step diagnostics of cyclical SGHMC (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic
    finite; kinetic: f32, Σ r'² with the physical momentum r' = v'/ε, ε = sqrt(lr_k/N) (nats; ≈ d·T at equilibrium
    while sampling; meaningless in exploration, where no noise is added); learning_rate: f32, lr_k of this update
    (mean-loss units); sampling: bool, whether noise was on.
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    learning_rate: jax.Array
    sampling: jax.Array


def cycle_length(num_steps: int, num_cycles: int) -> int:
    """The cycle length L = ⌈K/M⌉.

    Args:
      num_steps: K, the total number of updates.
      num_cycles: M.
    Returns:
      L, updates per cycle (a Python int).
    """
    return math.ceil(num_steps / num_cycles)


def cyclical_schedule(step, learning_rate: float, num_steps: int, num_cycles: int, exploration_ratio: float):
    """The cosine schedule at update `step`: lr_k = lr₀/2·(cos(π·(k mod L)/L) + 1) and whether noise is on.

    Args:
      step: k, the 0-based update index (int or int32 scalar, traceable).
      learning_rate: lr₀ (mean-loss units).
      num_steps: K, the total number of updates.
      num_cycles: M.
      exploration_ratio: β ∈ [0, 1): the fraction of each cycle without noise.
    Returns:
      (lr_k, a float scalar in mean-loss units; sampling, a bool scalar: (k mod L)/L ≥ β).
    """
    length = cycle_length(num_steps, num_cycles)
    phase = jnp.mod(step, length) / length
    lr = 0.5 * learning_rate * (jnp.cos(jnp.pi * phase) + 1.0)
    return lr, phase >= exploration_ratio


def is_sampling_step(step: int, num_steps: int, num_cycles: int, exploration_ratio: float) -> bool:
    """Whether update `step` falls in a sampling phase (for choosing which samples to keep), in Python.

    Args:
      step: k, the 0-based update index.
      num_steps: K, the total number of updates.
      num_cycles: M.
      exploration_ratio: β ∈ [0, 1).
    Returns:
      (k mod L)/L ≥ β, a Python bool.
    """
    length = cycle_length(num_steps, num_cycles)
    return (step % length) / length >= exploration_ratio


def init(position: PyTree) -> CyclicalState:
    """The cyclical SGHMC state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      CyclicalState with velocity 0 and step 0.
    """
    return CyclicalState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior, num_steps: int, num_cycles: int = 4, exploration_ratio: float = 0.8):
    """The cyclical SGHMC kernel (module doc); the key draws the noise (multiplied by 0 while exploring).

    Args:
      posterior: the model (`l2e.Posterior`).
      num_steps: K, the total number of updates (static).
      num_cycles: M (static).
      exploration_ratio: β ∈ [0, 1), the fraction of each cycle without noise (static).
    Returns:
      kernel(key, state, minibatch, learning_rate, momentum_decay=0.1, temperature=1.0) -> (CyclicalState,
      CyclicalInfo): learning_rate = lr₀ (mean-loss units), momentum_decay a (= 1 − momentum), temperature T;
      scalars, traceable.
    """
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
    """Cyclical SGHMC (module doc).

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr₀ > 0, the cycle's initial learning rate (mean-loss units).
      num_steps: K, the total number of updates.
      num_cycles: M.
      exploration_ratio: β ∈ [0, 1), the fraction of each cycle without noise.
      momentum_decay: a ∈ (0, 1] (= 1 − momentum; a = 1: cyclical SGLD).
      temperature: T (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> CyclicalState, step(key, state, minibatch) -> (CyclicalState,
      CyclicalInfo).
    """
    check_positive(learning_rate=learning_rate, temperature=temperature)
    check_in_range("momentum_decay", momentum_decay, 0.0, 1.0, include_low=False)  # 1 − momentum: > 1 reverses it
    kernel = build_kernel(posterior, num_steps, num_cycles, exploration_ratio)

    def step(key: jax.Array, state: CyclicalState, minibatch):
        return kernel(key, state, minibatch, learning_rate, momentum_decay, temperature)

    return SamplingAlgorithm(init, step)
