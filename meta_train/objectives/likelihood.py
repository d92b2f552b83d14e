"""The likelihood meta-objectives: "bma", the NLL of the samples' Bayesian model average (the paper's eq. 7), and
"ce", the mean of the samples' individual NLLs (the paper's cross-entropy ablation, eq. 12) (docs/meta_training.md
§ Objectives).

Both read the per-example log-likelihood from the task (`task.log_likelihood(params, x, y) -> (B,)`: categorical
for a classifier, Gaussian for a regression task), so they serve every task the same way.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def log_likelihoods(task, samples, x, y) -> jax.Array:
    """log p_k(y_b | x_b) under the task's likelihood.

    Args:
      task: a built task (tasks.Task or tasks.RegressionTask).
      samples: a position pytree with leaves (K, ...).
      x, y: the meta-loss batch, (B, ...) and (B,).
    Returns:
      (K, B) float32, nats.
    """
    return jax.vmap(lambda p: task.log_likelihood(p, x, y))(samples)


def bma_nll_fn(task):
    """The BMA meta-loss: objective(samples (K, ...), x (B, ...), y (B,)) = −mean_b log mean_k p_k(y_b | x_b)
    (nats)."""

    def bma_nll(samples, x, y):
        ll = log_likelihoods(task, samples, x, y)
        k = ll.shape[0]
        return -jnp.mean(jax.nn.logsumexp(ll, axis=0) - math.log(k))

    return bma_nll


def ce_fn(task):
    """The cross-entropy meta-loss: objective(samples, x, y) = −mean_b mean_k log p_k(y_b | x_b) (nats; ≥ the BMA
    NLL of the same samples, by Jensen)."""
    return lambda samples, x, y: -jnp.mean(log_likelihoods(task, samples, x, y))
