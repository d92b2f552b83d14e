"""One outer iteration as a function, dispatched through the estimator table (meta_train.estimators.ESTIMATORS):
`make_estimator(config, φ₀)` builds the estimator `es.estimator` names; `outer_step(estimator, state, iteration,
cache)` runs iteration `iteration` from `state` and returns OuterStep(new state, task spec, log row)."""
from __future__ import annotations

from typing import Callable

from meta_train.es import ProgramCache
from meta_train.estimators import Estimator, OuterStep, make


def make_estimator(config, phi0) -> Estimator:
    """The outer gradient estimator of `config` (a MetaTrainConfig: its es.estimator) starting from φ₀ `phi0`."""
    return make(config, phi0)


def outer_step(estimator: Estimator, state, iteration: int, cache: ProgramCache,
               progress: Callable[[int], None] | None = None) -> OuterStep:
    """Outer iteration `iteration` from `state`; all randomness from outer_keys(config.seed, iteration), so the result
    is a function of (state, iteration) and `state` is not changed.

    Args:
      estimator: from `make_estimator`.
      state: the estimator's state (its `init`, or a previous step's).
      iteration: the outer iteration (0-based).
      cache: the run's ProgramCache (tasks, compiled programs).
      progress: called with n after every n inner steps.
    Returns:
      OuterStep(es_state, spec, row). FloatingPointError if the new meta-parameters are not finite.
    """
    return estimator.step(state, iteration, cache, progress)
