"""The meta-training run directory: config.json, log.jsonl, meta_loss.png, checkpoints/ (via l2e.checkpoint),
resume, and the lock that keeps a second process out.

Reliability (a run survives SIGKILL at any point and resumes bit-identically):
  * checkpoints are committed atomically (l2e.checkpoint.save_checkpoint: staged, fsynced, renamed), and
    only committed steps are read; stale staging directories are removed on open;
  * a checkpoint holds the estimator's whole state (meta_train.estimators: φ, the optimiser's state, perturbation
    accumulators and chain states mid-unroll), restored into the state the estimator builds for that step;
  * the log is appended row by row; on resume the rows after the restored iteration are dropped, a torn last
    line (the process died mid-write) is discarded, and the log is rewritten atomically;
  * while a process runs in the directory it holds an exclusive lock on it (cli.DirectoryLock).
In a multi-host run only process 0 (`is_writer`) writes; the others only read the checkpoints on resume.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from l2e.checkpoint import KEEP_CHECKPOINTS, CheckpointError, clean_staging, restore_checkpoint, save_checkpoint
from base.io import atomic_write_bytes, atomic_write_text, one_line, parse_json, read_bounded
from cli import MARKER, DirectoryLock, LockHeldError, read_marker, require_ours, write_marker
from cli.outputs import refuse_never_ours
from meta_train.config import ConfigError, MetaTrainConfig, from_dict
from meta_train.faults import NoFault

LOG = "log.jsonl"
CONFIG = "config.json"
PLOT = "meta_loss.png"
CHECKPOINTS = "checkpoints"


class RunDirError(ValueError):
    """The output directory cannot be used as asked (holds another run, not writable, in use, …)."""


def is_writer() -> bool:
    """Whether this process writes the run directory: process 0 only (in a `--distributed` run every process
    computes the same ES step; only process 0 touches the shared output directory)."""
    return jax.process_index() == 0


RUN_ENTRIES = (CONFIG, LOG, PLOT, CHECKPOINTS)
"""What a meta-training run directory holds (besides its marker, cli.MARKER, and hidden temporaries of atomic
writes)."""
MAX_LOG_BYTES = 2**30
"""The largest log.jsonl read on resume (about two million rows)."""


def _read_config(cfg_file: Path) -> dict:
    """The JSON object in a run's config.json (bounded in size and nesting: base.io); RunDirError naming the file if
    it is unreadable or not one."""
    try:
        old = parse_json(read_bounded(cfg_file))
    except OSError as e:
        raise RunDirError(f"cannot read {cfg_file}: {e.strerror or type(e).__name__}") from None
    except ValueError as e:
        raise RunDirError(f"{cfg_file} is corrupt (not JSON: {one_line(e)}); cannot use this run") from None
    if not isinstance(old, dict) or not {"seed", "es", "inner", "tasks"} <= set(old):
        raise RunDirError(f"{cfg_file} is not the config of a meta-training run (a JSON {type(old).__name__} "
                          "without seed, es, inner, tasks); choose another --output")
    return old


def _check_ours(out: Path) -> None:
    """RunDirError unless `out` holds a meta-training run of ours (its config, the run marker of cli.outputs) and only
    a run's entries (before --overwrite deletes them)."""
    _read_config(out / CONFIG)
    require_ours(out, "run", RunDirError, "overwrite it")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in RUN_ENTRIES and not p.name.startswith("."))
    if foreign:
        raise RunDirError(f"{out} holds files that are not part of a meta-training run ({', '.join(foreign[:3])}); "
                          "refusing to overwrite it: choose another --output")


def _check_resumable(out: Path, config: MetaTrainConfig) -> None:
    old = _read_config(out / CONFIG)
    try:  # config fields added since the run was written (e.g. objective.reference) take their defaults
        old = from_dict(old).to_dict()
    except ConfigError:
        pass  # compared as stored: the difference is reported below
    new = config.to_dict()
    if old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise RunDirError(f"cannot resume {out}: its config differs in {', '.join(diff)}")


