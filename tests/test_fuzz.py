"""Fuzz-style bad input and faults (issue 19) across `python -m meta_train`, `python -m evaluate`, `python -m
evaluate reference` and the library API.

Every case asserts: the exit code (library: the exception), exactly one stderr line starting `error:` that names
the problem (and the file, where a file is the problem), and the sha256 of every file under the case's directory
(the output and its neighbours) unchanged. The CLIs run in-process (`main(argv)`, stderr captured) except where a
real second process is the point: SIGTERM / SIGINT mid-run, two concurrent runs, orbax's own output on a
truncated file, a full disk (a small tmpfs; skipped with a message where it cannot be mounted).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli import write_marker
from conftest import ROOT, run_cli

BIG = str(2**64)
SMOKE_EVAL = ["--preset", "smoke", "--set", "methods=sghmc", "--set", "tune=false", "--quiet"]


# --------------------------------------------------------------------------- helpers


def snapshot(path: Path):
    """{relative path: sha256 | "dir" | "link -> target"} of everything under `path`; None if it does not exist."""
    if not path.exists() and not path.is_symlink():
        return None
    out = {}
    for p in sorted([path, *path.rglob("*")]):
        rel = str(p.relative_to(path))
        if p.is_symlink():
            out[rel] = f"link -> {os.readlink(p)}"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def call(tool: str, argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of `python -m <tool> argv` run in this process (conftest.run_cli)."""
    if tool == "mt":
        proc = run_cli("meta_train", *argv)
    else:
        proc = run_cli("evaluate", *(["reference"] if tool == "ref" else []), *argv)
    return proc.returncode, proc.stderr


def assert_one_error(rc, stderr: str, expected: str, code: int = 2) -> str:
    lines = stderr.splitlines()
    assert rc == code, (rc, stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert expected in lines[0], lines[0]
    return lines[0]


def cli(tool: str, *argv: str, env: dict | None = None, **kw) -> subprocess.Popen:
    module = "meta_train" if tool == "mt" else "evaluate"
    pre = ["reference"] if tool == "ref" else []
    return subprocess.Popen([sys.executable, "-m", module, *pre, *argv], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def wait_for(cond, timeout: float = 240.0, what: str = "condition") -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def settled(path: Path) -> dict:
    """A snapshot of `path` that stayed the same for one second (the writer is paused)."""
    prev = snapshot(path)
    while True:
        time.sleep(1.0)
        now = snapshot(path)
        if now == prev:
            return now
        prev = now


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m", readonly: bool = False):
    """A small tmpfs at `path` (skip with a message where mounting is not permitted)."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}): full-disk / read-only "
                    "case not run")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path) -> None:
    """Write a filler file until the filesystem is full."""
    with open(disk / ".filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


# --------------------------------------------------------------------------- shared inputs


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished smoke meta-training run (checkpoints 2 and 4) and an earlier evaluation report."""
    from meta_train import PRESETS
    from meta_train.train import meta_train

    root = tmp_path_factory.mktemp("fuzz_base")
    meta_train(PRESETS["smoke"], root / "run", progress=False)
    report = root / "report"
    report.mkdir()
    (report / "report.json").write_text('{"tasks": {}}\n')
    (report / "report.md").write_text("# an earlier report\n")
    (report / "bma_curves.png").write_bytes(b"not really a png")
    write_marker(report, "report")  # an earlier report of ours (cli.outputs)
    return root


def _run(base: Path, t: Path) -> Path:
    shutil.copytree(base / "run", t / "run")
    return t / "run"


def _report(base: Path, t: Path) -> Path:
    shutil.copytree(base / "report", t / "report")
    return t / "report"


def _meta(run: Path, edit) -> Path:
    f = run / "checkpoints" / "4" / "meta" / "metadata"
    meta = json.loads(f.read_text())
    f.write_text(json.dumps(edit(meta)))
    return run


def _mnist(t: Path, label: int) -> Path:
    import gzip

    d = t / "mnist"
    d.mkdir()
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 30), ("t10k", 10)):
        for kind, a in (("images-idx3", rng.integers(0, 256, (n, 28, 28))), ("labels-idx1", rng.integers(0, 10, n))):
            a = np.asarray(a, np.uint8)
            if kind.startswith("labels"):
                a[0] = label
            raw = bytes([0, 0, 8, a.ndim]) + np.asarray(a.shape, ">u4").tobytes() + a.tobytes()
            (d / f"{prefix}-{kind}-ubyte").write_bytes(gzip.compress(raw))
    return d


