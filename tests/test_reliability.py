"""Reliability of meta-training and evaluation: SIGKILL at five points and resume (bit-identical to an
uninterrupted run), atomic checkpoints, log repair, divergent inner chains, divergence in evaluation.

The kill test runs `python -m meta_train` as subprocesses on a tiny task (generated 8x8 images, MLP 8)
with a shared JAX persistent compilation cache, so each launch costs ~7 s of CPU: one uninterrupted run and
one run that is killed five times (the fault-injection hook L2E_FAULT=<point>:<n>, meta_train/faults.py,
sends SIGKILL to the process itself) and resumed after each kill — 7 launches.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e.checkpoint import committed_steps
from meta_train import PRESETS, apply_overrides, meta_train
from meta_train.run_dir import RunDirError, read_log

from conftest import ROOT, iris_mlp

OVERRIDES = ["num_outer=8", "checkpoint_every=2", "tasks.mlp_hidden=8", "tasks.channels=",
             "tasks.datasets=synthetic_images", "tasks.max_train=300"]
TINY = apply_overrides(PRESETS["smoke"], OVERRIDES)
NUMBERS = ("iteration", "task", "meta_loss", "loss_plus", "loss_minus", "fitness", "divergent_members",
           "meta_param_norm")


def flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def launch(out: Path, cache: Path, fault: str | None = None, resume: bool = False):
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    env.pop("L2E_FAULT", None)
    if fault:
        env["L2E_FAULT"] = fault
    args = [sys.executable, "-m", "meta_train", "--preset", "smoke", "--output", str(out), "--no-progress"]
    for o in OVERRIDES:
        args += ["--set", o]
    if resume:
        args.append("--resume")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def numbers(out: Path) -> list[dict]:
    return [{k: r.get(k) for k in NUMBERS} for r in read_log(out)]


def step_arrays(step_dir: Path) -> dict[str, np.ndarray]:
    """Every array of a checkpoint step (es_state leaves and meta-parameters), for bitwise comparison."""
    import orbax.checkpoint as ocp

    out = {}
    for item in ("es_state", "meta_params"):
        tree = ocp.PyTreeCheckpointer().restore(step_dir.resolve() / item)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            out[f"{item}{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    return out


def assert_same_step(a: Path, b: Path):
    x, y = step_arrays(a), step_arrays(b)
    assert x.keys() == y.keys()
    for k in x:
        assert x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes(), k


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The session's persistent compilation cache (conftest), else one for this module."""
    session = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    return Path(session) if session else tmp_path_factory.mktemp("jax_cache")


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    proc = launch(out, cache)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_sigkill_at_five_points_then_resume_is_bit_identical(tmp_path, cache, reference_run):
    """Kill (SIGKILL) at 5 points — after a log row, mid-checkpoint (es_state staged, the rest not), mid log
    line, inside the inner chains, right after a checkpoint commit — resuming after each; every checkpoint a
    resumed process commits and the final meta-parameters equal the uninterrupted run's bit for bit, and so
    do the logged numbers of every iteration."""
    ref, out = reference_run, tmp_path / "run"
    ckpts = out / "checkpoints"
    killed = 0

    def kill(fault, resume):
        nonlocal killed
        proc = launch(out, cache, fault, resume)
        assert proc.returncode == -signal.SIGKILL, (fault, proc.returncode, proc.stderr[-2000:])
        killed += 1

    # 1. after the log row of iteration 2 (checkpoint 2 committed, iteration 2 lost)
    kill("after_log:2", resume=False)
    assert committed_steps(ckpts) == [2] and [r["iteration"] for r in read_log(out)] == [0, 1, 2]

    # 2. resumed from 2; killed while checkpoint 4 is half-written
    kill("mid_checkpoint:4", resume=True)
    stage = ckpts / ".tmp-4"
    assert (stage / "es_state").is_dir() and not (stage / "meta_params").exists() and not (stage / "meta").exists()
    assert committed_steps(ckpts) == [2] and not (ckpts / "4").exists()
    _, _, meta = l2e.load_meta_params(out)  # the half-written checkpoint is never loaded
    assert meta["iteration"] == 2

    # 3. resumed from 2 (the staging directory is discarded), commits 4; killed while writing row 4
    kill("mid_log:4", resume=True)
    assert not stage.exists() and committed_steps(ckpts) == [2, 4]
    text = (out / "log.jsonl").read_text()
    assert not text.endswith("\n")  # a torn last line ...
    assert [r["iteration"] for r in read_log(out)] == [0, 1, 2, 3]  # ... that the reader drops
    assert_same_step(ckpts / "4", ref / "checkpoints" / "4")

    # 4. resumed from 4 (torn line repaired); killed inside the inner chains of iteration 5
    kill("mid_inner:5", resume=True)
    assert (out / "log.jsonl").read_text().endswith("\n")
    assert [r["iteration"] for r in read_log(out)] == [0, 1, 2, 3, 4]

    # 5. resumed from 4, commits 6; killed right after the commit
    kill("after_checkpoint:6", resume=True)
    assert committed_steps(ckpts) == [2, 4, 6]
    assert_same_step(ckpts / "6", ref / "checkpoints" / "6")

    # finish
    proc = launch(out, cache, None, resume=True)
    assert proc.returncode == 0, proc.stderr
    assert killed == 5
    assert committed_steps(ckpts) == committed_steps(ref / "checkpoints") == [4, 6, 8]
    assert not [p.name for p in ckpts.iterdir() if p.name.startswith(".")]
    assert_same_step(ckpts / "8", ref / "checkpoints" / "8")
    a, _, meta_a = l2e.load_meta_params(out)
    b, _, meta_b = l2e.load_meta_params(ref)
    assert meta_a["iteration"] == meta_b["iteration"] == 8
    assert flat(a).tobytes() == flat(b).tobytes()
    assert numbers(out) == numbers(ref)
    print(f"kill-and-resume: {killed}/5 kills, final meta-parameters bit-identical")


