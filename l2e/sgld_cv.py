"""SGLD with control variates (SGLD-CV; Baker, Fearnhead, Fox & Nemeth, 2019): SGLD (l2e/sgld.py, lr = ε·N) whose
potential gradient is the control-variate estimate of l2e/control_variates.py,

    θ ← θ − ε·∇Ũ_cv(θ) + sqrt(2εT)·ξ,   ∇Ũ_cv(θ) = N·[ḡ_B(θ) − ḡ_B(θ̂) + ḡ(θ̂)] − ∇log p(θ),

with the anchor (θ̂, ḡ(θ̂)) carried in the state (per chain: chains vmap over it). Two minibatch gradients per step.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e import sgld as _sgld
from l2e.checks import check_positive
from l2e.control_variates import Anchor, check_anchor, cv_posterior
from l2e.sgld import SGLDInfo
from l2e.types import Posterior, PyTree, SamplingAlgorithm

__all__ = ["SGLDCVState", "SGLDInfo", "build_kernel", "init", "sgld_cv"]


class SGLDCVState(NamedTuple):
    """position: θ (pytree); anchor: the Anchor (θ̂ and ḡ(θ̂), fixed along the chain unless refreshed:
    `l2e.control_variates.refreshed`); step: int32 scalar, updates done."""

    position: PyTree
    anchor: Anchor
    step: jax.Array


def init(position: PyTree, anchor: Anchor) -> SGLDCVState:
    """The SGLD-CV state at `position` with `anchor`.

    Args:
      position: θ, a pytree of float arrays (typically anchor.position: the chain starts at θ̂).
      anchor: the Anchor (`l2e.control_variates.anchor_at` / `find_anchor`).
    Returns:
      SGLDCVState (step 0).
    """
    return SGLDCVState(position, anchor, jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The SGLD-CV kernel: SGLD's kernel on `cv_posterior(posterior, state.anchor)`; the key draws the noise ξ.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, temperature=1.0) -> (SGLDCVState, SGLDInfo): learning_rate =
      ε·N (mean-loss units) and T scalars, traceable; info.loss is the plain mean minibatch NLL at the pre-update θ.
    """

    def kernel(key: jax.Array, state: SGLDCVState, minibatch, learning_rate, temperature=1.0):
        step = _sgld.build_kernel(cv_posterior(posterior, state.anchor))
        new, info = step(key, _sgld.SGLDState(state.position, state.step), minibatch, learning_rate, temperature)
        return SGLDCVState(new.position, state.anchor, new.step), info

    return kernel


def sgld_cv(posterior: Posterior, learning_rate: float, anchor: Anchor, temperature: float = 1.0) -> SamplingAlgorithm:
    """SGLD-CV with constant step and a fixed anchor.

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε·N > 0 (mean-loss units, SGLD's).
      anchor: the Anchor every chain of this algorithm starts with (`init(position)` stores it in the state).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> SGLDCVState, step(key, state, minibatch) -> (SGLDCVState, SGLDInfo).
    Raises:
      ValueError: a hyperparameter out of range, an anchor that is not an `Anchor` (`check_anchor`).
    """
    check_positive(learning_rate=learning_rate, temperature=temperature)
    check_anchor(anchor)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGLDCVState, minibatch):
        return kernel(key, state, minibatch, learning_rate, temperature)

    return SamplingAlgorithm(lambda position: init(position, anchor), step)