def _ref_file(t: Path, text: str) -> Path:
    (t / "ref.txt").write_text(text)
    return t / "ref.txt"


def _other(t: Path, text: str = "mine") -> Path:
    (t / "out").mkdir()
    (t / "out" / "notes.txt").write_text(text)
    return t / "out"


def _dangling(t: Path) -> Path:
    os.symlink(t / "nowhere" / "deeper", t / "out")
    return t / "out"


def _mt_out(t: Path) -> list[str]:
    return ["--preset", "smoke", "--no-progress", "--output", str(t / "out")]


def _ev_out(t: Path) -> list[str]:
    return [*SMOKE_EVAL, "--output", str(t / "out")]


def _ref_out(t: Path) -> list[str]:
    return ["--preset", "smoke", "--quiet", "--output", str(t / "out")]


def _put(run: Path, rel: str, text: str) -> Path:
    (run / rel).write_text(text)
    return run


def _drop(run: Path, rel: str) -> Path:
    shutil.rmtree(run / rel)
    return run


def _resume(run: Path, *extra: str) -> list[str]:
    return ["--preset", "smoke", "--resume", "--no-progress", *extra, "--output", str(run)]


def _overwrite(out: Path, *extra: str) -> list[str]:
    return ["--preset", "smoke", "--overwrite", "--no-progress", *extra, "--output", str(out)]


