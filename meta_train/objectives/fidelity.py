"""The "fidelity" meta-objective: total variation between the samples' BMA predictive and a NUTS reference's
(meta_train.reference), on the reference's test points (docs/meta_training.md § Objectives), optionally plus a
penalty on the samples' predictive dispersion outside a band around the reference draws'.

The meta-loss batch is (the task's test inputs x (n, ...), the reference) and the loss

    mean_n ½Σ_c |p_nc − q_nc|  +  w·max(0, |log(v / v_ref)| − log BAND),    p = mean_k softmax(logits_k(x)),

with q (n, C) the reference's BMA probabilities, v the mean over points and classes of the K samples' predictive
variance (ddof 1) and v_ref the reference draws' (ddof 1, so exact draws read v / v_ref ≈ 1), w the objective's
dispersion_weight. The penalty is zero inside [1/BAND, BAND] = [0.8, 1.25] — the budget curves' dispersion band
(docs/evaluation.md) — and grows with the log-ratio outside it: TV alone rewards an under-dispersed BMA that sits on
the reference's dominant mode. The reference is q alone (w = 0: plain TV) or a `ReferenceTarget`. A scalar (ES)
and differentiable (backprop); tasks whose likelihood has class probabilities (classification) only.

`OBJECTIVE` is the registry entry (meta_train.objectives.protocol): its config group is objective.reference (the
reference directory, meta_train.reference) and objective.dispersion_weight (w, read by no other objective); its
`target` builds the reference target from the loaded reference; like every objective it also takes the chain-level
T_kin penalty (objective.temperature_weight, protocol.temperature_penalty) and is averaged over objective.budgets
by the shared meta-loss (meta_train.meta_loss) — the banded fidelity objective of the `transient-band` preset.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from base.io import ConfigError
from meta_train.objectives.protocol import Objective, check_weight

BAND = 1.25
"""The dispersion band [1/BAND, BAND] of the predictive-variance ratio, penalty-free."""


class ReferenceTarget(NamedTuple):
    """probs: (n, C) reference BMA probabilities; pred_var: the reference draws' predictive variance (a scalar, ddof
    1); dispersion_weight: w (a scalar)."""

    probs: jax.Array
    pred_var: jax.Array
    dispersion_weight: jax.Array


def total_variation(p: jax.Array, q: jax.Array) -> jax.Array:
    """mean_n ½Σ_c |p_nc − q_nc| of two (n, C) probability tables: a scalar in [0, 1]."""
    return jnp.mean(0.5 * jnp.sum(jnp.abs(p - q), axis=-1))


def predictive_variance(probs: jax.Array) -> jax.Array:
    """Mean over points and classes of the across-draw variance (ddof 1) of (K, n, C) probabilities."""
    return jnp.mean(jnp.var(probs, axis=0, ddof=1))


def dispersion_penalty(v: jax.Array, v_ref: jax.Array) -> jax.Array:
    """max(0, |log(v / v_ref)| − log BAND): 0 inside the band, the log-ratio's excess outside."""
    return jnp.maximum(jnp.abs(jnp.log(v) - jnp.log(v_ref)) - math.log(BAND), 0.0)


def fidelity_fn(task):
    """The fidelity meta-loss: objective(samples (K, ...), x_test (n, ...), reference) = TV between the samples' BMA
    predictive on x_test and the reference probabilities, mean over test points, plus the dispersion penalty when
    `reference` is a ReferenceTarget with a positive weight (module doc). ConfigError for a task whose likelihood has
    no class probabilities (a regression task)."""
    if not task.likelihood.has_class_probs:
        raise ConfigError(f"objective.kind fidelity needs a classification task, {task.spec.name!r} is {task.kind}")

    def objective(samples, x, reference):
        probs = jax.vmap(lambda p: jax.nn.softmax(task.apply(p, x), axis=-1))(samples)  # (K, n, C)
        if not isinstance(reference, ReferenceTarget):
            return total_variation(jnp.mean(probs, axis=0), reference)
        tv = total_variation(jnp.mean(probs, axis=0), reference.probs)
        w = reference.dispersion_weight
        penalty = dispersion_penalty(predictive_variance(probs), reference.pred_var)
        return tv + jnp.where(w > 0, w * penalty, 0.0)

    return objective


def target(task, reference, config):
    """The reference target of `task` from its loaded reference (meta_train.reference.TaskReference) and the
    objective settings `config`: the (n, C) float32 probabilities, or with objective.dispersion_weight > 0 a
    ReferenceTarget (probabilities, the draws' predictive variance, w)."""
    if config.dispersion_weight <= 0:
        return jnp.asarray(reference.probs)
    return ReferenceTarget(jnp.asarray(reference.probs), jnp.float32(reference.pred_var),
                           jnp.float32(config.dispersion_weight))


OBJECTIVE = Objective(fidelity_fn, reference=True, fields=("dispersion_weight",),
                      check=lambda config: check_weight(config, "dispersion_weight"), target=target,
                      draws=lambda config: config.dispersion_weight > 0)
"""The registry entry: objective.kind "fidelity" (module doc)."""
