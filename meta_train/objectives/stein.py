"""The Stein meta-objectives: the kernel Stein discrepancy ("ksd") and Meta-SGMCMC's Stein-gradient KL surrogate,
in-chain ("stein_kl") and cross-chain ("stein_kl_cross") (docs/meta_training.md § Objectives).

Each `*_fn(task)` returns objective(samples, x, y) -> scalar (the signature of meta_train.objectives.OBJECTIVES):
samples a position pytree with leaves (K, ...) (one member's thinned samples; for "stein_kl_cross" (C, K, ...), C
parallel chains), (x, y) a held-out batch of outer-validation examples. The model's score is the minibatch estimate
−∇Ũ(θ) = −(N·∇ mean NLL(θ; x, y) − ∇log p(θ)) on that batch (unbiased for the full-data score).

- "ksd": the squared kernel Stein discrepancy of the K samples against the score (U-statistic, RBF kernel
  k(a, b) = exp(−‖a − b‖²/2h), h = ½·median of the pairwise squared distances), ÷ d. A scalar, for ES.
- "stein_kl": the Stein-gradient KL surrogate of Meta-SGMCMC, in-chain form (the member's K samples pooled):
  mean_k Σ_d [sg(ĝ(θ_k)) − sg(∇log p̃(θ_k))]·θ_k with ĝ = −(K + λI)⁻¹⟨∇, K⟩ (Li & Turner's Stein gradient
  estimator of ∇log q, λ = STEIN_LAMBDA). Its *value* is meaningless; its pathwise gradient is that of KL(q‖p), so it
  is for a pathwise estimator only (meta_train.config refuses it with ES).
- "stein_kl_cross": the same surrogate in Meta-SGMCMC's cross-chain form: C = objective.chains parallel chains on
  the task (the backprop estimator runs them, vmapped, from independent initialisations with independent keys); at
  each of the K sample times the surrogate is taken over the C chains' current states (ĝ from those C states),
  then averaged over the K sample times. Gradients only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

STEIN_LAMBDA = 0.05


def flat_samples(samples) -> jax.Array:
    """(K, d) from a pytree with leaves (K, ...)."""
    leaves = jax.tree.leaves(samples)
    return jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)


def _scores(task, samples, x, y) -> jax.Array:
    """−∇Ũ at each sample on the batch (x, y): (K, d)."""
    grads = jax.vmap(lambda p: task.posterior.potential_grad(p, (x, y))[1])(samples)
    return -flat_samples(grads)


def _rbf(flat: jax.Array):
    """(kernel matrix (K, K), pairwise differences (K, K, d), bandwidth h) with h = ½·median squared distance."""
    diff = flat[:, None, :] - flat[None, :, :]
    sq = jnp.sum(jnp.square(diff), axis=-1)
    k = flat.shape[0]
    off = sq[~np.eye(k, dtype=bool)]
    h = jax.lax.stop_gradient(jnp.maximum(0.5 * jnp.median(off), 1e-12))
    return jnp.exp(-sq / (2.0 * h)), diff, sq, h


def ksd(flat: jax.Array, scores: jax.Array) -> jax.Array:
    """Squared KSD U-statistic of samples with their scores, RBF kernel, ÷ d:
    u(a, b) = s_aᵀs_b k + s_aᵀ∇_b k + s_bᵀ∇_a k + tr ∇_a∇_b k, with ∇_b k = k·(a − b)/h, ∇_a k = −k·(a − b)/h,
    tr ∇_a∇_b k = k·(d/h − ‖a − b‖²/h²).

    Args:
      flat: samples (K, d), K ≥ 2.
      scores: ∇log p at the samples (K, d).
    Returns:
      a scalar ≥ 0 in expectation (squared score units ÷ d).
    """
    kmat, diff, sq, h = _rbf(flat)
    k, d = flat.shape
    ss = scores @ scores.T
    sa_diff = jnp.einsum("ad,abd->ab", scores, diff)  # s_aᵀ(a − b)
    sb_diff = jnp.einsum("bd,abd->ab", scores, diff)  # s_bᵀ(a − b)
    u = kmat * (ss + (sa_diff - sb_diff) / h + d / h - sq / h**2)
    u = jnp.where(jnp.eye(k, dtype=bool), 0.0, u)
    return jnp.sum(u) / (k * (k - 1)) / d


def stein_gradient(flat: jax.Array, lam: float = STEIN_LAMBDA) -> jax.Array:
    """Li & Turner's Stein gradient estimate of ∇log q at the samples, −(K + λI)⁻¹⟨∇, K⟩ with
    ⟨∇, K⟩_a = Σ_b ∇_{x_b} k(x_b, x_a) = Σ_b k_ab (x_a − x_b)/h.

    Args:
      flat: samples (K, d).
      lam: the ridge λ.
    Returns:
      (K, d), the estimate of ∇log q at each sample.
    """
    kmat, diff, _, h = _rbf(flat)
    grad_k = jnp.einsum("ab,abd->ad", kmat, diff) / h
    return -jnp.linalg.solve(kmat + lam * jnp.eye(flat.shape[0]), grad_k)


def ksd_fn(task):
    """The KSD meta-loss (module doc) of samples (leaves (K, ...)) on the held-out batch (x, y)."""

    def objective(samples, x, y):
        return ksd(flat_samples(samples), _scores(task, samples, x, y))

    return objective


def stein_kl_fn(task):
    """The in-chain Stein-gradient KL surrogate (module doc): only its gradient through the samples is meaningful."""

    def objective(samples, x, y):
        flat = flat_samples(samples)
        q_score = jax.lax.stop_gradient(stein_gradient(flat))
        p_score = jax.lax.stop_gradient(_scores(task, samples, x, y))
        return jnp.mean(jnp.sum((q_score - p_score) * flat, axis=1))

    return objective


def stein_kl_cross_fn(task):
    """The cross-chain Stein-gradient KL surrogate (module doc) of samples with leaves (C, K, ...): at each sample
    time k the in-chain surrogate of the C chains' states θ_{1..C,k}, mean over k. Only its gradient is meaningful."""
    in_chain = stein_kl_fn(task)

    def objective(samples, x, y):
        per_time = jax.tree.map(lambda s: jnp.swapaxes(s, 0, 1), samples)  # (K, C, ...)
        return jnp.mean(jax.vmap(lambda st: in_chain(st, x, y))(per_time))

    return objective