MT = {  # case -> (setup(tmp, base) -> argv, expected text of the error line)
    "unknown_preset": (lambda t, b: ["--preset", "nope", "--output", str(t / "o")], "unknown preset"),
    "unknown_key": (lambda t, b: _mt_out(t) + ["--set", "es.bogus=1"], "unknown config key: es.bogus"),
    "not_key_value": (lambda t, b: _mt_out(t) + ["--set", "es.lr"], "key=value"),
    "group_as_value": (lambda t, b: _mt_out(t) + ["--set", "es=1"], "is a group"),
    "es_lr_inf": (lambda t, b: _mt_out(t) + ["--set", "es.lr=inf"], "es.lr"),
    "es_lr_nan": (lambda t, b: _mt_out(t) + ["--set", "es.lr=nan"], "es.lr"),
    "es_sigma_inf": (lambda t, b: _mt_out(t) + ["--set", "es.sigma=inf"], "es.sigma"),
    "es_penalty_inf": (lambda t, b: _mt_out(t) + ["--set", "es.divergence_penalty=inf"], "es.divergence_penalty"),
    "es_clip_negative": (lambda t, b: _mt_out(t) + ["--set", "es.clip_norm=-1"], "es.clip_norm"),
    "es_population_odd": (lambda t, b: _mt_out(t) + ["--set", "es.population=3"], "es.population"),
    "alpha_scale_nan": (lambda t, b: _mt_out(t) + ["--set", "sampler.alpha_scale=nan"], "sampler.alpha_scale"),
    "beta_scale_inf": (lambda t, b: _mt_out(t) + ["--set", "sampler.beta_scale=-inf"], "sampler.beta_scale"),
    "lr_nan": (lambda t, b: _mt_out(t) + ["--set", "sampler.learning_rate=nan"], "sampler.learning_rate"),
    "friction_zero": (lambda t, b: _mt_out(t) + ["--set", "sampler.friction=0"], "friction"),
    "seed_2_64": (lambda t, b: _mt_out(t) + ["--seed", BIG], "seed must be an integer in [0, 2**32)"),
    "seed_negative": (lambda t, b: _mt_out(t) + ["--seed", "-1"], "seed must be an integer in [0, 2**32)"),
    "seed_aliasing": (lambda t, b: _mt_out(t) + ["--set", f"seed={2**32}"], "seed must be an integer"),
    "seed_text": (lambda t, b: _mt_out(t) + ["--seed", "abc"], "invalid int value"),
    "hidden_zero": (lambda t, b: _mt_out(t) + ["--set", "hidden=0,32"], "hidden must be positive"),
    "num_outer_zero": (lambda t, b: _mt_out(t) + ["--num-outer", "0"], "num_outer"),
    "burn_in_too_long": (lambda t, b: _mt_out(t) + ["--set", "objective.burn_in=39"], "objective.burn_in"),
    "unknown_dataset": (lambda t, b: _mt_out(t) + ["--set", "tasks.datasets=nope"], "nope"),
    "missing_data_dir": (lambda t, b: _mt_out(t) + ["--set", f"tasks.data_dir={t / 'none'}"], "tasks.data_dir"),
    "label_out_of_range": (lambda t, b: _mt_out(t) + ["--set", "tasks.datasets=mnist", "--set",
                                                       f"tasks.data_dir={_mnist(t, 12)}"], "labels span [0, 12]"),
    "resume_and_overwrite": (lambda t, b: _mt_out(t) + ["--resume", "--overwrite"], "exclude each other"),
    "existing_run": (lambda t, b: ["--preset", "smoke", "--output", str(_run(b, t))], "already holds"),
    "overwrite_bad_seed": (lambda t, b: _overwrite(_run(b, t), "--seed", BIG), "seed must be an integer"),
    "overwrite_bad_hidden": (lambda t, b: _overwrite(_run(b, t), "--set", "hidden=0,32"), "hidden must be positive"),
    "overwrite_bad_data": (lambda t, b: _overwrite(_run(b, t), "--set", f"tasks.data_dir={t / 'x'}"),
                           "tasks.data_dir"),
    "overwrite_foreign_dir": (lambda t, b: _overwrite(_other(t)), "holds no meta-training run"),
    "overwrite_foreign_config": (lambda t, b: _overwrite(_put(_other(t), "config.json", "[1, 2]")),
                                 "not the config of a meta-training run"),
    "overwrite_run_with_foreign_file": (lambda t, b: _overwrite(_put(_run(b, t), "thesis.tex", "x")), "thesis.tex"),
    "resume_config_list": (lambda t, b: _resume(_put(_run(b, t), "config.json", "[]")), "config.json"),
    "resume_config_garbage": (lambda t, b: _resume(_put(_run(b, t), "config.json", "{seed")),
                              "config.json is corrupt"),
    "resume_other_config": (lambda t, b: _resume(_run(b, t), "--seed", "3"), "config differs in seed"),
    "resume_log_row_list": (lambda t, b: _resume(_put(_run(b, t), "log.jsonl", "[1]\n{}\n")),
                            "log.jsonl is corrupt at line 1"),
    "resume_log_iteration_text": (lambda t, b: _resume(_put(_run(b, t), "log.jsonl",
                                                             '{"iteration": "0", "meta_loss": 1}\n')),
                                  "log.jsonl is corrupt at line 1"),
    "resume_step_without_meta": (lambda t, b: _resume(_drop(_run(b, t), "checkpoints/4/meta")),
                                 "is incomplete (no meta)"),
    "output_is_file": (lambda t, b: ["--preset", "smoke", "--output", str(_put(t, "out", "x") / "out")],
                       "not a directory"),
    "output_dangling_link": (lambda t, b: ["--preset", "smoke", "--output", str(_dangling(t))],
                             "dangling symbolic link"),
}


def _smoke(*extra: str) -> list[str]:
    """SMOKE_EVAL then `extra`, SMOKE_EVAL's methods=sghmc left out when `extra` sets the methods (a --set key is given
    once: cli.apply_overrides refuses it twice)."""
    if any(str(a).startswith("methods=") for a in extra):
        i = SMOKE_EVAL.index("methods=sghmc")
        return [*SMOKE_EVAL[:i - 1], *SMOKE_EVAL[i + 1:], *extra]
    return [*SMOKE_EVAL, *extra]


def _ev(t: Path, b: Path, *extra: str, out: Path | None = None) -> list[str]:
    return [*_smoke(*extra), "--output", str(out or t / "out")]


def _sampler(t: Path, b: Path, edit=None) -> list[str]:
    run = _run(b, t)
    return ["--sampler", str(_meta(run, edit) if edit else run)]


def _other_shape_checkpoint(t: Path) -> list[str]:
    from l2e.checkpoint import save_checkpoint
    from l2e.meta_model import init_meta_params
    import jax

    phi = init_meta_params(jax.random.PRNGKey(0), (8,))
    phi = {k: {"kernel": np.asarray(v["kernel"])[:7] if k == "Dense_0" else v["kernel"], "bias": v["bias"]}
           for k, v in phi.items()}
    save_checkpoint(t / "ck", 1, {"m": np.zeros(3)}, phi, {"iteration": 1, "sampler": {}})
    return ["--sampler", str(t / "ck")]