def test_resume_refuses_corrupt_log_and_drops_torn_line(tmp_path):
    rows = [{"iteration": i, "meta_loss": 1.0} for i in range(3)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "log.jsonl").write_text(text + '{"iteration": 3, "meta_')
    assert read_log(tmp_path) == rows
    (tmp_path / "log.jsonl").write_text(text.replace('"meta_loss": 1.0}', '"meta_lo', 1))
    with pytest.raises(RunDirError, match="corrupt at line 1"):
        read_log(tmp_path)


# --------------------------------------------------------------------------- divergence in meta-training


def _check_divergence_run(out: Path, summary: dict, expect_divergent: bool, penalty: float | None = None):
    rows = read_log(out)
    penalty = TINY.es.divergence_penalty if penalty is None else penalty
    assert rows
    for r in rows:
        assert all(math.isfinite(f) and f <= penalty for f in r["fitness"]), r
        if expect_divergent:
            assert r["divergent_members"] > 0, r
    assert np.all(np.isfinite(flat(summary["meta_params"])))
    params, _, _ = l2e.load_meta_params(out)
    assert np.all(np.isfinite(flat(params)))
    return rows


@pytest.mark.slow
def test_nan_gradients_get_the_penalty_and_meta_params_stay_finite(tmp_path, monkeypatch):
    """NaN gradients in every member: every member gets the worst-case fitness (the penalty), the ES
    outer step is skipped (meta_train.estimators.antithetic: no member finite, no update) and the
    meta-parameters stay exactly unchanged."""
    import meta_train.es as es

    real = es.sampler_module

    def nan_module(config):
        entry = real(config)

        def nan_kernel(posterior, sampler):
            bad = l2e.Posterior(lambda p, b: posterior.nll(p, b) * jnp.nan, posterior.log_prior, posterior.data_size)
            return entry.build_kernel(bad, sampler)

        return dataclasses.replace(entry, build_kernel=nan_kernel)

    monkeypatch.setattr(es, "sampler_module", nan_module)  # every run compiles its own programs
    cfg = apply_overrides(TINY, ["num_outer=2"])
    summary = meta_train(cfg, tmp_path / "nan", progress=False)
    rows = _check_divergence_run(tmp_path / "nan", summary, expect_divergent=True)
    from meta_train.train import initial_meta_params

    for a, b in zip(jax.tree.leaves(summary["meta_params"]), jax.tree.leaves(initial_meta_params(cfg))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # no member finite: no update at all
    assert all(r["divergent_members"] == cfg.es.population and r["meta_loss"] is None for r in rows)
    assert all(r["loss_plus"] == [None] and r["fitness"] == [cfg.es.divergence_penalty] * 2 for r in rows)
    text = (tmp_path / "nan" / "log.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text  # the log stays strict JSON


@pytest.mark.slow
def test_one_diverging_member_is_penalised(tmp_path, monkeypatch):
    """One member's chain is NaN (its meta-parameters poisoned inside the inner loop only): it gets the
    penalty, the other member its real loss; the meta-parameters move and stay finite."""
    import meta_train.estimators.antithetic as outer

    real = outer.evaluate_population

    def poisoned(spec, population, *args, **kw):
        population = jax.tree.map(lambda x: x.at[0].set(jnp.nan), population)
        return real(spec, population, *args, **kw)

    monkeypatch.setattr(outer, "evaluate_population", poisoned)
    cfg = apply_overrides(TINY, ["num_outer=2"])
    summary = meta_train(cfg, tmp_path / "one", progress=False)
    rows = _check_divergence_run(tmp_path / "one", summary, expect_divergent=True)
    for r in rows:
        assert r["divergent_members"] == 1 and r["loss_plus"] == [None] and math.isfinite(r["loss_minus"][0])
        assert r["fitness"][0] == cfg.es.divergence_penalty and r["meta_loss"] == r["loss_minus"][0]


@pytest.mark.slow
def test_huge_step_size_gives_finite_worst_case_fitness(tmp_path):
    """Step size ε ×1000 (learning rate lr = ε²N ×10⁶): the chains blow up (BMA NLL 4–5 nats instead of
    ~1.9; the learned update is bounded, so they stay finite).  With the penalty (the worst case) at 3 nats
    every member's fitness is capped at it, the ES gradient is zero and the meta-parameters stay finite."""
    cfg = apply_overrides(TINY, ["num_outer=2", "es.divergence_penalty=3",
                                 f"sampler.learning_rate={TINY.sampler.learning_rate * 1e6:g}"])
    summary = meta_train(cfg, tmp_path / "big", progress=False)
    rows = _check_divergence_run(tmp_path / "big", summary, expect_divergent=False, penalty=3.0)
    raw = [v for r in rows for v in r["loss_plus"] + r["loss_minus"]]
    assert all(v is None or v > 3.0 for v in raw), raw  # it did blow up
    assert all(f == 3.0 for r in rows for f in r["fitness"])


# --------------------------------------------------------------------------- divergence in evaluation


def test_evaluation_report_says_divergent_chains_are_excluded(tmp_path):
    """A method whose chains diverge is counted and excluded from the BMA, and report.md says both."""
    import dataclasses

    from evaluate.config import get_preset
    from evaluate.run import evaluate

    cfg = dataclasses.replace(get_preset("smoke"), tasks=(iris_mlp(8),),
                              held_out=("none",))
    cfg = apply_overrides(cfg, ["tune=false", "methods=sghmc", "settings.sghmc.lrs=1e6"])
    results = evaluate(cfg, tmp_path / "rep", progress=False)
    (task,) = results["tasks"].values()
    m = task["methods"]["sghmc"]
    assert m["divergent_chains"] == 1 and m["num_samples"] < m["num_samples_requested"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Methods with divergent chains: sghmc (1)" in md
    assert "excluded from the BMA" in md
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["tasks"][next(iter(report["tasks"]))]["methods"]["sghmc"]["divergent_chains"] == 1


# --------------------------------------------------------------------------- atomic writes and the directory lock


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path, monkeypatch):
    from base import io
    from base.io import atomic_write_bytes, atomic_write_json

    target = tmp_path / "sub" / "report.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and [p.name for p in target.parent.iterdir()] == ["report.json"]

    def no_space(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "replace", no_space)
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(target, b"newer")
    monkeypatch.undo()
    assert target.read_bytes() == b"new" and [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_directory_lock_is_exclusive_and_released(tmp_path):
    from cli import DirectoryLock, LockHeldError

    with DirectoryLock(tmp_path) as lock:
        assert lock.held
        with pytest.raises(LockHeldError, match="in use"):
            DirectoryLock(tmp_path).acquire()
    DirectoryLock(tmp_path).acquire().release()
    assert list(tmp_path.iterdir()) == []
