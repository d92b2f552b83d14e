"""End-to-end tests of `python -m evaluate` (smoke preset) with a freshly written test checkpoint."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import pytest

import l2e
from evaluate.config import DEFAULT_METHODS, ConfigError, EvalConfig, PRESETS, apply_overrides, get_preset
from evaluate.methods import MethodSettings, get_method
from evaluate.run import evaluate, load_l2e

from conftest import ROOT as REPO
from conftest import one_error_line, run_cli

TEST_SAMPLER = l2e.L2EConfig(learning_rate=0.5, alpha_scale=1.0, beta_scale=1.0)


def write_test_checkpoint(path, meta_params, sampler_config: l2e.L2EConfig, step: int = 0) -> Path:
    """Write a checkpoint the way meta_train does: an orbax CheckpointManager step under path/checkpoints
    with items "meta_params" (StandardSave of the flax params) and "meta" (JSON with the sampler config)."""
    import orbax.checkpoint as ocp

    root = Path(path).resolve() / "checkpoints"
    mngr = ocp.CheckpointManager(root, item_names=("meta_params", "meta"))
    mngr.save(step, args=ocp.args.Composite(
        meta_params=ocp.args.StandardSave(meta_params),
        meta=ocp.args.JsonSave({"sampler": dataclasses.asdict(sampler_config), "outer_step": step}),
    ))
    mngr.wait_until_finished()
    mngr.close()
    return Path(path)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_test_checkpoint(tmp_path_factory.mktemp("ckpt"), l2e.meta_model.init_meta_params(jax.random.PRNGKey(0)),
                                 TEST_SAMPLER)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, checkpoint):
    out = tmp_path_factory.mktemp("smoke")
    return out, evaluate(get_preset("smoke"), out, sampler_path=checkpoint, progress=False, samples=True)


TIMING = {"seconds", "ess_per_second", "fs_ess_per_second", "seconds_per_step", "sghmc_seconds_per_step", "seconds_per_step_vs_sghmc"}


def _drop_timing(x):
    if isinstance(x, dict):
        return {k: _drop_timing(v) for k, v in x.items() if k not in TIMING}
    return x


def numbers(results: dict) -> dict:
    """Every reported number except timings."""
    return {(t, m): _drop_timing(entry) for t, task in results["tasks"].items() for m, entry in task["methods"].items()}


def test_checkpoint_helper_roundtrip(checkpoint):
    params, config, meta = l2e.load_meta_params(checkpoint)
    assert config == TEST_SAMPLER and meta["outer_step"] == 0
    assert jax.tree.structure(params) == jax.tree.structure(l2e.meta_model.init_meta_params(jax.random.PRNGKey(0)))


@pytest.mark.slow
def test_smoke_report(smoke):
    out, results = smoke
    for name in ("report.json", "report.md", "bma_curves.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["num_steps"] == 60 and report["config"]["sampler_config"]["alpha_scale"] == 1.0
    (task,) = report["tasks"].values()
    assert task["held_out"]
    assert set(task["methods"]) == set(DEFAULT_METHODS) and task["kind"] == "classification"
    grad_evals = {m["grad_evals"] for m in task["methods"].values()}
    assert grad_evals == {60}
    for name, m in task["methods"].items():
        for key in ("acc", "nll", "ece", "pairwise_kld", "seconds"):
            assert math.isfinite(m[key]), (name, key, m[key])
        assert 0.0 <= m["acc"] <= 1.0 and m["nll"] > 0 and m["seconds"] > 0
        assert m["num_samples"] == 3 and m["divergent_chains"] == 0
        assert m["curve"]["num_samples"] == [1, 2, 3] and len(m["curve"]["nll"]) == 3
        hp = m["hyperparameters"]
        points = get_method(name).points(getattr(PRESETS["smoke"].settings, name))
        assert hp["tuned"] and hp["learning_rate"] in [p["learning_rate"] for p in points]
        assert len(hp["grid"]) == len(points) and all(k.startswith("lr=") for k in hp["grid"])
    assert "| sghmc |" in (out / "report.md").read_text()


@pytest.mark.slow
def test_save_samples_writes_inference_data(smoke):
    """--save-samples: each method's final-run samples as ArviZ InferenceData, one chain per chain / member."""
    import arviz as az
    import numpy as np

    from evaluate.__main__ import build_parser

    assert build_parser().parse_args(["--save-samples"]).save_samples
    out, results = smoke
    (name, task), = results["tasks"].items()
    assert set(task["samples"]) == set(DEFAULT_METHODS)
    shapes = {}
    for method, rel in task["samples"].items():
        assert rel == f"samples/{name.replace('/', '_')}/{method}.nc"
        post = az.from_netcdf(out / rel).posterior
        for v in post.data_vars.values():
            assert v.dims[:2] == ("chain", "draw") and np.isfinite(v.values).all()
        shapes[method] = (post.sizes["chain"], post.sizes["draw"])
    assert shapes == {"l2e": (1, 3), "l2e_mass": (1, 3), "sghmc": (1, 3), "csghmc": (1, 3), "deep_ensemble": (3, 1)}


@pytest.mark.slow
def test_same_seed_same_numbers_other_seed_differs(smoke, checkpoint, tmp_path):
    _, first = smoke
    again = evaluate(get_preset("smoke"), None, sampler_path=checkpoint, progress=False)
    assert numbers(again) == numbers(first)
    other = evaluate(apply_overrides(get_preset("smoke"), ["seed=1"]), None, sampler_path=checkpoint, progress=False)
    a, b = numbers(first), numbers(other)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key]["nll"] != b[key]["nll"], key