EV = {
    "unknown_preset": (lambda t, b: ["--preset", "nope", "--output", str(t / "o")], "unknown preset"),
    "unknown_key": (lambda t, b: _ev(t, b, "--set", "bogus=1"), "unknown config key: bogus"),
    "seed_2_64": (lambda t, b: _ev(t, b, "--seed", BIG), "seed must be an integer"),
    "seeds_negative": (lambda t, b: _ev(t, b, "--seeds", "0,-1"), "seeds must be an integer"),
    "grid_inf": (lambda t, b: _ev(t, b, "--set", "settings.sghmc.lrs=0.1,inf"), "settings.sghmc.lrs"),
    "num_steps_zero": (lambda t, b: _ev(t, b, "--set", "num_steps=0"), "num_steps"),
    "budget_seconds_inf": (lambda t, b: _ev(t, b, "--budget-seconds", "inf"), "budget_seconds"),
    "missing_checkpoint": (lambda t, b: _ev(t, b, "--sampler", str(t / "missing"), "--set", "methods=l2e"),
                           "checkpoint not found"),
    "step_without_meta": (lambda t, b: _ev(t, b, "--set", "methods=l2e", "--sampler", str(
        _drop(_run(b, t), "checkpoints/4/meta"))), "is incomplete (no meta)"),
    "meta_sampler_list": (lambda t, b: _ev(t, b, "--set", "methods=l2e", *_sampler(
        t, b, lambda m: {**m, "sampler": [0.5, 0.1]})), "'sampler' is a list"),
    "meta_lr_text": (lambda t, b: _ev(t, b, "--set", "methods=l2e", *_sampler(
        t, b, lambda m: {**m, "sampler": {**m["sampler"], "learning_rate": "fast"}})), "sampler.learning_rate"),
    "meta_lr_nan": (lambda t, b: _ev(t, b, "--set", "methods=l2e", *_sampler(
        t, b, lambda m: {**m, "sampler": {**m["sampler"], "alpha_scale": float("nan")}})), "sampler.alpha_scale"),
    "meta_kind_list": (lambda t, b: _ev(t, b, "--set", "methods=l2e", *_sampler(
        t, b, lambda m: {**m, "sampler_kind": ["l2e"]})), "field 'sampler_kind' is a list, expected str"),
    "meta_not_json": (lambda t, b: _ev(t, b, "--set", "methods=l2e", "--sampler", str(
        _put(_run(b, t), "checkpoints/4/meta/metadata", "{oops"))), "corrupt checkpoint metadata"),
    "meta_params_other_shape": (lambda t, b: _ev(t, b, "--set", "methods=l2e", *_other_shape_checkpoint(t)),
                                "another shape"),
    "existing_report": (lambda t, b: [*SMOKE_EVAL, "--output", str(_report(b, t))], "--overwrite"),
    "overwrite_bad_seed": (lambda t, b: _ev(t, b, "--overwrite", "--seed", BIG, out=_report(b, t)),
                           "seed must be an integer"),
    "overwrite_bad_sampler": (lambda t, b: _ev(t, b, "--overwrite", "--set", "methods=l2e", "--sampler",
                                               str(t / "nope"), out=_report(b, t)), "checkpoint not found"),
    "overwrite_foreign_dir": (lambda t, b: _ev(t, b, "--overwrite", out=_other(t)), "without report.json"),
    "output_holds_run": (lambda t, b: _ev(t, b, "--overwrite", out=_run(b, t)), "holds a meta-training run"),
    "output_is_file": (lambda t, b: _ev(t, b, out=_put(t, "out", "x") / "out"), "not a directory"),
    "output_dangling_link": (lambda t, b: _ev(t, b, out=_dangling(t)), "dangling symbolic link"),
    "reference_empty": (lambda t, b: _ev(t, b, "--reference", str(_ref_file(t, ""))), "ref.txt: empty file"),
    "reference_text": (lambda t, b: _ev(t, b, "--reference", str(_ref_file(t, "a b\n"))), "not a numeric table"),
    "reference_rows": (lambda t, b: _ev(t, b, "--reference", str(_ref_file(t, "0.5 0.5\n"))), "rows, expected"),
    "reference_nan": (lambda t, b: _ev(t, b, "--reference", str(_ref_file(t, "\n".join(
        ["nan" + " 0.1" * 9] * 360) + "\n"))), "non-finite value in row 1"),
    "reference_missing": (lambda t, b: _ev(t, b, "--reference", str(t / "no.txt")), "no.txt: file not found"),
    "reference_unknown_task": (lambda t, b: _ev(t, b, "--reference", f"nope={_ref_file(t, '1 0')}"),
                               "unknown task 'nope'"),
}

