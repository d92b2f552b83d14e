"""The meta-training loop: outer steps (meta_train.outer, through the estimator table meta_train.estimators) into a
run directory (meta_train.run_dir).

A resumed run computes exactly what an uninterrupted one does, for every estimator and at any iteration (mid-unroll
too): the randomness of iteration t is fold_in(seed, t) and the estimator's whole state (φ, Adam state, perturbation
accumulators, chain states) is in the checkpoint. Each log row also holds "first_time_task": whether this process
had not run the task before (that row's seconds include building and compiling its programs). Fault injection
($L2E_FAULT, meta_train.faults) kills the process at named points for the reliability tests.
"""
from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from cli import held_warnings
from l2e.checkpoint import KEEP_CHECKPOINTS, CheckpointError, load_meta_params
from meta_train.config import ConfigError, MetaTrainConfig
from meta_train.es import ProgramCache, reference_batch
from meta_train.faults import fault_plan
from meta_train.objectives import OBJECTIVES
from meta_train.outer import make_estimator, outer_step
from meta_train.run_dir import RunDir, RunDirError

PLOT_EVERY_S = 60.0
"""The meta-loss plot is redrawn at a checkpoint at most this often, and always when the run stops."""


def check_inputs(config: MetaTrainConfig, cache: ProgramCache) -> None:
    """Load every dataset and build every task of the distribution once (into `cache`), so that bad data
    (missing directory, truncated or mis-shaped files, a CNN on tabular data) is reported before the output
    directory is touched; for a reference objective ("fidelity") also load and check every task's NUTS reference and
    build its reference target (a task without one, or a regression task, is a ConfigError naming it)."""
    data_dir = config.tasks.data_dir
    if data_dir is not None and not Path(data_dir).is_dir():
        raise ConfigError(f"tasks.data_dir does not exist or is not a directory: {data_dir}")
    for spec in config.tasks.specs():
        cache.task(spec)
    if OBJECTIVES[config.objective.kind].reference:  # every task needs its reference (classification only)
        for spec in config.tasks.specs():
            reference_batch(cache, spec, config.objective)


def initial_meta_params(config: MetaTrainConfig):
    """φ₀ from fold_in(seed, 2³¹ − 1): the registry entry's `init_meta_params` of the sampler being meta-trained with
    config.hidden and config.meta_init ("sghmc": the step equals its hand-designed counterpart; "random"); or, with
    config.init_from, that checkpoint's meta-parameters (fine-tuning): ConfigError when it is unreadable, of another
    sampler kind or shaped unlike φ₀."""
    k_meta = jax.random.fold_in(jax.random.PRNGKey(config.seed), -1 % 2**31)
    phi0 = config.learned_sampler.init_meta_params(k_meta, config.hidden, config.meta_init)
    if config.init_from is None:
        return phi0
    try:
        phi, sampler, _ = load_meta_params(config.init_from)
    except CheckpointError as e:
        raise ConfigError(f"init_from: {str(e).splitlines()[0]}") from None
    shapes = lambda t: jax.tree.map(lambda a: tuple(np.shape(a)), t)  # noqa: E731
    if type(sampler) is not type(getattr(config, config.learned_sampler.config_group)) or shapes(phi) != shapes(phi0):
        raise ConfigError(f"init_from {config.init_from!r} is not a {config.sampler_kind} checkpoint with hidden "
                          f"{config.hidden}")
    return jax.tree.map(lambda a, b: jnp.asarray(a, jnp.asarray(b).dtype), phi, phi0)


