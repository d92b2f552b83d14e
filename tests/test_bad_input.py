"""Bad input to `python -m meta_train` and `python -m evaluate`: one line `error: …` naming the problem, exit
status 2, no traceback, and nothing written or overwritten (every case runs against an output directory
whose files are hashed before and after; a fresh output path must still not exist afterwards).

Also: the reference-probability loader (evaluate.reference) on good, bad and the real HMC CIFAR-10 file, and
agreement / total variation against a reference in the report.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import l2e
from cli import write_marker
from evaluate.reference import ReferenceDataError, check_alignment, load_reference_probs
from meta_train import PRESETS

from conftest import DATA_DIR, ROOT, iris_mlp, run_cli

HMC_CIFAR10 = DATA_DIR / "hmc_reference" / "cifar10" / "probs.csv"
MNIST = ["--set", "tasks.datasets=mnist"]


# --------------------------------------------------------------------------- helpers


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    a = np.ascontiguousarray(array, dtype=np.uint8)
    raw = bytes([0, 0, 8, a.ndim]) + np.asarray(a.shape, ">u4").tobytes() + a.tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def mnist_dir(root: Path, n_train: int = 30, n_test: int = 10) -> Path:
    """A tiny, valid MNIST-format directory (random 28x28 images)."""
    d = root / "mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(d / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(d / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n), gz=True)
    return d


def previous_run(root: Path, seed: int = 7, name: str = "run") -> Path:
    """A directory holding an earlier meta-training run (config, log, a checkpoint) that must survive."""
    out = root / name
    (out / "checkpoints" / "2" / "meta").mkdir(parents=True)
    cfg = dataclasses.replace(PRESETS["smoke"], seed=seed).to_dict()
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (out / "log.jsonl").write_text("".join(json.dumps({"iteration": i, "meta_loss": 1.0 + i}) + "\n"
                                           for i in range(2)))
    (out / "checkpoints" / "2" / "meta" / "metadata").write_text(json.dumps({"iteration": 2}))
    for item in ("es_state", "meta_params"):
        (out / "checkpoints" / "2" / item).mkdir()
        (out / "checkpoints" / "2" / item / "_METADATA").write_text("{broken")
    return out


def previous_report(root: Path) -> Path:
    out = root / "eval"
    out.mkdir()
    (out / "report.json").write_text('{"tasks": {}}\n')
    (out / "report.md").write_text("# an earlier report\n")
    write_marker(out, "report")  # a report of ours (cli.outputs)
    return out


def snapshot(path: Path):
    """{relative path: sha256} of every file under `path` (directories as None); None if it does not exist."""
    if not path.exists():
        return None
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in sorted(path.rglob("*"))}


def unwritable_dir(root: Path) -> Path:
    """A directory path under which nothing can be created: chmod 0o500 for ordinary users; as root (who
    ignores permission bits) a path under /sys, where creating entries fails with EPERM."""
    d = root / "readonly"
    d.mkdir()
    d.chmod(0o500)
    try:
        (d / "probe").touch()
    except OSError:
        return d
    (d / "probe").unlink()
    d.chmod(0o700)
    candidate = Path("/sys") / f"l2e-test-{os.getpid()}"
    try:
        candidate.mkdir()
    except OSError:
        return candidate
    candidate.rmdir()
    pytest.skip("cannot make an unwritable directory here (root without a read-only /sys)")


def shipped_step_copy(root: Path, name: str) -> Path:
    step = root / name / "checkpoints" / "5"
    shutil.copytree(l2e.checkpoint.resolve_step_dir(l2e.checkpoint.shipped_checkpoint("paper-form")), step)
    return step.parents[1]


def corrupt_checkpoint(root: Path) -> Path:
    run = shipped_step_copy(root, "corrupt")
    for f in (run / "checkpoints" / "5" / "meta_params").rglob("*"):
        if f.is_file() and f.name != "_METADATA":
            f.write_bytes(b"\0" * 7)
    return run


def other_shape_checkpoint(root: Path) -> Path:
    import orbax.checkpoint as ocp

    run = shipped_step_copy(root, "wide")
    target = (run / "checkpoints" / "5" / "meta_params").resolve()
    shutil.rmtree(target)
    wide = l2e.meta_model.MetaMLP().init(jax.random.PRNGKey(0), np.zeros((1, 7)))["params"]  # 7 input features, not 9
    ocp.Checkpointer(ocp.StandardCheckpointHandler()).save(target, jax.tree.map(np.asarray, wide))
    return run


def smoke_test_shape() -> tuple[int, int, np.ndarray]:
    from evaluate.config import get_preset
    from tasks import build_task

    task = build_task(get_preset("smoke").tasks[0])
    y = np.asarray(task.splits.test[1])
    return int(y.shape[0]), task.num_classes, y


def reference_file(root: Path, kind: str) -> Path:
    n, c, y = smoke_test_shape()
    probs = np.full((n, c), 0.1 / (c - 1))
    probs[np.arange(n), y] = 0.9
    if kind == "rows":
        probs = probs[:-3]
    elif kind == "classes":
        probs = np.concatenate([probs, np.zeros((n, 1))], axis=1)
    elif kind == "sum":
        probs[7] *= 0.8
    path = root / f"ref_{kind}.txt"
    np.savetxt(path, probs, fmt="%.18e")
    return path


# --------------------------------------------------------------------------- the CLI cases
# each: (tool, setup(tmp) -> (extra args, output path), expected words in the one-line error)

def _mt(*args):
    return ["--preset", "smoke", "--no-progress", *args]


CASES = {
    "mt-unknown-dataset": ("meta_train", lambda t: (_mt("--set", "tasks.datasets=imagenet"), previous_run(t)),
                           "unknown dataset 'imagenet'"),
    "mt-unknown-preset": ("meta_train", lambda t: (["--preset", "huge"], previous_run(t)), "unknown preset 'huge'"),
    "mt-missing-data-dir": ("meta_train", lambda t: (_mt("--set", f"tasks.data_dir={t / 'nowhere'}", *MNIST),
                                                     t / "fresh"), "tasks.data_dir does not exist"),
    "mt-truncated-idx": ("meta_train", lambda t: (_truncated(t), t / "fresh"), "truncated IDX file"),
    "mt-wrong-image-shape": ("meta_train", lambda t: (_flat_images(t), previous_run(t)),
                             "images must be (n, H, W)"),
    "mt-zero-step-size": ("meta_train", lambda t: (_mt("--set", "sampler.learning_rate=0"), previous_run(t)),
                          "learning_rate must be a positive"),
    "ev-negative-step-size": ("evaluate", lambda t: (["--preset", "smoke", "--overwrite", "--set",
                                                      "settings.l2e.lrs=0.5,-0.1"], previous_report(t)),
                              "settings.l2e.lrs must hold positive"),
    "mt-odd-population": ("meta_train", lambda t: (_mt("--set", "es.population=3"), previous_run(t)),
                          "es.population must be a positive even number"),
    "mt-unknown-config-key": ("meta_train", lambda t: (_mt("--set", "es.sigmaa=0.1"), previous_run(t)),
                              "unknown config key: es.sigmaa"),
    "mt-output-holds-another-run": ("meta_train", lambda t: (_mt(), previous_run(t)),
                                    "already holds a meta-training run; pass --resume"),
    "mt-resume-another-config": ("meta_train", lambda t: (_mt("--resume"), previous_run(t)),
                                 "config differs in seed"),
    "mt-resume-corrupt-checkpoint": ("meta_train", lambda t: (_mt("--resume"), previous_run(t, seed=0)),
                                     "cannot restore checkpoint"),
    "mt-unwritable-output": ("meta_train", lambda t: (_mt(), unwritable_dir(t) / "run"), "cannot write to"),
    "ev-checkpoint-missing": ("evaluate", lambda t: (["--preset", "smoke", "--overwrite", "--sampler",
                                                      str(t / "no_ckpt")], previous_report(t)),
                              "checkpoint not found"),
    "ev-checkpoint-corrupt": ("evaluate", lambda t: (["--preset", "smoke", "--sampler",
                                                      str(corrupt_checkpoint(t))], t / "fresh"), "corrupt checkpoint"),
    "ev-checkpoint-other-shape": ("evaluate", lambda t: (["--preset", "smoke", "--sampler",
                                                          str(other_shape_checkpoint(t))], t / "fresh"),
                                  "meta-model of another shape"),
    "ev-reference-rows": ("evaluate", lambda t: (["--preset", "smoke", "--reference",
                                                  str(reference_file(t, "rows"))], t / "fresh"), "rows, expected"),
    "ev-reference-classes": ("evaluate", lambda t: (["--preset", "smoke", "--reference",
                                                     str(reference_file(t, "classes"))], t / "fresh"),
                             "classes (columns), expected"),
    "ev-reference-row-sums": ("evaluate", lambda t: (["--preset", "smoke", "--reference",
                                                      str(reference_file(t, "sum"))], t / "fresh"),
                              "rows do not sum to 1"),
    "ev-output-holds-a-run": ("evaluate", lambda t: (["--preset", "smoke"], previous_run(t)),
                              "holds a meta-training run"),
    "ev-output-under-a-file": ("evaluate", lambda t: (["--preset", "smoke"], _a_file(t) / "eval"),
                               "is not a directory"),
}


def _truncated(t: Path) -> list[str]:
    d = mnist_dir(t)
    f = d / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    return _mt("--set", f"tasks.data_dir={d}", *MNIST)


def _flat_images(t: Path) -> list[str]:
    d = mnist_dir(t)
    write_idx(d / "train-images-idx3-ubyte", np.zeros((30, 784)))  # (n, 784): not images
    return _mt("--set", f"tasks.data_dir={d}", *MNIST)


def _a_file(t: Path) -> Path:
    f = t / "a_file.txt"
    f.write_text("not a directory\n")
    return f


# a corrupt orbax checkpoint is read by orbax's background threads, which print after the error line unless the CLI
# leaves through os._exit (base.io.exit_cli): those cases run as a real process; the others in this one
# (conftest.run_cli: the same main(argv), stdout / stderr captured)
REAL_PROCESS = {"mt-resume-corrupt-checkpoint", "ev-checkpoint-corrupt"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "mt-resume-corrupt-checkpoint" else c
                                  for c in sorted(CASES)])
def test_cli_bad_input(case, tmp_path):
    tool, setup, expected = CASES[case]
    args, out = setup(tmp_path)
    before = snapshot(out)
    watched = snapshot(tmp_path)
    if case in REAL_PROCESS:
        proc = subprocess.run([sys.executable, "-m", tool, *args, "--output", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=180)
    else:
        proc = run_cli(tool, *args, "--output", out, cwd=ROOT)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert expected in lines[0], lines[0]
    assert snapshot(out) == before  # nothing written, nothing overwritten
    assert snapshot(tmp_path) == watched
    print(f"{case}: {lines[0]}")


def test_cases_cover_both_clis_and_name_distinct_problems():
    """The table exercises both CLIs, and no two cases expect the same error text (each names its own problem)."""
    tools = [tool for tool, _, _ in CASES.values()]
    expected = [text for _, _, text in CASES.values()]
    assert {"meta_train", "evaluate"} <= set(tools)
    assert all(text.strip() for text in expected) and len(set(expected)) == len(expected)


# --------------------------------------------------------------------------- the reference loader


def test_reference_loader_accepts_whitespace_and_comma_and_checks(tmp_path):
    p = np.array([[0.2, 0.8], [0.5, 0.5], [1.0, 0.0]])
    np.savetxt(tmp_path / "ws.txt", p, fmt="%.18e")
    np.savetxt(tmp_path / "comma.csv", p, fmt="%.6f", delimiter=",")
    for name in ("ws.txt", "comma.csv"):
        np.testing.assert_allclose(load_reference_probs(tmp_path / name, 3, 2), p)
    bad = {"neg": [[1.2, -0.2], [0.5, 0.5], [1.0, 0.0]], "nan": [[np.nan, 1.0], [0.5, 0.5], [1.0, 0.0]]}
    for name, rows in bad.items():
        np.savetxt(tmp_path / name, np.array(rows))
    with pytest.raises(ReferenceDataError, match=r"outside \[0, 1\] \(first in row 1\)"):
        load_reference_probs(tmp_path / "neg", 3, 2)
    with pytest.raises(ReferenceDataError, match="non-finite value in row 1"):
        load_reference_probs(tmp_path / "nan", 3, 2)
    (tmp_path / "text").write_text("a b\nc d\n")
    with pytest.raises(ReferenceDataError, match="not a numeric table"):
        load_reference_probs(tmp_path / "text")
    with pytest.raises(ReferenceDataError, match="file not found"):
        load_reference_probs(tmp_path / "missing.csv")
    with pytest.raises(ReferenceDataError, match="3 rows, expected 4"):
        load_reference_probs(tmp_path / "ws.txt", 4, 2)
    with pytest.raises(ReferenceDataError, match="2 classes"):
        load_reference_probs(tmp_path / "ws.txt", 3, 10)
    q = np.array([[0.2, 0.8], [0.6, 0.4], [0.9, 0.1], [0.3, 0.7]])
    assert check_alignment(q, np.array([1, 0, 0, 1])) == 1.0  # beats the majority class (0.5)
    with pytest.raises(ReferenceDataError, match="not in the test-set order"):
        check_alignment(q, np.array([0, 1, 1, 0]))  # accuracy 0, majority 0.5


def test_reference_loader_on_the_hmc_cifar10_file():
    if not HMC_CIFAR10.is_file():
        pytest.skip(f"HMC reference file not present: {HMC_CIFAR10} (see shared/spec/REFERENCE_DATA.md)")
    p = load_reference_probs(HMC_CIFAR10, 10000, 10)
    assert p.shape == (10000, 10) and np.all(np.abs(p.sum(1) - 1) < 1e-5)
    # fingerprints from REFERENCE_DATA.md
    assert list(p[:10].argmax(1)) == [7, 0, 6, 9, 5, 1, 7, 0, 3, 2]
    assert list(np.bincount(p.argmax(1), minlength=10)) == [1035, 993, 990, 964, 1008, 1001, 1019, 990, 1001, 999]
    assert abs(p.max(1).mean() - 0.862) < 5e-4
    with pytest.raises(ReferenceDataError, match="10000 rows, expected 9984"):
        load_reference_probs(HMC_CIFAR10, 9984, 10)


@pytest.mark.slow
def test_agreement_and_total_variation_in_the_report(tmp_path):
    """A reference equal to a smoothed one-hot of the true labels: each method's agreement is its accuracy."""
    from evaluate.config import get_preset
    from evaluate.run import evaluate
    from tasks import build_task

    spec = iris_mlp(8)
    y = np.asarray(build_task(spec).splits.test[1])
    n, c = y.shape[0], build_task(spec).num_classes
    probs = np.full((n, c), 0.05 / (c - 1))
    probs[np.arange(n), y] = 0.95
    np.savetxt(tmp_path / "ref.txt", probs)
    cfg = dataclasses.replace(get_preset("smoke"), tasks=(spec,), held_out=("none",), methods=("sghmc",),
                              tune=False)
    results = evaluate(cfg, tmp_path / "rep", progress=False, references={None: tmp_path / "ref.txt"})
    (task,) = results["tasks"].values()
    m = task["methods"]["sghmc"]
    assert m["agreement"] == pytest.approx(m["acc"]) and 0.0 < m["total_variation"] < 1.0
    assert task["reference"]["accuracy"] == 1.0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert "total_variation" in report["tasks"][next(iter(report["tasks"]))]["methods"]["sghmc"]
