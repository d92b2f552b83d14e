"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011), mean-loss units.

θ ← θ − lr·(ḡ − ∇log p(θ)/N) + sqrt(2·lr·T/N)·ξ, i.e. ε = lr/N in the physical form
θ ← θ − ε∇Ũ + sqrt(2εT)·ξ.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.types import Posterior, PyTree, SamplingAlgorithm, normal_like


class SGLDState(NamedTuple):
    position: PyTree
    step: jax.Array  # int32 scalar, number of updates done


def check_positive(**values: float) -> None:
    """Raise ValueError naming the first non-positive or non-finite hyperparameter (traced values are not checked)."""
    for name, v in values.items():
        if isinstance(v, (int, float)) and not (0 < v < float("inf")):
            raise ValueError(f"{name} must be a positive finite number, got {v}")


def sgld(posterior: Posterior, learning_rate: float, temperature: float = 1.0) -> SamplingAlgorithm:
    """SGLD with constant step; `learning_rate` = ε·N (mean-loss units)."""
    check_positive(learning_rate=learning_rate, temperature=temperature)
    eps = learning_rate / posterior.data_size

    def init(position: PyTree) -> SGLDState:
        return SGLDState(position, jnp.zeros((), jnp.int32))

    def step(key: jax.Array, state: SGLDState, minibatch) -> SGLDState:
        _, grad_u = posterior.potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        scale = jnp.sqrt(2.0 * eps * temperature)
        pos = jax.tree.map(lambda x, g, z: x - eps * g + scale * z, state.position, grad_u, noise)
        return SGLDState(pos, state.step + 1)

    return SamplingAlgorithm(init, step)