REF = {
    "chains_zero": (lambda t, b: _ref_out(t) + ["--chains", "0"], "--chains must be"),
    "samples_two": (lambda t, b: _ref_out(t) + ["--samples", "2"], "--samples must be"),
    "unknown_task": (lambda t, b: _ref_out(t) + ["--task", "nope"], "'nope'"),
    "unknown_preset": (lambda t, b: ["--preset", "nope", "--output", str(t / "o")], "unknown preset"),
    "unknown_key": (lambda t, b: _ref_out(t) + ["--set", "bogus=1"], "unknown config key"),
    "seed_2_64": (lambda t, b: _ref_out(t) + ["--seed", BIG], "seed must be an integer"),
    "output_holds_report": (lambda t, b: ["--preset", "smoke", "--output", str(_report(b, t))], "report.json"),
    "output_foreign": (lambda t, b: ["--preset", "smoke", "--output", str(_other(t))], "non-empty directory"),
    "output_dangling_link": (lambda t, b: ["--preset", "smoke", "--quiet", "--output", str(_dangling(t))],
                             "dangling symbolic link"),
}


@pytest.mark.parametrize("tool,case", [("mt", c) for c in MT] + [("ev", c) for c in EV] + [("ref", c) for c in REF])
def test_cli_case(tool, case, tmp_path, base):
    setup, expected = {"mt": MT, "ev": EV, "ref": REF}[tool][case]
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    argv = setup(case_dir, base)
    before = snapshot(case_dir)
    rc, stderr = call(tool, argv)
    assert_one_error(rc, stderr, expected)
    assert snapshot(case_dir) == before  # nothing written, deleted or overwritten


# --------------------------------------------------------------------------- the library API


def _posterior():
    import jax.numpy as jnp

    import l2e

    return l2e.Posterior(lambda p, b: jnp.mean((p["w"] - b) ** 2), lambda p: -0.5 * jnp.sum(p["w"] ** 2), 10)


def _phi(inputs: int = 9, outputs: int = 2, hidden: tuple = (8,)):
    import jax

    from l2e.meta_model import MetaMLP

    import jax.numpy as jnp

    return MetaMLP(hidden, outputs).init(jax.random.PRNGKey(0), jnp.zeros((1, inputs)))["params"]


def _step_with(meta_params):
    import jax
    import jax.numpy as jnp

    from l2e.l2e import L2EConfig, build_kernel, init

    kernel = build_kernel(_posterior(), L2EConfig())
    return jax.jit(kernel)(jax.random.PRNGKey(0), init({"w": jnp.zeros(3)}), jnp.ones(3), meta_params)


def _dataset(x, y, classes: int = 3):
    from tasks.data.base import Dataset

    return Dataset("fuzz", x, y, x, y, classes)


def _regression(y):
    from tasks.data.uci import RegressionData

    x = np.zeros((3, 2), np.float32)
    return RegressionData("fuzz", "standard", x, y, x, y, x, y, np.zeros(2), np.ones(2))


def _load_sampler(run: Path, **overrides):
    import l2e

    return l2e.load_sampler(run, posterior=_posterior(), **overrides)


def _l2e(phi):
    import l2e

    return l2e.l2e(_posterior(), phi)


def _kinetic(phi):
    import l2e

    return l2e.kinetic(_posterior(), phi)


def _from_dict(d):
    from meta_train.config import from_dict

    return from_dict(d)


