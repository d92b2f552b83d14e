"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011), mean-loss units.

θ ← θ − lr·(ḡ − ∇log p(θ)/N) + sqrt(2·lr·T/N)·ξ, i.e. ε = lr/N in the physical form
θ ← θ − ε∇Ũ + sqrt(2εT)·ξ.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import langevin, langevin_noise_std
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_sum


class SGLDState(NamedTuple):
    position: PyTree
    step: jax.Array  # int32 scalar, number of updates done


class SGLDInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (nats per example); is_finite: loss and Σθ' finite."""

    loss: jax.Array
    is_finite: jax.Array


def init(position: PyTree) -> SGLDState:
    return SGLDState(position, jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """kernel(key, state, minibatch, learning_rate, temperature=1.0) -> (SGLDState, SGLDInfo);
    `learning_rate` = ε·N (mean-loss units)."""

    def kernel(key: jax.Array, state: SGLDState, minibatch, learning_rate, temperature=1.0):
        eps = learning_rate / posterior.data_size
        scale = langevin_noise_std(eps, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)
        step = functools.partial(langevin, step_size=eps, noise_std=scale)
        pos = jax.tree.map(step, state.position, grad_u, noise)
        return SGLDState(pos, state.step + 1), SGLDInfo(loss, all_finite(loss, tree_sum(settled(pos))))

    return kernel


def sgld(posterior: Posterior, learning_rate: float, temperature: float = 1.0) -> SamplingAlgorithm:
    """SGLD with constant step; `learning_rate` = ε·N (mean-loss units)."""
    check_positive(learning_rate=learning_rate, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGLDState, minibatch):
        return kernel(key, state, minibatch, learning_rate, temperature)

    return SamplingAlgorithm(init, step)