class _Loop:
    """The state of the outer loop of one process: estimator, its initial state, log rows, run directory."""

    def __init__(self, config: MetaTrainConfig, run: RunDir, fault, cache: ProgramCache):
        self.config, self.run, self.fault, self.cache = config, run, fault, cache
        self.estimator = make_estimator(config, initial_meta_params(config))
        self.key = jax.random.PRNGKey(config.seed)
        self.initial = self.estimator.init(self.key, cache)
        self.seen: set = set()
        self.last_plot = time.perf_counter()

    def template(self, step: int):
        """The state a checkpoint of step `step` is restored into (the estimator's state shaped for that step)."""
        return self.initial if step == 0 else self.estimator.init(self.key, self.cache, step)

    def legacy(self):
        """(template, convert) of the state layout older checkpoints hold, or None (for RunDir.resume)."""
        template = self.estimator.legacy_template()
        if template is None:
            return None
        return template, lambda old, step: self.estimator.from_legacy(old, self.key, self.cache, step)

    def iteration(self, it: int, end: int, rows: list[dict], es_state):
        """Run outer iteration `it`; log it and checkpoint when due (writer only). Returns the ES state."""
        config, fault, run = self.config, self.fault, self.run
        fault.hit("before_iteration", it)
        inner = (lambda _n: fault.hit("mid_inner", it)) if fault.armed("mid_inner", it) else None
        step = outer_step(self.estimator, es_state, it, self.cache, progress=inner)
        rows.append({**step.row, "first_time_task": step.spec not in self.seen})
        self.seen.add(step.spec)
        if not run.writer:
            return step.es_state
        run.append(rows[-1], fault)
        fault.hit("after_log", it)
        done = it + 1
        if done % config.checkpoint_every == 0 or done == config.num_outer:
            run.save(done, step.es_state, self.estimator.mean(step.es_state), config, fault)
            fault.hit("after_checkpoint", done)
            if done < end and time.perf_counter() - self.last_plot >= PLOT_EVERY_S:  # rendering costs ~0.5 s
                run.plot(rows)
                self.last_plot = time.perf_counter()
        return step.es_state


def _train(loop: _Loop, resume: bool, progress: bool, stop_after: int | None) -> dict:
    config, run = loop.config, loop.run
    start, es_state, rows = run.resume(loop.template, resume, loop.legacy())
    end = config.num_outer if stop_after is None else min(config.num_outer, stop_after)
    t_start = time.perf_counter()
    bar = tqdm(range(start, end), initial=start, total=config.num_outer, desc="meta-train", disable=not progress,
               unit="it")
    for it in bar:
        es_state = loop.iteration(it, end, rows, es_state)
        if rows[-1]["meta_loss"] is not None:
            bar.set_postfix(loss=f"{rows[-1]['meta_loss']:.3f}", task=rows[-1]["task"])
    bar.close()
    if run.writer and (start < end or not run.has_plot()):
        run.plot(rows)
    return {
        "iterations": end,
        "seconds": time.perf_counter() - t_start,
        "meta_params": loop.estimator.mean(es_state),
        "final_meta_loss": rows[-1]["meta_loss"] if rows else None,
        "output": str(run.out),
    }


def meta_train(config: MetaTrainConfig, out: str | Path, resume: bool = False, overwrite: bool = False,
               progress: bool = True, stop_after: int | None = None, keep_checkpoints: int = KEEP_CHECKPOINTS,
               cache: ProgramCache | None = None) -> dict:
    """Run (or resume) meta-training into `out`; returns a summary dict (iterations, seconds, meta_params,
    final_meta_loss, output).

    stop_after: stop once this many outer iterations are done (for tests of resumption).
    keep_checkpoints: checkpoint steps kept, the newest (0: all, for `python -m evaluate select`).
    cache: a ProgramCache whose tasks and compiled programs this run reuses (several runs in one process: tests,
    benches); default a new one. The numbers do not depend on it.
    """
    if isinstance(keep_checkpoints, bool) or not isinstance(keep_checkpoints, int) or keep_checkpoints < 0:
        raise ConfigError(f"keep_checkpoints must be an integer ≥ 0 (0 keeps all), got {keep_checkpoints!r}")
    fault = fault_plan()
    cache = ProgramCache() if cache is None else cache
    with held_warnings():  # a refused input prints its one error line alone (cli.guard)
        check_inputs(config, cache)
        run = RunDir(out, keep=keep_checkpoints)
        loop = _Loop(config, run, fault, cache)  # builds φ₀ and the ES state: a bad model fails before `out` is touched
    run.open(config, resume, overwrite)
    try:
        return _train(loop, resume, progress, stop_after)
    except (KeyboardInterrupt, OSError):
        raise  # the run continues with --resume
    except BaseException:
        if not resume:
            run.discard()  # failed before its first checkpoint: nothing to resume, no litter
        raise
    finally:
        run.close()


__all__ = ["ConfigError", "RunDirError", "check_inputs", "initial_meta_params", "meta_train"]
