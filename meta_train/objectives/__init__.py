"""Every meta-objective in one table: `OBJECTIVES`, name (`objective.kind`) -> `Objective` (the protocol of
meta_train.objectives.protocol: its loss of a chain's `Outcome`, its host-side penalty, its settings and
properties). meta_train.config reads the valid kinds, their settings and properties from it; the shared meta-loss
(meta_train.meta_loss, meta_train.es) and the truncated estimators' segment programs build the loss from it
(docs/meta_training.md § Objectives).

An objective's core is `fn(task) -> objective(samples, x, y) -> scalar`: samples a position pytree with leaves
(K, ...) (one member's thinned samples; a cross-chain objective gets (C, K, ...)), (x, y) the meta-loss batch —
`meta_loss_examples` outer-validation examples, or for a reference objective (the task's test inputs, its reference
target); the protocol's `loss(task, outcome, config)` defaults to it.

Modules: likelihood ("bma", "ce"), stein ("ksd", "stein_kl", "stein_kl_cross"), fidelity ("fidelity", the banded
fidelity objective with its settings: `fidelity.OBJECTIVE`), brier ("brier").
Adding an objective: a module defining its `Objective` (or a function in one of them) and one line in `OBJECTIVES`.
"""
from __future__ import annotations

from meta_train.objectives import fidelity
from meta_train.objectives.brier import brier_fn
from meta_train.objectives.fidelity import fidelity_fn, total_variation
from meta_train.objectives.likelihood import bma_nll_fn, ce_fn, log_likelihoods
from meta_train.objectives.protocol import Objective, Outcome
from meta_train.objectives.stein import STEIN_LAMBDA, ksd, ksd_fn, stein_gradient, stein_kl_cross_fn, stein_kl_fn


OBJECTIVES: dict[str, Objective] = {
    "bma": Objective(bma_nll_fn),
    "ce": Objective(ce_fn),
    "ksd": Objective(ksd_fn),
    "stein_kl": Objective(stein_kl_fn, gradient_only=True),
    "stein_kl_cross": Objective(stein_kl_cross_fn, cross_chain=True, gradient_only=True),
    "fidelity": fidelity.OBJECTIVE,
    "brier": Objective(brier_fn),
}
"""objective.kind -> Objective."""


def get(kind: str) -> Objective:
    """OBJECTIVES[kind]; ValueError naming the known kinds otherwise."""
    if kind not in OBJECTIVES:
        raise ValueError(f"unknown objective {kind!r} (known: {', '.join(OBJECTIVES)})")
    return OBJECTIVES[kind]


def owners(field: str) -> list[str]:
    """The kinds whose settings include objective.`field` (`Objective.fields`)."""
    return [kind for kind, o in OBJECTIVES.items() if field in o.fields]


__all__ = ["OBJECTIVES", "Objective", "Outcome", "STEIN_LAMBDA", "bma_nll_fn", "ce_fn", "fidelity_fn", "get", "ksd",
           "ksd_fn", "log_likelihoods", "owners", "stein_gradient", "stein_kl_cross_fn", "stein_kl_fn", "total_variation"]
