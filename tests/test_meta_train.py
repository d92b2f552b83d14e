"""Meta-training: determinism, exact resumption, checkpoints loadable as a sampler, bad input."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import l2e
from meta_train import PRESETS, ConfigError, RunDirError, apply_overrides, meta_train
from meta_train.config import from_dict

ROOT = Path(__file__).resolve().parents[1]
SMOKE = apply_overrides(PRESETS["smoke"], ["num_outer=4", "checkpoint_every=2"])


def flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    return out, meta_train(SMOKE, out, progress=False)


def test_smoke_run_writes_log_plot_and_checkpoints(full_run):
    out, summary = full_run
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert all(np.isfinite(r["meta_loss"]) and r["inner_seconds"] > 0 for r in rows)
    assert (out / "meta_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4"]
    assert np.all(np.isfinite(flat(summary["meta_params"])))


def test_same_seed_same_numbers(full_run, tmp_path):
    out, summary = full_run
    again = meta_train(SMOKE, tmp_path / "again", progress=False)
    np.testing.assert_array_equal(flat(summary["meta_params"]), flat(again["meta_params"]))
    a = [r["meta_loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())]
    b = [r["meta_loss"] for r in map(json.loads, (tmp_path / "again" / "log.jsonl").read_text().splitlines())]
    assert a == b


def test_different_seed_different_numbers(full_run, tmp_path):
    _, summary = full_run
    other = meta_train(dataclasses.replace(SMOKE, seed=1), tmp_path / "other", progress=False)
    assert not np.array_equal(flat(summary["meta_params"]), flat(other["meta_params"]))


def test_resumed_run_equals_uninterrupted(full_run, tmp_path):
    _, summary = full_run
    out = tmp_path / "resumed"
    meta_train(SMOKE, out, progress=False, stop_after=3)  # checkpoint at 2, iteration 3 is lost
    resumed = meta_train(SMOKE, out, resume=True, progress=False)
    np.testing.assert_array_equal(flat(summary["meta_params"]), flat(resumed["meta_params"]))
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_checkpoint_loads_as_drop_in_sampler(full_run):
    out, summary = full_run
    params, config, meta = l2e.load_meta_params(out)
    assert meta["iteration"] == 4
    np.testing.assert_array_equal(flat(params), flat(summary["meta_params"]))
    assert config == SMOKE.sampler
    from tasks import build_task

    task = build_task(SMOKE.tasks.specs()[0])
    sampler = l2e.load_sampler(out, posterior=task.posterior)
    state = sampler.init(task.init_params(jax.random.PRNGKey(0)))
    batch = task.sample_batch(jax.random.PRNGKey(1), task.train_data, 16)
    state = jax.jit(sampler.step)(jax.random.PRNGKey(2), state, batch)
    assert np.all(np.isfinite(flat(state.position)))


def test_existing_run_is_not_overwritten(full_run):
    out, _ = full_run
    before = (out / "log.jsonl").read_text()
    with pytest.raises(RunDirError, match="--resume"):
        meta_train(SMOKE, out, progress=False)
    with pytest.raises(RunDirError, match="config differs"):
        meta_train(dataclasses.replace(SMOKE, seed=5), out, resume=True, progress=False)
    assert (out / "log.jsonl").read_text() == before


def test_config_round_trip_and_overrides():
    cfg = apply_overrides(PRESETS["default"], ["inner.num_steps=500", "es.sigma=0.02",
                                                "tasks.datasets=digits,synthetic_images", "sampler.noise=reference"])
    assert cfg.inner.num_steps == 500 and cfg.es.sigma == 0.02 and cfg.sampler.noise == "reference"
    assert from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown config key: inner.bogus"):
        apply_overrides(cfg, ["inner.bogus=1"])
    with pytest.raises(ConfigError, match="population"):
        apply_overrides(cfg, ["es.population=3"])
    with pytest.raises(ConfigError, match="bad value"):
        apply_overrides(cfg, ["num_outer=ten"])


@pytest.mark.parametrize("args,msg", [
    (["--preset", "nope"], "unknown preset"),
    (["--preset", "smoke", "--set", "es.population=3"], "population"),
    (["--preset", "smoke", "--set", "sampler.learning_rate=-1"], "learning_rate"),
    (["--preset", "smoke", "--set", "tasks.datasets=imagenet"], "unknown dataset"),
])
def test_cli_bad_input_one_line_error(args, msg, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "meta_train", *args, "--output", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and msg in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
