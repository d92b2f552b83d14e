"""BAOAB Langevin dynamics (Leimkuhler & Matthews, 2013), one minibatch gradient per update, mass I:

    B: r ← r − ε·∇Ũ(θ)          (the closing half kick of the previous update and the opening half kick of this one,
                                 merged: both at the same θ with the same fresh minibatch gradient; ε/2 at update 0)
    A: θ ← θ + (ε/2)·r
    O: r ← a·r + sqrt(T·(1 − a²))·ξ,   a = exp(−C·ε)   (the exact Ornstein–Uhlenbeck step of the friction)
    A: θ ← θ + (ε/2)·r

with ε = sqrt(lr/N) (lr in mean-loss units, as `l2e.sghmc`) and friction C. The positions are exactly those of
BAOAB with one gradient per update (the "BAOA" form of the `posteriors` library merges the two half kicks the same
way); the momentum kept in the state is the one after O (BAOAB's end-of-update momentum minus its closing half kick).
Against SGHMC's symplectic Euler (same gradient cost): a symmetric splitting whose configurational error on a
Gaussian target is O(ε²) and whose friction step is exact for any C·ε. Momentum starts at 0.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import physical_step_size
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["BAOABInfo", "BAOABState", "baoab", "build_kernel", "init"]


class BAOABState(NamedTuple):
    """position, momentum: θ, r (pytrees; r after the O step); step: updates done (int32 scalar)."""

    position: PyTree
    momentum: PyTree
    step: jax.Array


class BAOABInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and kinetic finite (bool scalar);
    kinetic: Σ r'² of the momentum after the O step (= Σ r'·∇_rK for K = ½‖r‖²; ≈ d·T at equilibrium)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> BAOABState:
    """The state before the first update: r₀ = 0.

    Args:
      position: θ₀, a pytree of float32 arrays.
    Returns:
      BAOABState.
    """
    return BAOABState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """kernel(key, state, minibatch, learning_rate, friction, temperature=1.0) -> (BAOABState, BAOABInfo).

    Args:
      posterior: the target (l2e.Posterior).
    Returns:
      The kernel; learning_rate = ε²·N (mean-loss units), friction = C (1/time), temperature = T.
    """

    def kernel(key: jax.Array, state: BAOABState, minibatch, learning_rate, friction, temperature=1.0):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            decay = jnp.exp(-friction * eps)
            noise_std = jnp.sqrt(temperature * (1.0 - decay * decay))
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        kick = jnp.where(state.step == 0, 0.5 * eps, eps)
        noise = normal_like(key, state.position)
        mom = jax.tree.map(lambda r, g: r - kick * g, state.momentum, grad_u)
        pos = jax.tree.map(lambda x, r: x + 0.5 * eps * r, state.position, mom)
        mom = jax.tree.map(lambda r, z: decay * r + noise_std * z, mom, noise)
        pos = jax.tree.map(lambda x, r: x + 0.5 * eps * r, pos, mom)
        kinetic = tree_vdot(settled(mom), settled(mom))
        return BAOABState(pos, mom, state.step + 1), BAOABInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def baoab(posterior: Posterior, learning_rate: float, friction: float = 1.0, temperature: float = 1.0
          ) -> SamplingAlgorithm:
    """BAOAB Langevin dynamics.

    Args:
      posterior: the target (l2e.Posterior).
      learning_rate: lr = ε²·N (mean-loss units, as l2e.sghmc).
      friction: C (1/time); the O step is exact for any C·ε.
      temperature: T.
    Returns:
      SamplingAlgorithm: init(position) -> BAOABState; step(key, state, minibatch) -> (BAOABState, BAOABInfo).
    """
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: BAOABState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, temperature)

    return SamplingAlgorithm(init, step)
