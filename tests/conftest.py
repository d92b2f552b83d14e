"""Shared test set-up: the repository root and data folder, JAX's persistent compilation cache, the `slow` tier,
tiny task / meta-training / evaluation configurations that several files use, and running a CLI in-process.

Tiers: `pytest -m "not slow"` is the fast tier (run after every change); the full suite is plain `pytest`
(`-n 2 --dist loadfile` on 2 cores). `slow` marks every test that takes over ~10 s on a 2-core machine.

Data: when `$L2E_DATA_DIR` is unset and `<repo>/../shared/data` exists, the session (and every process a test
starts) gets `L2E_DATA_DIR` pointing there; `DATA_DIR` is that folder, and tests that need a data set skip with a
message naming the missing path when it is absent.

Compilation cache: every test process, and every Python process a test starts (they inherit the environment),
uses JAX's persistent compilation cache in `<repo>/.pytest_cache/jax-compilation-cache` (or
`$JAX_COMPILATION_CACHE_DIR` when set), caching every program however small or quick to compile; programs compiled
by one xdist worker, a subprocess or an earlier run are then loaded instead of compiled again. Set
`L2E_TEST_COMPILATION_CACHE=0` to run without it. The controller empties the folder when it holds more than
`CACHE_MAX_BYTES` (no eviction otherwise: jax's own size limit needs the `filelock` package).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (the working tree whose code the tests import)."""

# ----------------------------------------------------------------------------- environment (before JAX is imported)

if not os.environ.get("L2E_DATA_DIR") and (ROOT.parent / "shared" / "data").is_dir():
    os.environ["L2E_DATA_DIR"] = str(ROOT.parent / "shared" / "data")
DATA_DIR = Path(os.environ.get("L2E_DATA_DIR") or ROOT.parent / "shared" / "data")
"""$L2E_DATA_DIR (set above to ../shared/data when that exists); may not exist: tests skip then."""

CACHE_ENABLED = os.environ.get("L2E_TEST_COMPILATION_CACHE", "1").lower() not in ("0", "false", "off", "no")
CACHE_DIR = Path(os.environ.get("JAX_COMPILATION_CACHE_DIR") or ROOT / ".pytest_cache" / "jax-compilation-cache")
CACHE_MAX_BYTES = 4 << 30
if CACHE_ENABLED:
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE_DIR))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


def pytest_configure(config):
    if CACHE_ENABLED:
        if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), before any worker starts
            size = sum(p.stat().st_size for p in CACHE_DIR.rglob("*") if p.is_file()) if CACHE_DIR.is_dir() else 0
            if size > CACHE_MAX_BYTES:
                shutil.rmtree(CACHE_DIR, ignore_errors=True)
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
        import jax  # the environment variables above are read when jax is first imported; this also covers an

        # earlier import (a plugin)
        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


CPU_LOG = os.environ.get("L2E_TEST_CPU_LOG")
"""A file to which every test appends `cpu_s<TAB>wall_s<TAB>compile_s<TAB>trace_s<TAB>cache_hits<TAB>nodeid`
(setup, call and teardown; CPU of this process and of the subprocesses it waited for; XLA compilation, loads from
the persistent cache included, and tracing / lowering in this process): the load-independent measure behind the
`slow` marks."""
_JAX_SECONDS = {"compile": 0.0, "trace": 0.0, "hits": 0}


def _record_jax_event(event, duration=None, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        _JAX_SECONDS["compile"] += duration
    elif event in ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration"):
        _JAX_SECONDS["trace"] += duration
    elif event == "/jax/compilation_cache/cache_hits":
        _JAX_SECONDS["hits"] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    if not _JAX_SECONDS.get("listening"):
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_record_jax_event)
        jax.monitoring.register_event_listener(_record_jax_event)
        _JAX_SECONDS["listening"] = True
    t0, w0, j0 = os.times(), time.perf_counter(), dict(_JAX_SECONDS)
    yield
    t1 = os.times()
    cpu = sum(getattr(t1, k) - getattr(t0, k) for k in ("user", "system", "children_user", "children_system"))
    jax_s = [_JAX_SECONDS[k] - j0[k] for k in ("compile", "trace", "hits")]
    with open(CPU_LOG, "a") as f:
        f.write(f"{cpu:.2f}\t{time.perf_counter() - w0:.2f}\t{jax_s[0]:.2f}\t{jax_s[1]:.2f}\t{jax_s[2]}\t"
                f"{item.nodeid}\n")


# ----------------------------------------------------------------------------- XLA's CPU instruction level

PINNED_ISA = "SSE4_2"
"""The instruction level at which golden numbers are recorded and checked (tests/test_golden.py): XLA:CPU compiles
for the host's widest vector instructions, and float32 results change with them (the smoke meta-training's φ by up
to 5.8e-5 between SSE4_2 / AVX and AVX-512 on an AMD EPYC, 9.4e-7 between AVX2 and AVX-512); every x86-64 machine
CI may land on has SSE4.2. Eigen's intra-op threading is switched off too, so that the core count cannot split a
contraction differently (1 core and 2 cores gave the same numbers; no bound guarantees it on 16)."""
PINNED_XLA_FLAGS = (f"--xla_cpu_max_isa={PINNED_ISA}", "--xla_cpu_multi_thread_eigen=false")


