"""The "fidelity" meta-objective: total variation between the samples' BMA predictive and a NUTS reference's
(meta_train.reference), on the reference's test points (docs/meta_training.md § Objectives).

The meta-loss batch is (the task's test inputs x (n, ...), the reference's BMA probabilities q (n, C)) and the loss
mean_n ½Σ_c |p_nc − q_nc| ∈ [0, 1], p = mean_k softmax(logits_k(x)). A scalar (ES) and differentiable (backprop);
tasks whose likelihood has class probabilities (classification) only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from l2e.io import ConfigError


def total_variation(p: jax.Array, q: jax.Array) -> jax.Array:
    """mean_n ½Σ_c |p_nc − q_nc| of two (n, C) probability tables: a scalar in [0, 1]."""
    return jnp.mean(0.5 * jnp.sum(jnp.abs(p - q), axis=-1))


def fidelity_fn(task):
    """The fidelity meta-loss: objective(samples (K, ...), x_test (n, ...), q (n, C)) = TV between the samples' BMA
    predictive on x_test and the reference probabilities q, mean over test points. ConfigError for a task whose
    likelihood has no class probabilities (a regression task)."""
    if not task.likelihood.has_class_probs:
        raise ConfigError(f"objective.kind fidelity needs a classification task, {task.spec.name!r} is {task.kind}")

    def objective(samples, x, q):
        probs = jax.vmap(lambda p: jax.nn.softmax(task.apply(p, x), axis=-1))(samples)  # (K, n, C)
        return total_variation(jnp.mean(probs, axis=0), q)

    return objective
