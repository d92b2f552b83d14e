"""The meta-training loop: ES outer steps, JSONL log, meta-loss plot, orbax checkpoints, resume.

Reliability (a run survives SIGKILL at any point and resumes bit-identically):
  * checkpoints are written in two phases: every item (orbax `es_state`, orbax `meta_params`, JSON
    `meta/metadata`) goes into a staging directory `checkpoints/.tmp-<step>`, which is fsynced and then
    renamed to `checkpoints/<step>` (an atomic rename on POSIX).  Only digit-named step directories are
    ever read, so a half-written checkpoint is never loaded; stale staging directories are removed on resume.
  * the log is appended row by row; on resume the rows after the restored iteration are dropped, a torn
    last line (the process died mid-write) is discarded, and the log is rewritten atomically.
  * randomness of iteration t is fold_in(seed, t) and the whole ES state (mean, Adam state, …) is in the
    checkpoint, so a resumed run computes exactly what an uninterrupted one does.
  * a member whose meta-loss is not finite (a diverging inner chain) gets `es.divergence_penalty`, which is
    also an upper bound for every member's fitness (the worst case); the meta-parameters are checked to be
    finite before they are checkpointed.

Fault injection for tests: the environment variable L2E_FAULT="<point>:<n>" makes the process SIGKILL
itself at that point (see FAULT_POINTS).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

from l2e.checkpoint import CheckpointError
from l2e.meta_model import init_meta_params, sghmc_like_meta_params
from meta_train.config import ConfigError, MetaTrainConfig
from meta_train.es import evaluate_population, make_strategy, outer_keys

LOG = "log.jsonl"
CONFIG = "config.json"
PLOT = "meta_loss.png"
CHECKPOINTS = "checkpoints"
ITEMS = ("es_state", "meta_params", "meta")
KEEP_CHECKPOINTS = 3
PLOT_EVERY_S = 60.0
"""The meta-loss plot is redrawn at a checkpoint at most this often, and always when the run stops."""

FAULT_ENV = "L2E_FAULT"
FAULT_POINTS = {
    "before_iteration": "start of outer iteration n (0-based), before any work",
    "mid_inner": "inside the inner chains of iteration n, after their first chunk",
    "mid_log": "half-way through writing the log row of iteration n (a torn last line)",
    "after_log": "after the log row of iteration n, before its checkpoint",
    "mid_checkpoint": "while checkpoint n is half-written (es_state staged, meta_params and meta not yet)",
    "after_checkpoint": "right after checkpoint n is committed, before the plot",
}


def _fault_plan() -> tuple[str, int] | None:
    spec = os.environ.get(FAULT_ENV, "").strip()
    if not spec:
        return None
    point, _, n = spec.partition(":")
    if point not in FAULT_POINTS or not n.strip().lstrip("-").isdigit():
        raise RuntimeError(f"bad {FAULT_ENV}={spec!r}: expected <point>:<n> with point in {', '.join(FAULT_POINTS)}")
    return point, int(n)


def _fault(plan, point: str, n: int) -> None:
    """SIGKILL this process if the fault plan names (point, n): no cleanup, no flushing, like `kill -9`."""
    if plan is not None and plan == (point, n):
        os.kill(os.getpid(), signal.SIGKILL)


class RunDirError(ValueError):
    """The output directory cannot be used as asked (holds another run, not writable, …)."""


def prepare_output(out: Path, config: MetaTrainConfig, resume: bool, overwrite: bool) -> None:
    """Check / create the output directory; never touch an existing run unless resume/overwrite says so."""
    cfg_file = out / CONFIG
    if out.exists() and not out.is_dir():
        raise RunDirError(f"output path exists and is not a directory: {out}")
    if cfg_file.exists():
        if overwrite:
            for name in ("checkpoints", LOG, PLOT, CONFIG):
                p = out / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        elif resume:
            try:
                old = json.loads(cfg_file.read_text())
            except json.JSONDecodeError:
                raise RunDirError(f"{cfg_file} is corrupt; cannot resume") from None
            if old != config.to_dict():
                diff = sorted(k for k in set(old) | set(config.to_dict()) if old.get(k) != config.to_dict().get(k))
                raise RunDirError(f"cannot resume {out}: its config differs in {', '.join(diff)}")
            return
        else:
            raise RunDirError(f"{out} already holds a meta-training run; pass --resume to continue it or "
                              f"--overwrite to replace it")
    elif out.is_dir() and any(out.iterdir()) and not overwrite:
        raise RunDirError(f"{out} is not empty and holds no meta-training run; choose another --output")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / (CONFIG + ".tmp")
        tmp.write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        os.replace(tmp, cfg_file)
    except OSError as e:
        raise RunDirError(f"cannot write to {out}: {e.strerror}") from None


def check_inputs(config: MetaTrainConfig) -> None:
    """Load every dataset and build every task of the distribution once (cached), so that bad data
    (missing directory, truncated or mis-shaped files, a CNN on tabular data) is reported before the
    output directory is touched."""
    from tasks.task import build_task

    data_dir = config.tasks.data_dir
    if data_dir is not None and not Path(data_dir).is_dir():
        raise ConfigError(f"tasks.data_dir does not exist or is not a directory: {data_dir}")
    for spec in config.tasks.specs():
        build_task(spec)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json_durably(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())


def is_writer() -> bool:
    """Whether this process writes the run directory (log, plot, checkpoints): process 0 only.

    In a multi-host run (`--distributed`) every process computes the same ES step on the global device
    mesh; only process 0 touches the (shared) output directory, the others only read it on --resume."""
    return jax.process_index() == 0


def _tree_checkpointer():
    if jax.process_count() > 1:  # only process 0 writes: no cross-process barrier inside orbax
        opts = ocp.options.MultiprocessingOptions(primary_host=0, active_processes={0})
        return ocp.Checkpointer(ocp.StandardCheckpointHandler(), multiprocessing_options=opts)
    return ocp.Checkpointer(ocp.StandardCheckpointHandler())  # synchronous


def committed_steps(root: Path) -> list[int]:
    """Steps of the committed (digit-named, all items present) checkpoints under `root`, ascending."""
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir()
                  if p.is_dir() and p.name.isdigit() and all((p / item).is_dir() for item in ITEMS))


def clean_staging(root: Path) -> None:
    """Remove staging / half-deleted directories left by a killed run (never a committed step)."""
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith((".tmp-", ".del-")):
                shutil.rmtree(p, ignore_errors=True)


def save_checkpoint(root: Path, step: int, strategy, es_state, config: MetaTrainConfig, fault=None) -> Path:
    """Write checkpoint `step` atomically: stage every item in root/.tmp-<step>, then rename to root/<step>.

    Keeps the newest KEEP_CHECKPOINTS committed steps (older ones are renamed away before deletion, so a
    kill during pruning leaves no partial step directory)."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stage = root / f".tmp-{step}"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    leaves = {str(i): np.asarray(x) for i, x in enumerate(jax.tree.leaves(es_state))}
    meta = {"iteration": step, "sampler": dataclasses.asdict(config.sampler), "config": config.to_dict()}
    ckptr = _tree_checkpointer()
    ckptr.save(stage / "es_state", leaves)
    _fault(fault, "mid_checkpoint", step)
    ckptr.save(stage / "meta_params", jax.tree.map(np.asarray, strategy.get_mean(es_state)))
    _write_json_durably(stage / "meta" / "metadata", meta)
    for p in (stage / "meta", stage):
        _fsync_dir(p)
    final = root / str(step)
    if final.exists():  # the same step written again (e.g. after a resume from an older one)
        old = root / f".del-{step}"
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(stage, final)
    _fsync_dir(root)
    for old_step in committed_steps(root)[:-KEEP_CHECKPOINTS]:
        doomed = root / f".del-{old_step}"
        os.replace(root / str(old_step), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return final


def restore_checkpoint(root: Path, template_state):
    """(iteration, es_state) of the latest committed checkpoint under `root`, or (0, template) if none."""
    steps = committed_steps(Path(root))
    if not steps:
        return 0, template_state
    step = steps[-1]
    path = (Path(root) / str(step)).resolve()
    leaves, treedef = jax.tree.flatten(template_state)
    template = {str(i): np.asarray(x) for i, x in enumerate(leaves)}
    try:
        restored = _tree_checkpointer().restore(path / "es_state", args=ocp.args.StandardRestore(template))
        new_leaves = [np.asarray(restored[str(i)]) for i in range(len(leaves))]
    except Exception as e:  # orbax raises many types for damaged files
        raise CheckpointError(f"cannot restore checkpoint {path} (corrupt or from another run: "
                              f"{type(e).__name__}); delete that step directory to resume from an earlier one"
                              ) from None
    for i, (new, old) in enumerate(zip(new_leaves, leaves)):
        if new.shape != np.shape(old):
            raise CheckpointError(f"checkpoint {path} holds an ES state of another shape "
                                  f"(leaf {i}: {new.shape}, expected {np.shape(old)})")
    new_leaves = [jnp.asarray(new, dtype=old.dtype) for new, old in zip(new_leaves, leaves)]
    return step, jax.tree.unflatten(treedef, new_leaves)


def read_log(out: Path) -> list[dict]:
    """The log rows; a torn last line (a run killed while writing it) is dropped."""
    path = out / LOG
    if not path.exists():
        return []
    lines = [line for line in path.read_text(errors="replace").split("\n")]
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if all(not rest.strip() for rest in lines[i + 1:]):
                break  # torn last line
            raise RunDirError(f"{path} is corrupt at line {i + 1}; cannot resume") from None
    return rows


def write_log(out: Path, rows: list[dict]) -> None:
    tmp = out / (LOG + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    os.replace(tmp, out / LOG)


def plot_meta_loss(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    it = np.array([r["iteration"] for r in rows])
    loss = np.array([r["meta_loss"] for r in rows], dtype=float)
    ax.plot(it, loss, ".", alpha=0.4, label="per iteration (task varies)")
    if len(loss) >= 5:
        w = max(5, len(loss) // 10)
        ax.plot(it[w - 1:], np.convolve(loss, np.ones(w) / w, mode="valid"), label=f"running mean ({w})")
    ax.set_xlabel("outer iteration")
    ax.set_ylabel("BMA meta-loss (NLL, nats)")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def meta_train(config: MetaTrainConfig, out: str | Path, resume: bool = False, overwrite: bool = False,
               progress: bool = True, stop_after: int | None = None) -> dict:
    """Run (or resume) meta-training into `out`; returns a summary dict.

    stop_after: stop once this many outer iterations are done (for tests of resumption).
    """
    out = Path(out)
    fault = _fault_plan()
    check_inputs(config)
    writer = is_writer()
    if writer:
        prepare_output(out, config, resume, overwrite)
    k_meta = jax.random.fold_in(jax.random.PRNGKey(config.seed), -1 % 2**31)
    if config.meta_init == "sghmc":
        phi0 = sghmc_like_meta_params(k_meta, config.hidden)
    else:
        phi0 = init_meta_params(k_meta, config.hidden)
    strategy = make_strategy(config.es, phi0)
    es_params = strategy.default_params
    template = strategy.init(jax.random.PRNGKey(config.seed), phi0, es_params)
    ckpt_root = (out / CHECKPOINTS).resolve()
    start, es_state = restore_checkpoint(ckpt_root, template) if resume else (0, template)
    rows = [r for r in read_log(out) if r["iteration"] < start] if resume else []
    if writer:
        clean_staging(ckpt_root)
        write_log(out, rows)
    end = config.num_outer if stop_after is None else min(config.num_outer, stop_after)
    seen: set = set()
    last_plot = time.perf_counter()
    t_start = time.perf_counter()
    bar = tqdm(range(start, end), initial=start, total=config.num_outer, desc="meta-train", disable=not progress,
               unit="it")
    for it in bar:
        _fault(fault, "before_iteration", it)
        t0 = time.perf_counter()
        keys = outer_keys(config.seed, it)
        spec = config.tasks.sample(keys.task)
        if config.es.reset_optimizer:
            es_state = es_state.replace(opt_state=strategy.optimizer.init(es_state.mean))
        population, es_state = strategy.ask(keys.perturb, es_state, es_params)
        inner_fault = None
        if fault is not None and fault[0] == "mid_inner" and fault[1] == it:
            inner_fault = lambda _n: _fault(fault, "mid_inner", it)  # noqa: E731
        fitness, inner_s = evaluate_population(spec, population, keys, config.sampler, config.inner,
                                               config.meta_loss_examples, progress=inner_fault,
                                               execution=config.es.execution)
        raw = np.asarray(fitness, dtype=np.float64)
        finite = np.isfinite(raw)
        # a diverging member gets the penalty, and no member may look worse than a divergent one
        penalty = config.es.divergence_penalty
        shaped = jnp.where(jnp.isfinite(fitness), jnp.minimum(fitness, penalty), penalty)
        es_state, _ = strategy.tell(keys.perturb, population, shaped, es_state, es_params)
        mean = np.asarray(es_state.mean)
        if not np.all(np.isfinite(mean)):
            raise FloatingPointError(f"meta-parameters became non-finite at iteration {it}")
        half = config.es.population // 2
        row = {
            "iteration": it,
            "task": spec.name,
            "meta_loss": float(np.mean(raw[finite])) if finite.any() else None,
            "loss_plus": [float(v) if np.isfinite(v) else None for v in raw[:half]],
            "loss_minus": [float(v) if np.isfinite(v) else None for v in raw[half:]],
            "fitness": [float(v) for v in np.asarray(shaped, dtype=np.float64)],
            "divergent_members": int((~finite).sum()),
            "meta_param_norm": float(np.linalg.norm(mean)),
            "inner_seconds": round(inner_s, 4),
            "seconds": round(time.perf_counter() - t0, 4),
            "first_time_task": spec not in seen,
        }
        seen.add(spec)
        rows.append(row)
        line = json.dumps(row, sort_keys=True) + "\n"
        if not writer:
            continue
        with open(out / LOG, "a") as f:
            if fault is not None and fault == ("mid_log", it):
                f.write(line[: len(line) // 2])
                f.flush()
                _fault(fault, "mid_log", it)
            f.write(line)
        _fault(fault, "after_log", it)
        if row["meta_loss"] is not None:
            bar.set_postfix(loss=f"{row['meta_loss']:.3f}", task=spec.name)
        done = it + 1
        if done % config.checkpoint_every == 0 or done == config.num_outer:
            save_checkpoint(ckpt_root, done, strategy, es_state, config, fault)
            _fault(fault, "after_checkpoint", done)
            if done < end and time.perf_counter() - last_plot >= PLOT_EVERY_S:  # rendering costs ~0.5 s
                plot_meta_loss([r for r in rows if r["meta_loss"] is not None], out / PLOT)
                last_plot = time.perf_counter()
    bar.close()
    if writer and (start < end or not (out / PLOT).exists()):
        plot_meta_loss([r for r in rows if r["meta_loss"] is not None], out / PLOT)
    return {
        "iterations": end,
        "seconds": time.perf_counter() - t_start,
        "meta_params": strategy.get_mean(es_state),
        "final_meta_loss": rows[-1]["meta_loss"] if rows else None,
        "output": str(out),
    }


__all__ = ["ConfigError", "RunDirError", "meta_train"]
