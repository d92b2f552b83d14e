"""The zoo (tasks.zoo): its entries, the split rule, the new task kinds it brought (homoscedastic regression, the
generated large-N table, prior-tagged names) and `python -m evaluate reference --suite zoo`."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import build
from tasks.reference.files import task_name
from tasks.task_strings import TaskStringError, resolve_task
from tasks.zoo import (DATA_SIZES, FORCED_TRAIN, LARGE_N, ZOO, by_name, families, held_out_names, split, stratum,
                       train_names)

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get("L2E_DATA_DIR")


def test_entries_are_unique_and_sized():
    names = [e.name for e in ZOO]
    assert len(names) == len(set(names)) == len(ZOO) >= 32
    assert len({e.key for e in ZOO}) == len(ZOO)
    assert set(DATA_SIZES) == set(names)
    assert sum(e.model == "cnn" for e in ZOO) >= 6
    assert {e.likelihood for e in ZOO} == {"binary", "multiclass", "heteroscedastic", "homoscedastic"}
    assert {e.model for e in ZOO} == {"linear", "mlp", "cnn"}
    assert min(DATA_SIZES.values()) <= 120 and max(DATA_SIZES.values()) >= 10_000


def test_data_sizes_match_the_built_tasks():
    """DATA_SIZES (what the split reads without data) is each built task's training size (registered sets here;
    the UCI and MNIST ones where the data folder is set)."""
    checked = 0
    for e in ZOO:
        if (e.task.startswith("uci:") or e.task.startswith("mnist")) and not DATA:
            continue
        if e.task.startswith("mnist"):
            continue  # 10,000 MNIST images: the reference files record it (test_committed_references_match)
        assert build(e.spec).data_size == DATA_SIZES[e.name], e.name
        checked += 1
    assert checked >= 20


def test_split_follows_the_written_rule():
    halves = split()
    assert set(halves) == {e.name for e in ZOO}
    assert all(halves[n] == "train" for n in FORCED_TRAIN)
    strata = {}
    for e in ZOO:
        if e.name not in FORCED_TRAIN:
            strata.setdefault(stratum(e, DATA_SIZES[e.name]), []).append(e.name)
    for names in strata.values():
        ordered = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
        assert [halves[n] for n in ordered] == ["held_out" if i % 2 == 0 else "train" for i in range(len(ordered))]
    held = held_out_names()
    assert len(held) >= 16 and set(held).isdisjoint(train_names())
    assert sum(by_name()[n].model == "cnn" for n in held) >= 3
    assert sum(DATA_SIZES[n] >= LARGE_N and by_name()[n].model != "cnn" for n in held) >= 3
    assert split() == halves  # deterministic


def test_families_tag_model_likelihood_and_size():
    e = by_name()["uci:kin8nm[mile-s1]/mlp-linear-homo"]
    assert families(e, DATA_SIZES[e.name]) == ("linear", "regression", "homoscedastic", "large-n")
    e = by_name()["digits/cnn-c2-d1-n300"]
    assert families(e, DATA_SIZES[e.name]) == ("cnn", "classification", "multiclass")
    assert by_name()["breast_cancer/mlp-linear"].likelihood == "binary"


def test_prior_tagged_names_keep_two_priors_apart():
    assert task_name(resolve_task("digits/mlp-16").spec) == "digits/mlp-16"
    assert task_name(resolve_task("digits/mlp-16:prior=0.05").spec) == "digits/mlp-16-p0.05"
    assert task_name(resolve_task("digits/mlp-16:prior=0.2").spec) == "digits/mlp-16"  # the default: no tag
    assert task_name(resolve_task("uci:yacht/mlp-linear:prior=0.1").spec) == "uci:yacht[mile-s1]/mlp-linear-p0.1"


def test_homoscedastic_regression_has_one_noise_scale():
    from tasks.models import RegressionMLP

    x = jax.random.normal(jax.random.PRNGKey(0), (7, 3))
    model = RegressionMLP((4,), "tanh", homoscedastic=True)
    params = model.init(jax.random.PRNGKey(1), x)["params"]
    assert params["head"]["kernel"].shape == (4, 1) and params["log_noise"].shape == (1,)
    params = {**params, "log_noise": jnp.array([np.log(0.3)], jnp.float32)}
    loc, scale = model.apply({"params": params}, x)
    assert loc.shape == scale.shape == (7,)
    np.testing.assert_allclose(np.asarray(scale), 0.3, rtol=1e-6)
    hetero = RegressionMLP((4,), "tanh").init(jax.random.PRNGKey(1), x)["params"]
    assert hetero["head"]["kernel"].shape == (4, 2) and "log_noise" not in hetero


def test_noise_option_parses_names_and_refuses_classification():
    spec = resolve_task("synthetic_1d/mlp-8:noise=homo").spec
    assert spec.noise == "homo" and spec.name == "synthetic_1d/mlp-8-homo"
    assert resolve_task("synthetic_1d/mlp-8").spec.noise == "hetero"
    with pytest.raises(TaskStringError, match="noise= applies to regression"):
        resolve_task("digits/mlp-8:noise=homo")
    with pytest.raises(TaskStringError, match="hetero | homo"):
        resolve_task("synthetic_1d/mlp-8:noise=fixed")


def test_homoscedastic_task_builds_and_its_density_is_finite():
    task = build(resolve_task("synthetic_1d/mlp-8:noise=homo").spec)
    params = task.init_params(jax.random.PRNGKey(0))
    assert "log_noise" in params and np.isfinite(float(task.log_density(params)))
    loc_scale = task.predict(jax.tree_util.tree_map(lambda p: p[None], params), task.splits.test[0])
    assert np.ptp(np.asarray(loc_scale)[0, :, 1]) == 0.0  # one scale for every test point


def test_stored_specs_without_noise_read_as_heteroscedastic():
    from tasks.reference.specs import comparable_specs

    spec = resolve_task("synthetic_1d/mlp-8").spec
    stored = {k: v for k, v in json.loads(json.dumps(spec.__dict__)).items() if k != "noise"}
    a, b, _ = comparable_specs(stored, spec)
    assert a == b


def test_synthetic_tabular_is_large_deterministic_and_learnable():
    from tasks.data.tabular import synthetic_tabular

    a, b = synthetic_tabular(), synthetic_tabular()
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert a.x_train.shape == (12500, 10) and a.x_test.shape == (2500, 10) and a.num_classes == 3
    assert np.bincount(a.y_train).min() > 2000  # every class well represented
    # a least-squares linear read-out beats the majority class by a margin: the labels carry signal
    onehot = np.eye(3)[a.y_train]
    w, *_ = np.linalg.lstsq(np.c_[a.x_train, np.ones(len(a.x_train))], onehot, rcond=None)
    acc = np.mean((np.c_[a.x_test, np.ones(len(a.x_test))] @ w).argmax(1) == a.y_test)
    assert acc > np.bincount(a.y_test).max() / len(a.y_test) + 0.15


def _cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "evaluate", "reference", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_suite_bad_input_is_one_error_line(tmp_path):
    for args, needle in ((("--suite", "zoo", "--output", str(tmp_path / "r"), "--warmup", "5"), "--warmup"),
                         (("--suite", "zoo", "--output", str(tmp_path / "r"), "--task", "nope/mlp-1"), "unknown zoo"),
                         (("--output", str(tmp_path / "r"), "--jobs", "2"), "--suite only"),
                         (("--suite", "zoo", "--output", str(tmp_path / "r"), "--jobs", "0"), "--jobs")):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
    assert not (tmp_path / "r").exists()  # nothing written
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    r = _cli("--suite", "zoo", "--output", str(foreign))
    assert r.returncode == 2 and r.stderr.startswith("error:")
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_suite_lists_the_zoo(tmp_path):
    r = _cli("--suite", "zoo", "--output", str(tmp_path / "r"), "--list")
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.strip().splitlines()]
    assert len(rows) == len(ZOO) and all(row[3] == "missing" for row in rows)
    assert {row[0]: row[2] for row in rows} == split()


@pytest.mark.slow
def test_suite_computes_and_resumes(tmp_path):
    """One small entry computed with its own settings and key, then a second call skips it (resumed)."""
    out = tmp_path / "r"
    name = "iris/mlp-linear"
    r = _cli("--suite", "zoo", "--output", str(out), "--task", name)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "iris_mlp-linear" / "metadata.json").read_text())
    entry = by_name()[name]
    assert meta["key"].startswith(f"fold_in(PRNGKey(0), {entry.key})")
    assert meta["sampler"]["warmup"] == entry.warmup and meta["sampler"]["samples_per_chain"] == entry.samples
    assert meta["zoo"]["entry"]["task"] == entry.task and meta["converged"]
    again = _cli("--suite", "zoo", "--output", str(out), "--task", name)
    assert again.returncode == 0 and "1 of 1 selected entries already" in again.stdout
    assert json.loads((out / "iris_mlp-linear" / "metadata.json").read_text())["created"] == meta["created"]