def is_x86_64() -> bool:
    """Whether this machine is x86-64 (the ISA names above are x86's; other CPUs skip the pinned checks)."""
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


def xla_flags_with(*flags: str, drop: tuple[str, ...] = ()) -> str:
    """$XLA_FLAGS with `flags` in place of any flag of the same name, and the flags named in `drop` removed."""
    names = {f.split("=")[0] for f in flags} | set(drop)
    keep = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] not in names]
    return " ".join(keep + list(flags))


def pinned_env() -> dict:
    """The environment of a subprocess whose numbers must not depend on the machine: CPU only, PINNED_XLA_FLAGS (in
    place of any instruction level or forced device count in $XLA_FLAGS), this checkout on PYTHONPATH."""
    flags = xla_flags_with(*PINNED_XLA_FLAGS, drop=("--xla_force_host_platform_device_count",))
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), "XLA_FLAGS": flags}


# ----------------------------------------------------------------------------- tiny configurations


def iris_mlp(*hidden: int):
    """The iris task with an MLP of the given hidden widths (none: a linear softmax model)."""
    from tasks import ModelSpec, TaskSpec

    return TaskSpec("iris", ModelSpec("mlp", hidden=tuple(hidden)))


TINY_EVAL = dict(held_out=("none (test)",), num_steps=40, num_samples=4, thinning=5, batch_size=16, chunk=2,
                 eval_batch=128, tune_examples=32, barrier_examples=50)
"""The smoke-sized evaluation budget of the method tests: 40 minibatch updates of 16 examples, 4 samples."""


def tiny_eval_config(spec, methods, settings: dict | None = None, **kw):
    """An EvalConfig of one task `spec` running `methods` with the TINY_EVAL budget; `settings` per method
    (evaluate.config.method_settings), `kw` replaces any other field."""
    from evaluate.config import EvalConfig, method_settings

    base = dict(TINY_EVAL, tasks=(spec,), methods=tuple(methods), settings=method_settings(**(settings or {})))
    return EvalConfig(**{**base, **kw})


def tiny_meta_config(kind: str, es, objective, tasks, **inner):
    """A MetaTrainConfig of 2 outer iterations of a meta-model with one hidden layer of 8 on a 20-step chain (2
    samples, thinning 5, batch 16); `inner` replaces ChainSchedule fields."""
    from l2e.chains import ChainSchedule
    from meta_train.config import MetaTrainConfig

    schedule = dict(num_steps=20, num_samples=2, thinning=5, batch_size=16, chunk=2)
    return MetaTrainConfig(num_outer=2, meta_loss_examples=64, checkpoint_every=2, hidden=(8,), sampler_kind=kind,
                           es=es, inner=ChainSchedule(**{**schedule, **inner}), tasks=tasks, objective=objective)


# ----------------------------------------------------------------------------- running a CLI in this process


@dataclasses.dataclass
class CliResult:
    """What `subprocess.run(..., capture_output=True, text=True)` gives, for a CLI run in this process."""

    args: list
    returncode: int
    stdout: str
    stderr: str


_CLI_MAINS = {
    "meta_train": ("meta_train.__main__", "main"),
    "evaluate": ("evaluate.__main__", "main"),
    "bench": ("bench.__main__", "main"),
}

# the warnings a fresh `python -m ...` prints (its default filters), so that they count as stderr lines here too
_FRESH_PROCESS_FILTERS = (("ignore", DeprecationWarning), ("ignore", PendingDeprecationWarning),
                          ("ignore", ImportWarning), ("ignore", ResourceWarning))


def run_cli(tool: str, *argv, cwd: str | Path | None = None) -> CliResult:
    """`python -m <tool> argv` run in this process: `<tool>.__main__.main(argv)` with stdout and stderr captured,
    SystemExit (argparse) turned into its exit status, the Python warnings a fresh process would print appended to
    stderr, and the SIGTERM / SIGINT handlers the CLI installs (base.io.handle_sigterm) put back afterwards.

    Use it where the process is not what the test is about; keep a subprocess for signals, SIGKILL, the exit status
    that `os._exit` gives, output that other threads print at interpreter exit, and fresh-interpreter imports."""
    import importlib

    module, name = _CLI_MAINS[tool]
    main = getattr(importlib.import_module(module), name)
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    old_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for action, category in _FRESH_PROCESS_FILTERS:
                warnings.filterwarnings(action, category=category)
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
                if isinstance(code, str):  # SystemExit("message"): printed, status 1
                    print(code, file=sys.stderr)
                    code = 1
            code = 0 if code is None else code
    finally:
        os.chdir(old_cwd)
        for s, h in handlers.items():
            signal.signal(s, h)
    stderr = err.getvalue() + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                      for w in caught)
    return CliResult([tool, *argv], code, out.getvalue(), stderr)


@pytest.fixture
def cli():
    """`cli(tool, *argv, cwd=None)`: run_cli (a CLI in this process)."""
    return run_cli


def one_error_line(proc, code: int = 2) -> str:
    """The single stderr line `error: ...` of a failed CLI run (a CliResult or a CompletedProcess) that exited with
    `code`; asserts there is nothing else on stderr (no traceback)."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]
