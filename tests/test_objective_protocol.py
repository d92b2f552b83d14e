"""The objective protocol (meta_train.objectives.protocol, meta_train.meta_loss; issue 36):

- an objective is its module plus one registry line: a throw-away objective (its own loss of the chain's Outcome and
  its own host-side penalty reading the budget) registered in OBJECTIVES runs through antithetic ES (averaged over
  objective.budgets by the shared meta-loss) and truncated ES on the smoke preset, and backprop refuses it (its
  penalty has no pathwise gradient) in one ConfigError;
- the banded fidelity objective (TV + dispersion band + T_kin penalty, the transient-band preset's) runs with every
  estimator, or the estimator refuses in one ConfigError saying why (budgets: truncated estimators; the T_kin
  penalty: backprop), and runs there once the refused setting is off.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meta_train import objectives
from meta_train.config import ConfigError, ESConfig, ObjectiveConfig, apply_overrides
from meta_train.es import ProgramCache
from meta_train.estimators import ESTIMATORS
from meta_train.objectives import Objective, Outcome
from meta_train.presets import PRESETS
from meta_train.train import meta_train
from tasks.distribution import TaskDistribution


def _sum_of_squares(task):
    """A throw-away objective's core: the mean squared position of the samples (no data needed)."""
    return lambda samples, x, y: jnp.mean(jnp.stack([jnp.mean(jnp.square(s)) for s in jax.tree.leaves(samples)]))


@pytest.fixture
def throwaway(monkeypatch):
    """The objective "throwaway" registered with one line; its penalty records the budgets it saw."""
    seen = []

    def penalty(outcome: Outcome, config):
        seen.append(outcome.budget)
        assert outcome.divergent is not None and outcome.divergent.shape == (2,)
        return np.full(2, outcome.budget / 1000.0)

    monkeypatch.setitem(objectives.OBJECTIVES, "throwaway", Objective(_sum_of_squares, penalty=penalty))
    return seen


def _smoke(estimator: str, *sets: str):
    return apply_overrides(PRESETS["smoke"], ["num_outer=1", "inner.num_samples=2", "inner.thinning=5",
                                              "inner.num_steps=20", "inner.batch_size=16", "meta_loss_examples=32",
                                              "es.truncation=10", "es.execution=sequential",
                                              f"es.estimator={estimator}", *sets])


def _rows(out) -> list[dict]:
    import json

    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]


def test_a_registered_objective_runs_through_the_estimators(tmp_path, throwaway):
    cache = ProgramCache()
    config = _smoke("antithetic", "objective.kind=throwaway", "objective.budgets=10,20")
    meta_train(config, tmp_path / "anti", progress=False, cache=cache)
    assert throwaway == [10, 20]  # the shared meta-loss ran the objective at each budget
    row = _rows(tmp_path / "anti")[0]
    assert all(math.isfinite(f) and f > 0.015 for f in row["fitness"])  # loss + the mean penalty (10 + 20)/2000
    throwaway.clear()
    meta_train(_smoke("truncated", "objective.kind=throwaway"), tmp_path / "trunc", progress=False, cache=cache)
    assert throwaway == [20] and all(math.isfinite(f) for f in _rows(tmp_path / "trunc")[0]["fitness"])
    with pytest.raises(ConfigError, match="backprop cannot take objective.kind throwaway .* no pathwise gradient"):
        _smoke("backprop", "objective.kind=throwaway")


def _band(estimator: str, **objective):
    """The transient-band preset shrunk: one task, 40-update chains, population 2."""
    p = PRESETS["transient-band"]
    obj = dataclasses.replace(p.objective, **{"burn_in": 20, "budgets": (20, 40), **objective})
    return dataclasses.replace(
        p, num_outer=1, meta_loss_examples=32, objective=obj, tasks=TaskDistribution(tasks=("digits/mlp-16",)),
        inner=dataclasses.replace(p.inner, num_steps=40, num_samples=2, thinning=5, batch_size=16),
        es=ESConfig(population=2, estimator=estimator, truncation=20, execution="sequential"))


REFUSALS = {"truncated": "objective.budgets averages whole chains", "pes": "objective.budgets averages whole chains",
            "noise_reuse": "objective.budgets averages whole chains", "backprop": "objective.budgets averages whole"}


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
def test_the_banded_objective_runs_with_every_estimator_or_is_refused_with_a_reason(tmp_path, estimator):
    if estimator in REFUSALS:
        with pytest.raises(ConfigError, match=f"es.estimator {estimator} cannot take .*{REFUSALS[estimator]}"):
            _band(estimator, burn_in=0)
        if estimator == "backprop":
            with pytest.raises(ConfigError, match="temperature_weight penalises T_kin .* no pathwise gradient"):
                _band(estimator, budgets=(), burn_in=0)
            config = _band(estimator, budgets=(), burn_in=0, temperature_weight=0.0)  # TV + the dispersion band
        else:
            config = _band(estimator, budgets=(), burn_in=0)  # one chain length: the unroll's; T_kin per segment
    else:
        config = _band(estimator)
    meta_train(config, tmp_path / "run", progress=False)
    row = _rows(tmp_path / "run")[0]
    assert row["meta_loss"] is not None and all(math.isfinite(f) for f in row["fitness"])


def test_objective_settings_are_owned_by_their_objective():
    assert objectives.owners("dispersion_weight") == ["fidelity"]
    with pytest.raises(ConfigError, match="dispersion_weight needs objective.kind fidelity, got 'brier'"):
        ObjectiveConfig(kind="brier", dispersion_weight=0.5)
    with pytest.raises(ConfigError, match="objective.kind must be one of"):
        ObjectiveConfig(kind="nonesuch")
