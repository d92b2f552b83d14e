"""The budget curves' warm start of SMILE / pSMILE (evaluate.curve.run._ensemble_start): the deep ensemble at its best.

On a tiny iris task whose deep-ensemble grid has a bad first point (lr 1e-5: the members barely leave their
initialisation) and a good second one (lr 0.3), against a synthetic reference concentrated on the test labels:

- the ensemble's grid is tuned once per task (one `_tune` of deep_ensemble for the SMILE and pSMILE rows), and its
  oracle (and validation) choice is the good lr;
- every warm start of every run (tuning and curve, both methods) is the ensemble at that lr — the old curve started
  from the grid's first point;
- the grid's gradients are in the rows' tuning-inclusive addend (ensemble grid + the method's own grid, each run of
  it with its members' gradients), and each curve point counts G plus the members it starts from;
- curve.md names the ensemble lr a warm-started row starts from.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import iris_mlp, tiny_eval_config

BAD, GOOD = 1e-5, 0.3


def _reference(task, draws: int = 40) -> dict:
    """Per-draw test predictives concentrated on the test labels (a Dirichlet around each one-hot label)."""
    rng = np.random.default_rng(0)
    labels = np.asarray(task.splits.test[1])
    alpha = 1.0 + 30.0 * np.eye(task.num_classes)[labels]
    return {"probs": np.stack([np.stack([rng.dirichlet(a) for a in alpha]) for _ in range(draws)])}


def test_smile_curves_start_from_the_tuned_deep_ensemble(monkeypatch):
    import evaluate.curve.run as curve_run
    from evaluate.curve.cli import _warm_factory
    from evaluate.curve.report import curve_markdown
    from evaluate.methods import CompileCache
    from tasks import TaskCache, build

    settings = {"deep_ensemble": {"lrs": (BAD, GOOD)}, "smile": {"chains": 2, "step_sizes": (1e-3, 1e-2)},
                "psmile": {"chains": 2, "step_sizes": (1e-3, 1e-2)}}
    cfg = tiny_eval_config(iris_mlp(8), ["smile", "psmile"], settings, thinning=None, tune=False)
    task = build(cfg.tasks[0], TaskCache())
    curve = curve_run.CurveConfig(budgets=(40, 80), chains=(1, 2), tune_budget=40, seeds=(0,)).check(4)
    cache = CompileCache()
    tuned, starts = [], []
    real_tune = curve_run._tune
    monkeypatch.setattr(curve_run, "_tune", lambda task, key, method, *a: tuned.append(method) or real_tune(
        task, key, method, *a))

    def factory(task, key, method, ensemble_hp):
        warm = _warm_factory(cfg, cache)(task, key, method, ensemble_hp)
        return lambda run_cfg: starts.append((method, warm(run_cfg))) or starts[-1][1]

    out = curve_run.curve_task(task, 0, {}, _reference(task), cfg, curve, cfg.methods, {}, cache, None, factory)

    assert tuned.count("deep_ensemble") == 1 and set(out["methods"]) == {"smile", "psmile"}  # once per task
    for name, row in out["methods"].items():
        start = row["tuning"]["warm_start"]
        grid = {g["label"]: g for g in start["tuning"]["grid"]}
        assert start["hp"] == start["tuning"]["oracle"] == {"learning_rate": GOOD}, grid
        assert start["tuning"]["validation"] == {"learning_rate": GOOD}, grid
        assert grid[f"lr={GOOD:g}"]["oracle"] < grid[f"lr={BAD:g}"]["oracle"]
        # ensemble grid: 2 runs of G = 40; the method's grid: 2 runs of 40 + its 2 starting members' 2 × 40/4
        assert start["tuning"]["gradients"] == 80 and row["tuning"]["gradients"] == 80 + 2 * 60
        points = row["choices"]["oracle"]["seeds"]["0"]
        assert [p["gradients"] for p in points] == [40 + 20, 80 + 40]
        assert all(p["tv"] is not None for p in points)
    # every warm start (each method's tuning runs and each curve point: 2 + 2 per method) is the tuned ensemble
    assert len(starts) == 8 and {m for m, _ in starts} == {"smile", "psmile"}
    assert {w["warm_start"]["learning_rate"] for _, w in starts} == {GOOD}
    assert all(w["init_positions"] is not None and w["warm_start"]["members"] == [0, 1] for _, w in starts)
    text = curve_markdown({"k": 4, "curve": curve.__dict__, "methods": list(cfg.methods), "tasks": {"iris": out}})
    assert f"(from deep_ensemble lr={GOOD:g})" in text and "Warm-started rows start from the deep ensemble" in text


def test_mile_on_the_curves_gets_its_budget_in_full_batch_gradients():
    """MILE (full batch) at a curve point of G minibatch gradients of B: ⌊G·B/(2·N·chains)⌋ steps per chain, K/chains
    draws over the last half, warm-up split 80/10/10; a full-batch gradient counts N/B minibatch gradients."""
    import types

    from evaluate.curve.run import _spent
    from evaluate.methods.mile import MILESettings, curve_settings

    cfg = types.SimpleNamespace(num_steps=8000, batch_size=128, num_samples=10)
    s = curve_settings(MILESettings(chains=2), cfg, data_size=1150)
    assert sum(s.steps) + s.samples * s.thinning == 8000 * 128 // (2 * 1150 * 2) == 222
    assert s.samples == 5 and s.thinning == 111 // 5 and s.steps[1] == s.steps[2] == (222 - 5 * 22) // 10
    tiny = curve_settings(MILESettings(chains=2), types.SimpleNamespace(num_steps=40, batch_size=16, num_samples=4), 100)
    assert tiny.steps[0] >= 1 and tiny.samples == 2 and tiny.thinning >= 1
    task = types.SimpleNamespace(data_size=1150)
    full = types.SimpleNamespace(grad_evals=444, gradient="full-batch")
    mini = types.SimpleNamespace(grad_evals=8000, gradient="minibatch")
    assert _spent(task, full, {"warm_start": {"grad_evals": 1600}}, 128) == round(444 * 1150 / 128) + 1600
    assert _spent(task, mini, {}, 128) == 8000


@pytest.mark.slow
def test_mile_curve_end_to_end_on_a_tiny_task():
    from evaluate.curve.cli import _warm_factory
    from evaluate.curve.run import CurveConfig, curve_task
    from evaluate.methods import CompileCache
    from tasks import TaskCache, build

    settings = {"deep_ensemble": {"lrs": (GOOD,)}, "mile": {"chains": 2}}
    cfg = tiny_eval_config(iris_mlp(8), ["mile"], settings, thinning=None, tune=False)
    task = build(cfg.tasks[0], TaskCache())
    curve = CurveConfig(budgets=(400, 1600), chains=(1,), tune_budget=40, seeds=(0,)).check(4)
    cache = CompileCache()
    out = curve_task(task, 0, {}, _reference(task), cfg, curve, cfg.methods, {}, cache, None,
                     lambda task, key, method, hp: _warm_factory(cfg, cache)(task, key, method, hp))
    points = out["methods"]["mile"]["choices"]["oracle"]["seeds"]["0"]
    assert [p["budget"] for p in points] == [400, 1600] and all(p["tv"] is not None for p in points)
    # its own full-batch work is about G (MCLMC's tuning adds a little); the members add 2 × G/4
    for p in points:
        assert 0.5 * p["budget"] <= p["gradients"] - p["budget"] // 2 <= 2.0 * p["budget"], p
