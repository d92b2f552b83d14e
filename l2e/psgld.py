"""Preconditioned SGLD (Li et al., 2016), RMSprop preconditioner, mean-loss units (docs/samplers.md § pSGLD).

V ← ρ·V + (1 − ρ)·ḡ⊙ḡ,   G = 1 ⊘ (λ + √V),
θ ← θ − lr·G⊙(ḡ − ∇log p(θ)/N) + sqrt(2·lr·T/N)·√G⊙ξ,

i.e. with ε_phys = lr/N (Li et al.'s ε = 2·ε_phys): θ ← θ − ε_phys·G⊙∇Ũ + sqrt(2·ε_phys·T·G)⊙ξ.  ḡ is the
mean-minibatch NLL gradient (per-datum units), V is updated before it is used, and V starts at 0.
The correction term Γ(θ) = Σ_j ∂G_ij/∂θ_j is **dropped** (standard practice): the chain is then biased
whenever G varies along the trajectory; with G constant (e.g. V dominated by stationary gradient noise) it is
exact.  With G ≡ 1 (λ = 1, ρ = 1, V = 0) this is `l2e.sgld` exactly.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_in_range, check_positive
from l2e.diffusions import preconditioned_langevin
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_sum


class PSGLDState(NamedTuple):
    """position: θ (pytree); square_avg: V, a pytree like θ in units of ḡ² (per-datum gradient squared);
    step: int32 scalar, number of updates done."""

    position: PyTree
    square_avg: PyTree
    step: jax.Array


class PSGLDInfo(NamedTuple):
    """Per-step diagnostics of pSGLD (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and Σθ' finite.
    pSGLD has no momentum, hence no `kinetic`.
    """

    loss: jax.Array
    is_finite: jax.Array


def init(position: PyTree) -> PSGLDState:
    """The pSGLD state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      PSGLDState with V = 0 and step 0.
    """
    return PSGLDState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior):
    """The pSGLD kernel (module doc); the key draws the Langevin noise ξ.

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, rho=0.99, lam=1e-5, temperature=1.0) -> (PSGLDState,
      PSGLDInfo): learning_rate = ε_phys·N (mean-loss units), rho the RMSprop decay ρ, lam λ (stabiliser of G,
      units of |ḡ|), temperature T; scalars, traceable.
    """
    n = posterior.data_size

    def kernel(key: jax.Array, state: PSGLDState, minibatch, learning_rate, rho=0.99, lam=1e-5, temperature=1.0):
        loss, g, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        v = jax.tree.map(lambda v, gi: rho * v + (1.0 - rho) * gi * gi, state.square_avg, g)
        noise = normal_like(key, state.position)
        scale = jnp.sqrt(2.0 * learning_rate * temperature / n)

        def update(x, vi, gu, z):
            precond = 1.0 / (lam + jnp.sqrt(vi))
            return preconditioned_langevin(x, gu, z, precond, learning_rate / n, scale)

        pos = jax.tree.map(update, state.position, v, grad_u, noise)
        return PSGLDState(pos, v, state.step + 1), PSGLDInfo(loss, all_finite(loss, tree_sum(settled(pos))))

    return kernel


def psgld(
    posterior: Posterior, learning_rate: float, rho: float = 0.99, lam: float = 1e-5, temperature: float = 1.0
) -> SamplingAlgorithm:
    """pSGLD (module doc).

    Args:
      posterior: the model (`l2e.Posterior`).
      learning_rate: lr = ε_phys·N > 0 (mean-loss units).
      rho: the RMSprop decay ρ ∈ [0, 1].
      lam: λ > 0, the stabiliser of G (units of |ḡ|).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> PSGLDState, step(key, state, minibatch) -> (PSGLDState, PSGLDInfo).
    """
    check_positive(learning_rate=learning_rate, lam=lam, temperature=temperature)
    check_in_range("rho", rho, 0.0, 1.0)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: PSGLDState, minibatch):
        return kernel(key, state, minibatch, learning_rate, rho, lam, temperature)

    return SamplingAlgorithm(init, step)
