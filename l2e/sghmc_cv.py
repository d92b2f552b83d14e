"""SGHMC with control variates (SGHMC-CV; Baker, Fearnhead, Fox & Nemeth, 2019): SGHMC (l2e/sghmc.py: persistent
momentum, mass I, lr = ε²·N, friction C) whose potential gradient is the control-variate estimate of
l2e/control_variates.py,

    r ← r − ε·∇Ũ_cv(θ) − εC·r + N(0, 2CεT),   θ ← θ + ε·r,   ∇Ũ_cv(θ) = N·[ḡ_B(θ) − ḡ_B(θ̂) + ḡ(θ̂)] − ∇log p(θ),

with the anchor (θ̂, ḡ(θ̂)) carried in the state (per chain: chains vmap over it). Two minibatch gradients per step.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e import sghmc as _sghmc
from l2e.checks import check_positive
from l2e.control_variates import Anchor, check_anchor, cv_posterior
from l2e.sghmc import SGHMCInfo
from l2e.types import Posterior, PyTree, SamplingAlgorithm

__all__ = ["SGHMCCVState", "SGHMCInfo", "build_kernel", "init", "sghmc_cv"]


class SGHMCCVState(NamedTuple):
    """position: θ; momentum: r (pytree like θ, physical units: θ moves by ε·r); anchor: the Anchor (θ̂, ḡ(θ̂));
    step: int32 scalar, updates done."""

    position: PyTree
    momentum: PyTree
    anchor: Anchor
    step: jax.Array


def init(position: PyTree, anchor: Anchor) -> SGHMCCVState:
    """The SGHMC-CV state at `position` with `anchor`: momentum 0, step 0.

    Args:
      position: θ, a pytree of float arrays (typically anchor.position: the chain starts at θ̂).
      anchor: the Anchor (`l2e.control_variates.anchor_at` / `find_anchor`).
    Returns:
      SGHMCCVState.
    """
    return SGHMCCVState(position, jax.tree.map(jnp.zeros_like, position), anchor, jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The SGHMC-CV kernel: SGHMC's kernel on `cv_posterior(posterior, state.anchor)`; the key draws the momentum
    noise.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, friction, temperature=1.0) -> (SGHMCCVState, SGHMCInfo):
      learning_rate = ε²·N (mean-loss units), friction C, T; scalars, traceable. info.kinetic = Σ r'² (≈ d·T at
      equilibrium); info.loss the plain mean minibatch NLL at the pre-update θ.
    """

    def kernel(key: jax.Array, state: SGHMCCVState, minibatch, learning_rate, friction, temperature=1.0):
        step = _sghmc.build_kernel(cv_posterior(posterior, state.anchor))
        inner = _sghmc.SGHMCState(state.position, state.momentum, state.step)
        new, info = step(key, inner, minibatch, learning_rate, friction, temperature)
        return SGHMCCVState(new.position, new.momentum, state.anchor, new.step), info

    return kernel


def sghmc_cv(posterior: Posterior, learning_rate: float, anchor: Anchor, friction: float = 0.1,
             temperature: float = 1.0) -> SamplingAlgorithm:
    """SGHMC-CV with persistent momentum and a fixed anchor.

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε²·N > 0 (mean-loss units, SGHMC's).
      anchor: the Anchor every chain of this algorithm starts with (`init(position)` stores it in the state).
      friction: C > 0 (1/time).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> SGHMCCVState, step(key, state, minibatch) -> (SGHMCCVState, SGHMCInfo).
    Raises:
      ValueError: a hyperparameter out of range, an anchor that is not an `Anchor` (`check_anchor`).
    """
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    check_anchor(anchor)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: SGHMCCVState, minibatch):
        return kernel(key, state, minibatch, learning_rate, friction, temperature)

    return SamplingAlgorithm(lambda position: init(position, anchor), step)
