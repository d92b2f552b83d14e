"""Every meta-objective in one table: `OBJECTIVES`, name (`objective.kind`) -> `Objective` (its function and
properties). meta_train.config reads the valid kinds and their properties from it; meta_train.es and the truncated
estimators build the loss from it (docs/meta_training.md § Objectives).

An objective function is `fn(task) -> objective(samples, x, y) -> scalar`: samples a position pytree with leaves
(K, ...) (one member's thinned samples; a cross-chain objective gets (C, K, ...)), (x, y) the meta-loss batch —
`meta_loss_examples` outer-validation examples, or for a reference objective (the task's test inputs, the NUTS
reference's probabilities (n, C)).

Modules: likelihood ("bma", "ce"), stein ("ksd", "stein_kl", "stein_kl_cross"), fidelity ("fidelity"), brier
("brier").
Adding an objective: its function in one of them (or a new module) and one line in `OBJECTIVES`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from meta_train.objectives.brier import brier_fn
from meta_train.objectives.fidelity import fidelity_fn, total_variation
from meta_train.objectives.likelihood import bma_nll_fn, ce_fn, log_likelihoods
from meta_train.objectives.stein import STEIN_LAMBDA, ksd, ksd_fn, stein_gradient, stein_kl_cross_fn, stein_kl_fn


class Objective(NamedTuple):
    """One meta-objective.

    fn: task -> objective(samples, x, y) -> scalar (module doc).
    reference: taken on a NUTS reference's test points (objective.reference) instead of a held-out batch.
    cross_chain: over objective.chains parallel chains (samples (C, K, ...)).
    gradient_only: its value is meaningless, only its pathwise gradient: a pathwise estimator only (es.estimator
      backprop).
    """

    fn: Callable
    reference: bool = False
    cross_chain: bool = False
    gradient_only: bool = False


OBJECTIVES: dict[str, Objective] = {
    "bma": Objective(bma_nll_fn),
    "ce": Objective(ce_fn),
    "ksd": Objective(ksd_fn),
    "stein_kl": Objective(stein_kl_fn, gradient_only=True),
    "stein_kl_cross": Objective(stein_kl_cross_fn, cross_chain=True, gradient_only=True),
    "fidelity": Objective(fidelity_fn, reference=True),
    "brier": Objective(brier_fn),
}
"""objective.kind -> Objective."""


def get(kind: str) -> Objective:
    """OBJECTIVES[kind]; ValueError naming the known kinds otherwise."""
    if kind not in OBJECTIVES:
        raise ValueError(f"unknown objective {kind!r} (known: {', '.join(OBJECTIVES)})")
    return OBJECTIVES[kind]


__all__ = ["OBJECTIVES", "Objective", "STEIN_LAMBDA", "bma_nll_fn", "ce_fn", "fidelity_fn", "get", "ksd", "ksd_fn",
           "log_likelihoods", "stein_gradient", "stein_kl_cross_fn", "stein_kl_fn", "total_variation"]
