"""The meta-training loop: ES outer steps, JSONL log, meta-loss plot, orbax checkpoints, resume."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
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


def checkpoint_manager(out: Path) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=3, enable_async_checkpointing=False, create=True)
    return ocp.CheckpointManager((out / "checkpoints").resolve(), options=options,
                                 item_names=("es_state", "meta_params", "meta"))


def save_checkpoint(mngr, iteration, strategy, es_state, config: MetaTrainConfig) -> None:
    leaves = {str(i): np.asarray(x) for i, x in enumerate(jax.tree.leaves(es_state))}
    meta = {"iteration": iteration, "sampler": dataclasses.asdict(config.sampler), "config": config.to_dict()}
    mngr.save(iteration, args=ocp.args.Composite(
        es_state=ocp.args.StandardSave(leaves),
        meta_params=ocp.args.StandardSave(strategy.get_mean(es_state)),
        meta=ocp.args.JsonSave(meta),
    ), force=True)
    mngr.wait_until_finished()


def restore_checkpoint(mngr, template_state):
    """(iteration, es_state) of the latest complete checkpoint, or (0, template) if there is none."""
    step = mngr.latest_step()
    if step is None:
        return 0, template_state
    leaves, treedef = jax.tree.flatten(template_state)
    try:
        restored = mngr.restore(step, args=ocp.args.Composite(es_state=ocp.args.StandardRestore(
            {str(i): np.asarray(x) for i, x in enumerate(leaves)})))["es_state"]
    except Exception as e:  # orbax raises many types for damaged files
        raise CheckpointError(f"cannot restore checkpoint {step} in {mngr.directory}: {type(e).__name__}") from None
    new_leaves = [jnp.asarray(restored[str(i)], dtype=x.dtype) for i, x in enumerate(leaves)]
    return step, jax.tree.unflatten(treedef, new_leaves)


def read_log(out: Path) -> list[dict]:
    path = out / LOG
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
    prepare_output(out, config, resume, overwrite)
    k_meta = jax.random.fold_in(jax.random.PRNGKey(config.seed), -1 % 2**31)
    if config.meta_init == "sghmc":
        phi0 = sghmc_like_meta_params(k_meta, config.hidden)
    else:
        phi0 = init_meta_params(k_meta, config.hidden)
    strategy = make_strategy(config.es, phi0)
    es_params = strategy.default_params
    template = strategy.init(jax.random.PRNGKey(config.seed), phi0, es_params)
    mngr = checkpoint_manager(out)
    start, es_state = restore_checkpoint(mngr, template) if resume else (0, template)
    rows = [r for r in read_log(out) if r["iteration"] < start] if resume else []
    write_log(out, rows)
    end = config.num_outer if stop_after is None else min(config.num_outer, stop_after)
    seen: set = set()
    t_start = time.perf_counter()
    bar = tqdm(range(start, end), initial=start, total=config.num_outer, desc="meta-train", disable=not progress,
               unit="it")
    for it in bar:
        t0 = time.perf_counter()
        keys = outer_keys(config.seed, it)
        spec = config.tasks.sample(keys.task)
        if config.es.reset_optimizer:
            es_state = es_state.replace(opt_state=strategy.optimizer.init(es_state.mean))
        population, es_state = strategy.ask(keys.perturb, es_state, es_params)
        fitness, inner_s = evaluate_population(spec, population, keys, config.sampler, config.inner,
                                               config.meta_loss_examples)
        raw = np.asarray(fitness, dtype=np.float64)
        finite = np.isfinite(raw)
        shaped = jnp.where(jnp.isfinite(fitness), fitness, config.es.divergence_penalty)
        es_state, _ = strategy.tell(keys.perturb, population, shaped, es_state, es_params)
        mean = np.asarray(es_state.mean)
        if not np.all(np.isfinite(mean)):
            raise FloatingPointError(f"meta-parameters became non-finite at iteration {it}")
        half = config.es.population // 2
        row = {
            "iteration": it,
            "task": spec.name,
            "meta_loss": float(np.mean(raw[finite])) if finite.any() else None,
            "loss_plus": [float(v) for v in raw[:half]],
            "loss_minus": [float(v) for v in raw[half:]],
            "divergent_members": int((~finite).sum()),
            "meta_param_norm": float(np.linalg.norm(mean)),
            "inner_seconds": round(inner_s, 4),
            "seconds": round(time.perf_counter() - t0, 4),
            "first_time_task": spec not in seen,
        }
        seen.add(spec)
        rows.append(row)
        with open(out / LOG, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        if row["meta_loss"] is not None:
            bar.set_postfix(loss=f"{row['meta_loss']:.3f}", task=spec.name)
        done = it + 1
        if done % config.checkpoint_every == 0 or done == config.num_outer:
            save_checkpoint(mngr, done, strategy, es_state, config)
            plot_meta_loss([r for r in rows if r["meta_loss"] is not None], out / PLOT)
    bar.close()
    mngr.close()
    return {
        "iterations": end,
        "seconds": time.perf_counter() - t_start,
        "meta_params": strategy.get_mean(es_state),
        "final_meta_loss": rows[-1]["meta_loss"] if rows else None,
        "output": str(out),
    }


__all__ = ["ConfigError", "RunDirError", "meta_train"]