def _prepare(out: Path, config: MetaTrainConfig, resume: bool, overwrite: bool) -> None:
    """Check the (locked) directory; never touch an existing run unless resume/overwrite says so."""
    if (out / CONFIG).exists():
        if resume:
            _check_resumable(out, config)
            if read_marker(out) is None:  # a run written before markers existed: its config proves it ours and
                return None  # resuming replaces nothing; it stays unmarked (so --overwrite refuses it)
            return require_ours(out, "run", RunDirError, "resume in it")
        if not overwrite:
            raise RunDirError(f"{out} already holds a meta-training run; pass --resume to continue it or "
                              f"--overwrite to replace it")
        _check_ours(out)
        staged = out / f".{CONFIG}.next"
        try:  # the new config first: a full disk fails here, before the old run is deleted
            atomic_write_text(staged, json.dumps(config.to_dict(), indent=2, sort_keys=True))
            for name in (CHECKPOINTS, LOG, PLOT):
                p = out / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            return os.replace(staged, out / CONFIG)
        except OSError as e:
            raise RunDirError(f"cannot write to {out}: {e.strerror}") from None
        finally:
            staged.unlink(missing_ok=True)
    if resume:
        raise RunDirError(f"--resume: {out} holds no meta-training run to resume (no {CONFIG}); drop --resume to "
                          "start a new run")
    if any(p for p in out.iterdir() if p.name != MARKER):
        raise RunDirError(f"{out} is not empty and holds no meta-training run; choose another --output"
                          + (" (--overwrite replaces only a meta-training run)" if overwrite else ""))
    try:
        write_marker(out, "run")
        atomic_write_text(out / CONFIG, json.dumps(config.to_dict(), indent=2, sort_keys=True))
    except OSError as e:
        raise RunDirError(f"cannot write to {out}: {e.strerror}") from None


def read_log(out: Path) -> list[dict]:
    """The log rows; a torn last line (a run killed while writing it) is dropped."""
    path = Path(out) / LOG
    if not path.exists():
        return []
    try:
        lines = read_bounded(path, MAX_LOG_BYTES).decode(errors="replace").split("\n")
    except OSError as e:
        raise RunDirError(f"cannot read {path}: {e.strerror or type(e).__name__}") from None
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = parse_json(line, max_depth=8)
        except ValueError:
            if all(not rest.strip() for rest in lines[i + 1:]):
                break  # torn last line
            raise RunDirError(f"{path} is corrupt at line {i + 1}; cannot resume") from None
        loss = row.get("meta_loss") if isinstance(row, dict) else None
        if (not isinstance(row, dict) or type(row.get("iteration")) is not int or row["iteration"] < 0
                or not (loss is None or (isinstance(loss, (int, float)) and not isinstance(loss, bool)
                                         and math.isfinite(loss)))):
            raise RunDirError(f"{path} is corrupt at line {i + 1} (not a log row with an integer iteration and a "
                              "numeric meta_loss); cannot resume")
        rows.append(row)
    return rows