NAN, INF = float("nan"), float("inf")
LIB = {  # case -> (prepare(tmp, base) -> x, action(x) raising ValueError, expected message text)
    "l2e_input_width": (lambda t, b: _phi(inputs=7), _l2e, "layer 0 has kernel (7, 8)"),
    "l2e_output_width": (lambda t, b: _phi(outputs=3), _l2e, "3 outputs, expected 2"),
    "l2e_not_a_tree": (lambda t, b: {"w": 1}, _l2e, "not a meta-model parameter tree"),
    "kernel_input_width": (lambda t, b: _phi(inputs=8), _step_with, "layer 0 has kernel (8, 8)"),
    "kinetic_input_width": (lambda t, b: _phi(), _kinetic, "expected a kernel"),
    "load_sampler_alpha_nan": (lambda t, b: _run(b, t), lambda run: _load_sampler(run, alpha_scale=NAN), "alpha_scale"),
    "load_sampler_lr_inf": (lambda t, b: _run(b, t), lambda run: _load_sampler(run, learning_rate=INF), "learning_rate"),
    "load_sampler_unknown": (lambda t, b: _run(b, t), lambda run: _load_sampler(run, bogus=1), "bogus"),
    "load_sampler_no_meta": (lambda t, b: _drop(_run(b, t), "checkpoints/4/meta"), _load_sampler, "incomplete"),
    "dataset_nan_inputs": (lambda t, b: (np.array([[0.0], [np.nan]], np.float32), np.array([0, 1])),
                           lambda a: _dataset(*a), "train inputs: non-finite value nan"),
    "dataset_label_range": (lambda t, b: (np.zeros((2, 1), np.float32), np.array([0, 3])), lambda a: _dataset(*a),
                            "labels span"),
    "dataset_label_fraction": (lambda t, b: (np.zeros((2, 1), np.float32), np.array([0.0, 1.5])),
                               lambda a: _dataset(*a), "class labels must be integers"),
    "regression_inf_target": (lambda t, b: np.array([0.0, np.inf, 1.0], np.float32), _regression,
                              "train targets: non-finite"),
    "config_dict_wrong_type": (lambda t, b: {"es": [1]}, _from_dict, "es: expected a JSON object"),
    "config_dict_text_number": (lambda t, b: {"es": {"lr": "0.1"}}, _from_dict, "es.lr: bad value '0.1'"),
}


@pytest.mark.parametrize("case", sorted(LIB))
def test_library_case(case, tmp_path, base):
    """The library refuses with a one-line ValueError (CheckpointError, DatasetError, ConfigError are ones) naming
    the problem, and changes no file."""
    prepare, action, expected = LIB[case]
    x = prepare(tmp_path, base)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as info:
        action(x)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and expected in message, message
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- signals, concurrency, disks


def _finish(proc: subprocess.Popen, sig: int | None = None) -> tuple[int, str]:
    if sig is not None:
        proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    return proc.returncode, stderr


