"""The "brier" meta-objective: the Brier score of the samples' BMA predictive on the held-out meta-loss batch
(docs/meta_training.md § Objectives), mean_b Σ_c (p̄_bc − 1[y_b = c])² ∈ [0, 2], p̄ = mean_k softmax(logits_k(x)).

A proper scoring rule like the BMA NLL, bounded, so one confidently wrong example cannot dominate a meta-gradient.
Classification only (the likelihood has class probabilities).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from base.io import ConfigError


def brier_fn(task):
    """objective(samples (K, ...), x (B, ...), y (B,) int) = the Brier score of the BMA predictive (module doc).
    ConfigError for a task whose likelihood has no class probabilities."""
    if not task.likelihood.has_class_probs:
        raise ConfigError(f"objective.kind brier needs a classification task, {task.spec.name!r} is {task.kind}")

    def objective(samples, x, y):
        probs = jnp.mean(jax.vmap(lambda p: jax.nn.softmax(task.apply(p, x), axis=-1))(samples), axis=0)  # (B, C)
        onehot = jax.nn.one_hot(y, probs.shape[-1], dtype=probs.dtype)
        return jnp.mean(jnp.sum(jnp.square(probs - onehot), axis=-1))

    return objective
