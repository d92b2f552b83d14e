"""`python -m evaluate select` (evaluate.select): checkpoint selection over a meta-training run's committed steps.

A 3-checkpoint smoke meta-training run (paper-form L2E, checkpoint every iteration) and a tiny evaluation config
(digits CNN c4 d1 on 400 training images, 20 updates, 2 samples, a 2-point lr grid)."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from evaluate.config import apply_overrides, get_preset
from evaluate.run import evaluate
from evaluate.select import (KIND_METHODS, learned_method_for, metric_value, select_checkpoints,
                             selection_markdown, write_selection)
from base.io import ConfigError
from meta_train import PRESETS, meta_train

from conftest import ROOT as REPO
from conftest import one_error_line, run_cli

TINY = ["methods=l2e", "num_samples=2", "num_steps=20", "thinning=5", "tune_examples=32", "settings.l2e.lrs=0.25,0.5",
        "settings.meta_sgmcmc.lrs=0.01,0.03"]
TINY_CLI = [a for o in TINY for a in ("--set", o)]
META_SMOKE = apply_overrides(PRESETS["smoke"], ["num_outer=3", "checkpoint_every=1"])


def tiny_cfg(*extra):
    """The smoke preset with TINY, an `extra` override replacing TINY's of the same key (a key is given once)."""
    keys = {o.split("=", 1)[0] for o in extra}
    return apply_overrides(get_preset("smoke"), [o for o in TINY if o.split("=", 1)[0] not in keys] + list(extra))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "mt"
    meta_train(META_SMOKE, out, progress=False)
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [1, 2, 3]
    return out


@pytest.fixture(scope="module")
def selection(run):
    return select_checkpoints(tiny_cfg(), run, "nll")


def _strip(row: dict) -> dict:
    return {n: {k: v for k, v in t.items() if k != "seconds"} for n, t in row["tasks"].items()}


@pytest.mark.slow
def test_selection_picks_argmin_of_recorded_scores(selection, run):
    sel = selection
    assert [r["step"] for r in sel["steps"]] == [1, 2, 3] and sel["final_step"] == 3
    assert sel["method"] == "l2e" and sel["sampler_kind"] == "l2e" and sel["metric"] == "nll"
    for r in sel["steps"]:  # score = the mean over tasks of the recorded per-task metric (one task: itself)
        values = [t["metric"] for t in r["tasks"].values()]
        assert r["score"] == pytest.approx(float(np.mean(values)))
        assert all(t["nll"] == t["metric"] for t in r["tasks"].values())
        assert r["checkpoint"] == str(run / "checkpoints" / str(r["step"]))
    scores = [r["score"] for r in sel["steps"]]
    assert sel["chosen_step"] == sel["steps"][int(np.argmin(scores))]["step"]
    assert sel["chosen_is_final"] == (sel["chosen_step"] == 3)
    assert sel["scores"] == {str(r["step"]): r["score"] for r in sel["steps"]}
    assert len(set(scores)) == 3  # the steps' meta-parameters differ, so do their numbers


@pytest.mark.slow
def test_each_step_is_the_evaluation_of_that_checkpoint_with_the_same_seed(selection, run):
    """A step's row is exactly `evaluate` of that step's checkpoint (method l2e, same config and seed)."""
    cfg = apply_overrides(tiny_cfg(), ["methods=l2e"])
    for r in selection["steps"][::2]:
        res = evaluate(cfg, None, sampler_path=Path(r["checkpoint"]), progress=False)
        entry = res["tasks"][selection["tasks"][0]]["methods"]["l2e"]
        assert entry["nll"] == r["tasks"][selection["tasks"][0]]["nll"]
        assert entry["hyperparameters"]["learning_rate"] == r["tasks"][selection["tasks"][0]]["learning_rate"]


