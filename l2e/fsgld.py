"""Functional SGLD (Wu, Xuan & Lu, 2025): ordinary SGLD on the GP-prior potential Ũ of a `FunctionalPosterior`
(l2e.fsgmcmc; docs/samplers.md § Functional SGLD / SGHMC), mean-loss units as `l2e.sgld`:

θ ← θ − ε∇Ũ(θ) + sqrt(2εT)·ξ,   ε = lr/N,

with Ũ(θ) = N·mean-NLL_B(θ) + ½ Σ_c (f_c − m_c)ᵀ K_c⁻¹ (f_c − m_c) at measurement points X_M drawn from the step's
key. The key is split in two: one half draws X_M, the other the Langevin noise ξ.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import langevin, langevin_noise_std
from l2e.fsgmcmc import FunctionalPosterior, functional_posterior, per_class_kernel, rbf_kernel
from l2e.types import PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_sum

__all__ = ["FSGLDInfo", "FSGLDState", "FunctionalPosterior", "build_kernel", "fsgld", "functional_posterior", "init",
           "per_class_kernel", "rbf_kernel"]


class FSGLDState(NamedTuple):
    """position: θ (pytree); step: int32 scalar, updates done; chol_ok: bool scalar, every Cholesky factor so far
    was finite; jitter: f32 scalar, the largest relative jitter used so far (× mean diag K)."""

    position: PyTree
    step: jax.Array
    chol_ok: jax.Array
    jitter: jax.Array


class FSGLDInfo(NamedTuple):
    """Per-step diagnostics of fSGLD (all scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and Σθ' finite;
    chol_ok: bool, this step's Cholesky factor of K_MM was finite; prior_energy: f32, ½ Σ_c rᵀK⁻¹r at the
    pre-update θ and this step's points (nats); jitter: f32, this step's relative jitter (× mean diag K).
    fSGLD has no momentum, hence no `kinetic`.
    """

    loss: jax.Array
    is_finite: jax.Array
    chol_ok: jax.Array
    prior_energy: jax.Array
    jitter: jax.Array


def init(position: PyTree) -> FSGLDState:
    """The fSGLD state at `position`.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      FSGLDState with step 0, chol_ok True, jitter 0.
    """
    return FSGLDState(position, jnp.zeros((), jnp.int32), jnp.ones((), bool), jnp.zeros((), jnp.float32))


def build_kernel(posterior: FunctionalPosterior):
    """The fSGLD kernel: θ ← θ − ε∇Ũ + sqrt(2εT)ξ, ε = lr/N. The key also draws the measurement points.

    Args:
      posterior: the functional-prior potential (`l2e.fsgmcmc.functional_posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, temperature=1.0) -> (FSGLDState, FSGLDInfo): key a PRNG key
      (split into the measurement-point key and the noise key); learning_rate = ε·N (mean-loss units) and the
      temperature T are scalars, traceable.
    """

    def kernel(key: jax.Array, state: FSGLDState, minibatch, learning_rate, temperature=1.0):
        eps = learning_rate / posterior.data_size
        k_m, k_n = jax.random.split(key)
        loss, grad_u, prior = posterior.value_and_potential_grad(state.position, minibatch, k_m)
        noise = normal_like(k_n, state.position)
        scale = langevin_noise_std(eps, temperature)
        pos = jax.tree.map(functools.partial(langevin, step_size=eps, noise_std=scale), state.position, grad_u,
                           noise)
        info = FSGLDInfo(loss, all_finite(loss, tree_sum(settled(pos))), prior.chol_ok, prior.prior_energy,
                         prior.jitter)
        jit = jnp.maximum(state.jitter, prior.jitter.astype(state.jitter.dtype))
        return FSGLDState(pos, state.step + 1, state.chol_ok & prior.chol_ok, jit), info

    return kernel


def fsgld(posterior: FunctionalPosterior, learning_rate: float, temperature: float = 1.0) -> SamplingAlgorithm:
    """fSGLD: θ ← θ − ε∇Ũ + sqrt(2εT)ξ, ε = lr/N (mean-loss units, as `l2e.sgld`).

    Args:
      posterior: the functional-prior potential (`l2e.fsgmcmc.functional_posterior`).
      learning_rate: lr = ε·N > 0 (mean-loss units).
      temperature: T > 0 (1: the posterior).
    Returns:
      SamplingAlgorithm: init(position) -> FSGLDState, step(key, state, minibatch) -> (FSGLDState, FSGLDInfo).
    """
    check_positive(learning_rate=learning_rate, temperature=temperature)
    kernel = build_kernel(posterior)

    def step(key: jax.Array, state: FSGLDState, minibatch):
        return kernel(key, state, minibatch, learning_rate, temperature)

    return SamplingAlgorithm(init, step)