def write_plot(draw: Callable, path: Path, xlabel: str, ylabel: str = "meta-loss") -> None:
    """A 6 × 3.5 in PNG at `path` (atomic) of draw(ax), with axis labels and a legend."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    draw(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


def plot_meta_loss(rows: list[dict], path: Path) -> None:
    """Meta-loss per outer iteration (and its running mean) as a PNG at `path`."""
    def draw(ax):
        it = np.array([r["iteration"] for r in rows])
        loss = np.array([r["meta_loss"] for r in rows], dtype=float)
        ax.plot(it, loss, ".", alpha=0.4, label="per iteration (task varies)")
        if len(loss) >= 5:
            w = max(5, len(loss) // 10)
            ax.plot(it[w - 1:], np.convolve(loss, np.ones(w) / w, mode="valid"), label=f"running mean ({w})")

    write_plot(draw, path, "outer iteration", "meta-loss (nats)")


def _latest_step(root: Path) -> int:
    """The step l2e.checkpoint.restore_checkpoint restores: the largest digit-named directory under `root` (0: none)."""
    steps = [int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()] if root.is_dir() else []
    return max(steps, default=0)


def _restore(root: Path, template: Callable[[int], Any], legacy) -> tuple[int, Any]:
    """(step, state) of the latest checkpoint under `root`, restored into template(step), else (legacy given) into
    the legacy template and converted; the first CheckpointError if neither fits."""
    step = _latest_step(root)
    try:
        return restore_checkpoint(root, template(step))
    except CheckpointError as e:
        if legacy is None:
            raise
        error = e
    legacy_template, convert = legacy
    try:
        step, old = restore_checkpoint(root, legacy_template)
    except CheckpointError:
        raise error from None
    return step, convert(old, step)


class RunDir:
    """The run directory `out` of one meta-training process: `open` it (lock, checks, config), `resume` from
    it, `append` log rows, `save` checkpoints, `plot`, and `close` it (releases the lock).

    Only a writer process (default: `is_writer()`) writes or locks; the others read checkpoints on resume.
    keep: checkpoint steps kept (the newest; 0 keeps every step, e.g. to select one afterwards)."""

    def __init__(self, out: str | Path, writer: bool | None = None, keep: int = KEEP_CHECKPOINTS):
        self.out = Path(out)
        self.keep = keep
        self.checkpoints = (self.out / CHECKPOINTS).resolve()
        self.writer = is_writer() if writer is None else writer
        self._lock = DirectoryLock(self.out)

    def open(self, config: MetaTrainConfig, resume: bool, overwrite: bool) -> "RunDir":
        """Create and lock the directory, check it may be used as asked and write config.json.

        RunDirError if it holds another run (and neither resume nor overwrite is asked), another config (on
        resume), cannot be written, or another process holds it."""
        if not self.writer:
            return self
        out = self.out
        if out.is_symlink() and not out.exists():
            raise RunDirError(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
        if out.exists() and not out.is_dir():
            raise RunDirError(f"output path exists and is not a directory: {out}")
        refuse_never_ours(out, RunDirError, "write a meta-training run into it")  # $HOME, a VCS working tree, ...
        if resume and not out.exists():
            raise RunDirError(f"--resume: {out} does not exist (nothing to resume); drop --resume to start a new run")
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except LockHeldError:
            raise RunDirError(f"{out} is in use by another meta-training process") from None
        except OSError as e:
            raise RunDirError(f"cannot write to {out}: {e.strerror}") from None
        try:
            _prepare(out, config, resume, overwrite)
        except BaseException:
            self.close()
            if created and not any(out.iterdir()):
                out.rmdir()  # leave no trace of a run that never started
            raise
        return self

    def close(self) -> None:
        """Release the directory's lock."""
        self._lock.release()

    def discard(self) -> None:
        """Remove what a new run wrote before its first checkpoint (config, log, plot, marker, uncommitted
        checkpoint staging; the directory too when it is then empty): a run that fails before it has anything to
        resume leaves no litter. A run with a committed checkpoint is kept."""
        if not self.writer or (self.checkpoints.is_dir() and any(
                p.name.isdigit() for p in self.checkpoints.iterdir())):
            return
        for name in (CHECKPOINTS, LOG, PLOT, CONFIG, MARKER):
            p = self.out / name
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        try:
            self.out.rmdir()
        except OSError:
            pass

    def resume(self, template: Callable[[int], Any], resume: bool,
               legacy: tuple[Any, Callable[[Any, int], Any]] | None = None) -> tuple[int, object, list[dict]]:
        """(first iteration to run, ES state, log rows before it): from the latest committed checkpoint if
        `resume` (else 0, template(0), []). The writer drops staging leftovers and rewrites the log.

        template(step): the state the checkpoint of step `step` is restored into (its structure, shapes, dtypes).
        legacy: (template, convert(old state, step) -> state) of the layout older checkpoints hold, tried when the
        checkpoint does not fit template(step); None: none."""
        start, state = 0, template(0)
        if resume:
            start, state = _restore(self.checkpoints, template, legacy)
        rows = [r for r in read_log(self.out) if r["iteration"] < start] if resume else []
        if self.writer:
            clean_staging(self.checkpoints)
            atomic_write_text(self.out / LOG, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        return start, state, rows

    def append(self, row: dict, fault=NoFault()) -> None:
        """Append one log row (fault point mid_log: half the line, then SIGKILL)."""
        line = json.dumps(row, sort_keys=True) + "\n"
        with open(self.out / LOG, "a") as f:
            if fault.armed("mid_log", row["iteration"]):
                f.write(line[: len(line) // 2])
                f.flush()
                fault.hit("mid_log", row["iteration"])
            f.write(line)

    def save(self, step: int, es_state, meta_params, config: MetaTrainConfig, fault=NoFault()) -> Path:
        """Commit checkpoint `step` (ES state, meta-parameters, metadata: iteration, sampler kind, its config, the
        meta-training config)."""
        metadata = {"iteration": step, "sampler_kind": config.sampler_kind,
                    "sampler": dataclasses.asdict(config.sampler_config), "config": config.to_dict()}

        def after_item(item: str) -> None:
            if item == "es_state":
                fault.hit("mid_checkpoint", step)

        return save_checkpoint(self.checkpoints, step, es_state, meta_params, metadata, keep=self.keep,
                               after_item=after_item)

    def plot(self, rows: list[dict]) -> None:
        plot_meta_loss([r for r in rows if r["meta_loss"] is not None], self.out / PLOT)

    def has_plot(self) -> bool:
        return (self.out / PLOT).exists()
