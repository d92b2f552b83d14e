"""SGHMC with persistent momentum (Chen et al., 2014), physical form, mass M = I, symplectic Euler:

r ← r − ε∇Ũ(θ) − εC·r + N(0, 2CεT),   θ ← θ + ε·r,   with ε = sqrt(lr/N).

Momentum starts at 0 and is never resampled (unlike `blackjax.sghmc`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.sgld import check_positive
from l2e.types import Posterior, PyTree, SamplingAlgorithm, normal_like


class SGHMCState(NamedTuple):
    position: PyTree
    momentum: PyTree
    step: jax.Array


def physical_step_size(learning_rate: float, data_size: int) -> float:
    """ε = sqrt(lr / N): the physical step of a momentum sampler whose lr is in mean-loss units."""
    return jnp.sqrt(learning_rate / data_size)


def sghmc(
    posterior: Posterior, learning_rate: float, friction: float = 0.1, temperature: float = 1.0
) -> SamplingAlgorithm:
    """SGHMC; `learning_rate` = ε²·N, `friction` = C, `temperature` = T."""
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    eps = physical_step_size(learning_rate, posterior.data_size)
    noise_std = jnp.sqrt(2.0 * friction * eps * temperature)

    def init(position: PyTree) -> SGHMCState:
        return SGHMCState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))

    def step(key: jax.Array, state: SGHMCState, minibatch) -> SGHMCState:
        _, grad_u = posterior.potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        mom = jax.tree.map(
            lambda r, g, z: r - eps * g - eps * friction * r + noise_std * z, state.momentum, grad_u, noise
        )
        pos = jax.tree.map(lambda x, r: x + eps * r, state.position, mom)
        return SGHMCState(pos, mom, state.step + 1)

    return SamplingAlgorithm(init, step)
