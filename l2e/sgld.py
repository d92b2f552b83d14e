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
    """position: θ (pytree); step: int32 scalar, number of updates done."""

    position: PyTree
    step: jax.Array


class SGLDInfo(NamedTuple):
    """Per-step diagnostics of SGLD (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and Σθ' finite.
    SGLD has no momentum, hence no `kinetic`.
    """

    loss: jax.Array
    is_finite: jax.Array


def init(position: PyTree) -> SGLDState:
    """The SGLD state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      SGLDState (step 0).
    """
    return SGLDState(position, jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The SGLD kernel (module doc); the key draws the Langevin noise ξ.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, temperature=1.0) -> (SGLDState, SGLDInfo): learning_rate = ε·N
      (mean-loss units) and the temperature T are scalars, traceable (one compilation serves a grid).
    """

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
    """SGLD with constant step.

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε·N > 0 (mean-loss units).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> SGLDState, step(key, state, minibatch) -> (SGLDState, SGLDInfo).
    """
    check_positive(learning_rate=learning_rate, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGLDState, minibatch):
        return kernel(key, state, minibatch, learning_rate, temperature)

    return SamplingAlgorithm(init, step)