@pytest.mark.slow
def test_same_numbers_when_rerun_and_equal_checkpoints_score_equally(selection, run, tmp_path):
    """Every step runs with the same seed and keys: a copy of step 1 committed as step 9 gets step 1's numbers
    exactly, and a tie goes to the earlier step; the whole selection re-run gives the same numbers."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shutil.copytree(copy / "checkpoints" / "1", copy / "checkpoints" / "9")
    again = select_checkpoints(tiny_cfg(), copy, "nll")
    rows = {r["step"]: r for r in again["steps"]}
    assert [r["step"] for r in again["steps"]] == [1, 2, 3, 9]
    for r in selection["steps"]:
        assert _strip(rows[r["step"]]) == _strip(r) and rows[r["step"]]["score"] == r["score"]
    assert _strip(rows[9]) == _strip(rows[1])
    if selection["chosen_step"] == 1:
        assert again["chosen_step"] == 1  # the earliest among equal scores


@pytest.mark.slow
def test_selection_written_and_markdown(selection, tmp_path):
    paths = write_selection(selection, tmp_path / "sel")
    back = json.loads(paths["json"].read_text())
    assert back["chosen_step"] == selection["chosen_step"] and len(back["steps"]) == 3
    md = paths["markdown"].read_text()
    assert md == selection_markdown(selection)
    assert f"**Chosen step: {selection['chosen_step']}**" in md and "Rule: the L2E authors' rule" in md


@pytest.mark.slow
def test_metric_tv_against_committed_reference_two_seeds(run):
    """--metric tv on digits/mlp-32 (results/references), seeds 0 and 1: the score is the recorded total variation
    (the mean over the seeds), each seed's score and their standard error are recorded, and the reference's
    dispersion statistics give dispersion ratios."""
    cfg = apply_overrides(get_preset("smoke"), TINY + ["seeds=0,1"])
    from evaluate.__main__ import with_task_strings

    cfg = with_task_strings(cfg, ["digits/mlp-32"], None)
    sel = select_checkpoints(cfg, run, "tv", references={None: str(REPO / "results" / "references")})
    assert sel["seeds"] == [0, 1]
    for r in sel["steps"]:
        t = r["tasks"]["digits/mlp-32"]
        assert t["metric"] == t["total_variation"] == r["score"] and 0 < r["score"] < 1
        per_seed = list(r["seed_scores"].values())
        assert r["score"] == pytest.approx(np.mean(per_seed)) and per_seed[0] != per_seed[1]
        assert r["score_se"] == pytest.approx(np.std(per_seed, ddof=1) / np.sqrt(2))
        assert t["dispersion"] is not None and t["dispersion"]["weight_norm"] > 0
    assert sel["chosen_step"] == min(sel["steps"], key=lambda r: r["score"])["step"]
    assert "± " in selection_markdown(sel)


@pytest.mark.slow
def test_shipped_kind_runs_its_method_on_the_step(tmp_path):
    """A meta_sgmcmc run is evaluated as method meta_sgmcmc with the step's meta-parameters in place of the
    shipped checkpoint: the shipped checkpoint itself, committed as a run's step, gets method meta_sgmcmc's own
    numbers on the shipped checkpoint."""
    from l2e.checkpoint import shipped_checkpoint

    root = tmp_path / "run" / "checkpoints"
    root.mkdir(parents=True)
    shutil.copytree(shipped_checkpoint("meta-sgmcmc"), root / "400", ignore=shutil.ignore_patterns("*.md", "*.png",
                                                                                                   "*.json*"))
    sel = select_checkpoints(tiny_cfg(), tmp_path / "run", "nll")
    assert sel["method"] == "meta_sgmcmc" and sel["sampler_kind"] == "meta_sgmcmc"
    name = sel["tasks"][0]
    shipped = evaluate(tiny_cfg("methods=meta_sgmcmc"), None, progress=False)["tasks"][name]["methods"]["meta_sgmcmc"]
    assert sel["steps"][0]["tasks"][name]["nll"] == shipped["nll"]
    assert sel["steps"][0]["tasks"][name]["t_kin"] == shipped["t_kin"]


def test_learned_method_by_kind():
    assert KIND_METHODS == {"l2e": "l2e", "mass": "l2e_mass", "kinetic": "l2e_kinetic", "meta_sgmcmc": "meta_sgmcmc",
                            "step_scale": "l2e", "transient": "l2e_transient"}  # a kind without a shipped method runs through --sampler
    assert learned_method_for("l2e") == ("l2e", None)
    assert learned_method_for("step_scale") == ("l2e", None)
    assert learned_method_for("mass") == ("l2e_mass", "mass")
    assert learned_method_for("kinetic") == ("l2e_kinetic", "kinetic")
    assert learned_method_for("meta_sgmcmc") == ("meta_sgmcmc", "meta-sgmcmc")
    assert learned_method_for("meta_sgmcmc", "precond_l2e") == ("precond_l2e", "precond-l2e")
    with pytest.raises(ConfigError, match="not a learned-sampler method"):
        learned_method_for("mass", "sghmc")
    with pytest.raises(ConfigError, match="kind 'mass'"):
        learned_method_for("meta_sgmcmc", "l2e_mass")


def test_metric_value():
    assert metric_value({"nll": 0.5}, "classification", "nll") == 0.5
    assert metric_value({"lppd": -1.25}, "regression", "nll") == 1.25
    assert metric_value({"total_variation": 0.1, "nll": 0.5}, "classification", "tv") == 0.1
    assert metric_value({"nll": None}, "classification", "nll") is None
    assert metric_value({"nll": math.inf}, "classification", "nll") is None


# ----------------------------------------------------------------------------------------------- the CLI


def _cli(*args):
    """`python -m evaluate select args`, run in this process (conftest.run_cli)."""
    return run_cli("evaluate", "select", *args, cwd=REPO)


_one_line_error = one_error_line  # exit status 2, exactly one stderr line `error: ...`


@pytest.mark.slow
def test_cli_bad_input_one_line_error_nothing_written(run, tmp_path):
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    cases = [
        ((str(tmp_path / "missing"), "--output", str(out)), "not found"),
        ((str(empty), "--output", str(out)), "no committed checkpoint"),
        ((str(run), "--output", str(out), "--metric", "ece"), "unknown --metric"),
        ((str(run), "--output", str(out), "--metric", "tv"), "needs --reference"),
        ((str(run), "--output", str(out), "--metric", "tv", "--reference", str(REPO / "results" / "references"),
          *TINY_CLI, "--preset", "smoke"), "holds none of the configured tasks"),
        ((str(run), "--output", str(out), "--task", "digits/nonsense-1"), "error"),
        ((str(run), "--output", str(out), "--method", "sghmc"), "not a learned-sampler method"),
        ((str(run), "--output", str(run)), "is the run directory"),
        ((str(run), "--output", str(empty)), "holds a meta-training run"),
    ]
    for args, msg in cases:
        line = _one_line_error(_cli(*args))
        assert msg in line, (args, line)
        assert not out.exists(), args


@pytest.mark.slow
def test_cli_writes_selection_and_refuses_existing_output(run, tmp_path):
    out = tmp_path / "sel"
    proc = _cli(str(run), "--output", str(out), "--preset", "smoke", *TINY_CLI, "--quiet")
    assert proc.returncode == 0, proc.stderr
    sel = json.loads((out / "selection.json").read_text())
    assert [r["step"] for r in sel["steps"]] == [1, 2, 3] and (out / "selection.md").is_file()
    assert f"Chosen step: {sel['chosen_step']}" in proc.stdout
    before = (out / "selection.json").read_bytes()
    assert "--overwrite" in _one_line_error(_cli(str(run), "--output", str(out), "--preset", "smoke", *TINY_CLI))
    assert (out / "selection.json").read_bytes() == before
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    assert "not a selection of ours" in _one_line_error(_cli(str(run), "--output", str(tmp_path / "foreign")))
