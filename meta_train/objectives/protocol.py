"""The objective protocol: what an objective sees of an inner chain (`Outcome`) and what an objective is
(`Objective`, one registry entry of meta_train.objectives.OBJECTIVES) (docs/meta_training.md § Objectives).

An objective scores one chain's outcome with its own settings (the `objective.*` config group, an ObjectiveConfig):

- `loss(task, outcome, config) -> scalar`, traced per chain inside the estimators' compiled programs (vmapped over
  ES members, differentiated by the pathwise estimator): the outcome's samples and meta-loss batch, its reference
  target, the budget it ran at and the sampler's temperature (static).
- `penalty(outcome, config) -> (P,) float64 or None`, on the host after the chains of one budget have run: the terms
  that read what only the whole chain gives — per-chain T_kin, divergent flags. Not differentiable, so a pathwise
  estimator refuses an objective whose penalty is on (`Objective.pathwise_refusal`).

The estimators never see an objective's settings: they build the outcome, call the shared meta-loss
(meta_train.meta_loss: every budget × seed, mean) and use the number. Adding an objective: a module defining an
`Objective` and one line in meta_train.objectives.OBJECTIVES.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np

from base.io import ConfigError


class Outcome(NamedTuple):
    """What one inner chain (or a population of them) produced, as its objective sees it.

    samples: the thinned positions, a pytree with leaves (K, ...) (a cross-chain objective: (C, K, ...)); None on
      the host side (`penalty`).
    x, y: the meta-loss batch — meta_loss_examples outer-validation examples (B, ...), (B,); for a reference
      objective x the reference's test inputs and y None.
    reference: the reference target the objective's `target` built (e.g. fidelity's probabilities or
      ReferenceTarget), None for other objectives.
    t_kin: per-chain kinetic temperature ⟨Σ r·∇_rK⟩/d over the sampling window, (P,) float64 (host side, when
      objective.log_temperature), else None.
    divergent: per-chain flags (P,) bool, the chain's meta-loss not finite (host side), else None.
    budget: the chain length (inner updates) it ran at — one of objective.budgets, or inner.num_steps.
    temperature: the sampler's target temperature T (1 for samplers without one).
    """

    samples: Any = None
    x: Any = None
    y: Any = None
    reference: Any = None
    t_kin: Any = None
    divergent: Any = None
    budget: int = 0
    temperature: float = 1.0


def _reference_loss(fn):
    """loss(task, outcome, config) of a `fn(task) -> objective(samples, x, reference)` reference objective."""
    return lambda task, outcome, config: fn(task)(outcome.samples, outcome.x, outcome.reference)


def _batch_loss(fn):
    """loss(task, outcome, config) of a `fn(task) -> objective(samples, x, y)` objective."""
    return lambda task, outcome, config: fn(task)(outcome.samples, outcome.x, outcome.y)


def temperature_penalty(outcome: Outcome, config) -> np.ndarray | None:
    """objective.temperature_weight · log(1 + |T_kin − T|/T) per chain (float64), None when the weight is 0: the
    chain-level penalty every objective has (it needs objective.log_temperature; logarithmic so that a chain that
    blows up still ranks below the divergence cap)."""
    w = config.temperature_weight
    if not w:
        return None
    t = float(outcome.temperature)
    return w * np.log1p(np.abs(np.asarray(outcome.t_kin) - t) / t)


def _no_target(task, reference, config):
    raise ConfigError("this objective has no reference target")


class Objective(NamedTuple):
    """One meta-objective (a registry entry; module doc).

    fn: task -> objective(samples, x, y) -> scalar, the objective's core (a reference objective: (samples, x,
      reference target)); `loss` defaults to it.
    reference: taken on a NUTS reference's test points (objective.reference) instead of a held-out batch; its
      `target(task, reference, config)` builds the reference target from the loaded reference
      (meta_train.reference.TaskReference), and `draws(config)` says whether the reference's draws are needed.
    cross_chain: over objective.chains parallel chains (samples (C, K, ...)).
    gradient_only: its value is meaningless, only its pathwise gradient: a pathwise estimator only (es.estimator
      backprop).
    fields: the objective.* settings only this objective reads (another kind refuses them, naming the owners).
    check: (ObjectiveConfig) -> None, ConfigError for its own settings; None: nothing to check.
    loss: (task, Outcome, ObjectiveConfig) -> scalar, traced per chain (module doc); None: from `fn`.
    penalty: (Outcome, ObjectiveConfig) -> (P,) float64 or None, on the host (module doc).
    """

    fn: Callable
    reference: bool = False
    cross_chain: bool = False
    gradient_only: bool = False
    fields: tuple[str, ...] = ()
    check: Callable | None = None
    loss: Callable | None = None
    penalty: Callable = temperature_penalty
    target: Callable = _no_target
    draws: Callable = lambda config: False

    def loss_fn(self, task, config) -> Callable[[Outcome], Any]:
        """outcome -> scalar of `task` with the settings `config` (an ObjectiveConfig): `loss`, or from `fn`."""
        loss = self.loss or (_reference_loss(self.fn) if self.reference else _batch_loss(self.fn))
        return lambda outcome: loss(task, outcome, config)

    def pathwise_refusal(self, config) -> str | None:
        """Why a pathwise estimator cannot take this objective with `config`, or None: its host-side penalty is on
        (it has no gradient) — objective.temperature_weight, or a penalty of its own."""
        if config.temperature_weight:
            return ("objective.temperature_weight penalises T_kin on the host after the chain, which has no pathwise "
                    "gradient")
        if self.penalty is not temperature_penalty:
            return "the objective's host-side penalty has no pathwise gradient"
        return None


def check_weight(config, name: str) -> None:
    """ConfigError unless objective.`name` is a finite number ≥ 0."""
    if not 0 <= getattr(config, name) < math.inf:
        raise ConfigError(f"objective.{name} must be a finite number ≥ 0, got {getattr(config, name)}")


__all__ = ["Objective", "Outcome", "check_weight", "temperature_penalty"]