@pytest.mark.slow
def test_sigterm_and_sigint_mid_meta_training(tmp_path, base):
    """A signal in the inner loop of iteration 2 (after checkpoint 2): one line saying how to continue, exit 143 /
    130, the run directory exactly as it was at the signal, and --resume then ends bit-identical."""
    outs = {sig: tmp_path / f"run_{sig.name}" for sig in (signal.SIGTERM, signal.SIGINT)}
    procs = {sig: cli("mt", "--preset", "smoke", "--no-progress", "--output", str(out),
                      env={"L2E_FAULT": "mid_inner:2:pause"}) for sig, out in outs.items()}
    try:
        for sig, out in outs.items():
            wait_for(lambda: (out / "checkpoints" / "2").is_dir(), what=f"checkpoint 2 of {out}")
        before = {sig: settled(out) for sig, out in outs.items()}
        results = {sig: _finish(proc, sig) for sig, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
    for sig, code, why in ((signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")):
        assert_one_error(*results[sig], f"{why}; continue with --resume --output {outs[sig]}", code=code)
        assert snapshot(outs[sig]) == before[sig]
    from meta_train import PRESETS
    from meta_train.train import meta_train

    resumed = meta_train(PRESETS["smoke"], outs[signal.SIGTERM], resume=True, progress=False)
    import l2e
    import jax

    ref, _, _ = l2e.load_meta_params(base / "run")
    for a, b in zip(jax.tree.leaves(resumed["meta_params"]), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_sigterm_and_sigint_mid_evaluation_keep_the_old_report(tmp_path, base):
    """Signals while `--overwrite` computes (its staging directory exists): one line, exit 143 / 130, the old
    report set byte for byte, and no staging directory left behind."""
    outs, procs = {}, {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        d = tmp_path / sig.name
        d.mkdir()
        outs[sig] = _report(base, d)
        procs[sig] = cli("ev", "--preset", "smoke", "--quiet", "--overwrite", "--output", str(outs[sig]))
    try:
        before = {sig: snapshot(out) for sig, out in outs.items()}
        for out in outs.values():
            wait_for(lambda: any(out.parent.glob(".report.staging-*")), what="the evaluation's staging directory")
        results = {sig: _finish(proc, sig) for sig, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
    for sig, code, why in ((signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")):
        assert_one_error(*results[sig], f"error: {why}; {outs[sig]} is unchanged", code=code)
        assert snapshot(outs[sig]) == before[sig]
        assert not list(outs[sig].parent.glob(".report.staging-*"))


@pytest.mark.slow
def test_two_concurrent_runs_are_refused(tmp_path, base):
    """A second `--overwrite` while a meta-training process holds the run directory (paused in iteration 0), and a
    second evaluation while one holds the report directory: one line, nothing written."""
    out = tmp_path / "run"
    first = cli("mt", "--preset", "smoke", "--no-progress", "--output", str(out), env={"L2E_FAULT": "mid_inner:0:pause"})
    try:
        wait_for(lambda: (out / "config.json").exists(), what="the first run's config.json")
        before = settled(out)
        rc, stderr = call("mt", ["--preset", "smoke", "--overwrite", "--no-progress", "--output", str(out)])
        assert_one_error(rc, stderr, "is in use by another meta-training process")
        assert snapshot(out) == before
        assert_one_error(*_finish(first, signal.SIGTERM), "terminated (SIGTERM)", code=143)
    finally:
        first.kill()
    from cli import DirectoryLock

    report = _report(base, tmp_path)
    before = snapshot(tmp_path)
    with DirectoryLock(report):  # what a running evaluation holds
        rc, stderr = call("ev", [*SMOKE_EVAL, "--overwrite", "--output", str(report)])
    assert_one_error(rc, stderr, "is in use by another evaluation")
    assert snapshot(tmp_path) == before


def test_truncated_orbax_file_is_one_line(tmp_path, base):
    """A truncated orbax data file: orbax's own threads must not add lines after the error (a real process)."""
    run = _run(base, tmp_path)
    for f in (run / "checkpoints" / "4" / "meta_params").rglob("d/*"):
        f.write_bytes(f.read_bytes()[:10])
    before = snapshot(tmp_path)
    proc = cli("ev", *_smoke("--set", "methods=l2e"), "--sampler", str(run), "--output", str(tmp_path / "out"))
    assert_one_error(*_finish(proc), f"corrupt checkpoint {run / 'checkpoints' / '4'}")
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_full_disk(tmp_path, base):
    """On a full disk: `meta_train --overwrite` (a real process: orbax) and `evaluate --overwrite` fail with one line
    before deleting or replacing anything."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run, report = _run(base, disk), _report(base, disk)
        fill(disk)
        before = snapshot(disk)
        proc = cli("mt", "--preset", "smoke", "--overwrite", "--no-progress", "--output", str(run))
        assert_one_error(*_finish(proc), "No space left on device")
        assert snapshot(disk) == before
        rc, stderr = call("ev", [*SMOKE_EVAL, "--overwrite", "--output", str(report)])
        assert_one_error(rc, stderr, "No space left on device")
        assert snapshot(disk) == before


@pytest.mark.parametrize("tool", ["mt", "ev", "ref"])
def test_read_only_output(tool, tmp_path):
    with tmpfs(tmp_path / "ro", "1m", readonly=True) as ro:
        argv = {"mt": _mt_out, "ev": _ev_out, "ref": _ref_out}[tool](ro)
        before = snapshot(tmp_path)
        rc, stderr = call(tool, argv)
        assert_one_error(rc, stderr, "Read-only file system" if tool == "mt" else "not writable")
        assert snapshot(tmp_path) == before


def test_case_count():
    """Issue 19 asks for at least 60 fuzz cases; every one above asserts the exit code, the one error line and the
    unchanged files."""
    assert len(MT) + len(EV) + len(REF) + len(LIB) + 5 + 3 >= 60
