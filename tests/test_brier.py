"""The "brier" meta-objective, added through the objective table alone (meta_train/objectives/brier.py and one
line of OBJECTIVES): its value equals numpy's Brier score of the BMA predictive to float32 rounding, regression
tasks are refused with one line, and a smoke meta-training run on it gives finite meta-losses."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from conftest import iris_mlp
from base.io import ConfigError
from meta_train import PRESETS, apply_overrides, meta_train
from meta_train.objectives import OBJECTIVES
from tasks import TaskCache, build


def test_brier_matches_numpy():
    task = build(iris_mlp(8), TaskCache())
    samples = jax.vmap(task.init_params)(jax.random.split(jax.random.PRNGKey(0), 5))
    x, y = task.splits.outer_valid
    got = float(OBJECTIVES["brier"].fn(task)(samples, x, y))
    logits = np.stack([np.asarray(task.apply(jax.tree.map(lambda a, k=k: a[k], samples), x), np.float64)
                       for k in range(5)])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (probs / probs.sum(-1, keepdims=True)).mean(0)
    want = np.mean(np.sum((probs - np.eye(probs.shape[1])[np.asarray(y)]) ** 2, axis=1))
    assert got == pytest.approx(want, rel=1e-5)  # float32 softmax and mean over ≤ 150 × 3 terms


def test_brier_refuses_regression():
    from tasks.regression import RegressionSpec

    with pytest.raises(ConfigError, match="brier needs a classification task"):
        OBJECTIVES["brier"].fn(build(RegressionSpec("synthetic_1d", hidden=(8,)), TaskCache()))


def test_meta_training_on_brier(tmp_path):
    cfg = apply_overrides(PRESETS["smoke"], ["objective.kind=brier", "num_outer=2", "checkpoint_every=2"])
    out = meta_train(cfg, tmp_path / "run", progress=False)
    assert np.isfinite(out["final_meta_loss"]) and 0 <= out["final_meta_loss"] <= 2