@pytest.mark.slow
def test_divergent_method_is_excluded_and_counted(checkpoint):
    cfg = apply_overrides(get_preset("smoke"), ["tune=false", "methods=sghmc,deep_ensemble",
                                                "settings.sghmc.lrs=1e6", "settings.deep_ensemble.lrs=1e6"])
    results = evaluate(cfg, None, progress=False)
    (task,) = results["tasks"].values()
    for name, m in task["methods"].items():
        assert m["divergent_chains"] > 0, name
        assert m["num_samples"] < m["num_samples_requested"], name
        assert m["grad_evals"] == 60
        # excluded, never averaged in: either no metrics at all or metrics of the finite samples only
        assert m["nll"] is None or math.isfinite(m["nll"])
        assert m["hyperparameters"]["learning_rate"] == 1e6


def test_config_validation():
    cfg = get_preset("smoke")
    with pytest.raises(ConfigError, match="unknown config key"):
        apply_overrides(cfg, ["nope=1"])
    with pytest.raises(ConfigError, match="multiple"):
        apply_overrides(cfg, ["num_steps=61"])
    with pytest.raises(ConfigError, match="unknown method"):
        apply_overrides(cfg, ["methods=l2e,no_such_method"])
    with pytest.raises(ConfigError):
        apply_overrides(cfg, ["settings.sghmc.lrs=-1"])
    assert apply_overrides(cfg, ["settings.sghmc.lrs=0.1,0.2"]).settings.sghmc.lrs == (0.1, 0.2)
    with pytest.raises(ConfigError):
        EvalConfig(tasks=())
    default = get_preset("default")
    assert len(default.tasks) >= 2 and all(default.held_out)
    assert default.schedule("sghmc").sample_steps[0] > default.num_steps // 2
    assert isinstance(default.settings, MethodSettings)


def _cli(*args):
    """`python -m evaluate args`, run in this process (conftest.run_cli)."""
    return run_cli("evaluate", *args, cwd=REPO)


_one_line_error = one_error_line  # exit status 2, exactly one stderr line `error: ...`, nothing else


def test_cli_unknown_preset(tmp_path):
    line = _one_line_error(_cli("--preset", "nope", "--output", str(tmp_path / "o")))
    assert "unknown preset" in line


def test_cli_missing_checkpoint(tmp_path):
    line = _one_line_error(_cli("--preset", "smoke", "--output", str(tmp_path / "o"),
                                "--sampler", str(tmp_path / "missing")))
    assert "checkpoint not found" in line


@pytest.mark.slow
def test_cli_unknown_key_and_existing_report(tmp_path, smoke):
    assert "unknown config key" in _one_line_error(_cli("--preset", "smoke", "--set", "bogus=1",
                                                        "--output", str(tmp_path / "o")))
    out, _ = smoke
    assert "--overwrite" in _one_line_error(_cli("--preset", "smoke", "--output", str(out)))


def test_load_l2e_keeps_checkpoint_config(checkpoint):
    sampler = load_l2e(checkpoint)
    assert sampler["sampler"] == TEST_SAMPLER


def test_cli_protocol_flags(tmp_path):
    from evaluate.__main__ import _cli_overrides, build_parser

    args = build_parser().parse_args(["--seeds", "0,1,2", "--budget-seconds", "30", "--set", "tune=false"])
    assert _cli_overrides(args) == ["tune=false", "seeds=0,1,2", "budget_seconds=30.0", "budget=seconds"]
    cfg = apply_overrides(get_preset("smoke"), _cli_overrides(args))
    assert cfg.seed_list == (0, 1, 2) and cfg.budget == "seconds" and cfg.budget_seconds == 30.0
    out = str(tmp_path / "o")
    assert "budget_seconds" in _one_line_error(_cli("--preset", "smoke", "--budget", "seconds", "--output", out))
    assert "seeds must be distinct" in _one_line_error(_cli("--preset", "smoke", "--seeds", "0,0", "--output", out))
    line = _one_line_error(_cli("--preset", "smoke", "--set", "methods=l2e_released", "--released",
                                str(tmp_path / "missing"), "--output", out))
    assert "released meta-parameters not found" in line
    assert not (tmp_path / "o").exists()


def test_the_report_leads_with_the_results_and_ends_with_the_configuration():
    """report.md: the title, a line saying what ran, the table per task and the plots; the full configuration
    dump last, under "## Configuration" (a newcomer reads the findings first)."""
    from evaluate.report import render_markdown

    entry = {"acc": 0.9, "nll": 0.3, "grad_evals": 100, "num_samples": 2}
    results = {"config": {"title": "T", "methods": ["sghmc", "l2e"], "num_steps": 100, "budget": "gradients",
                          "num_samples": 2, "seed": 0, "tune": True, "zz_last_setting": 1},
               "tasks": {"a/mlp": {"held_out": "dataset", "methods": {"sghmc": entry, "l2e": dict(entry, nll=0.2)}}}}
    md = render_markdown(results, ["bma_curves.png"])
    lines = md.splitlines()
    assert lines[0] == "# T" and lines[2].startswith("What ran: 2 methods (sghmc, l2e) on 1 task (a/mlp)")
    table, plot, config = (md.index("| method |"), md.index("![bma_curves.png](bma_curves.png)"),
                           md.index("\n## Configuration\n"))
    assert table < plot < config and md.rstrip().endswith("- **zz_last_setting**: 1")
    assert "- **tune**: True" in md[config:] and "- **tune**" not in md[:config]
