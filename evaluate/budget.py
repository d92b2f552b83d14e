"""Budgets: the equal-budget chain schedules of the minibatch methods, the accounting of a run (gradients, XLA
FLOPs, wall seconds) and the equal-wall-time schedules of `budget="seconds"`.

Minibatch methods share G = cfg.num_steps minibatch gradient evaluations of B = cfg.batch_size examples:
  * a single chain keeps K = cfg.num_samples states `thinning` updates apart, the last after update G
    (`single_chain_schedule`; default thinning cfg.sample_thinning);
  * an ensemble runs K members of G/K updates each and keeps every member's last state (`member_schedule`).
Full-batch methods (every gradient over all N training examples) have their own budgets.
epochs = example-gradients / N makes the two kinds comparable.

With cfg.budget == "seconds" every minibatch method gets the same wall time instead (`seconds_num_steps`,
`with_num_steps`): its seconds per update are measured once after compilation (a probe run, Run.probe) and
its G set so that G × seconds/update ≈ cfg.budget_seconds; K is unchanged, a fixed thinning scales with G.

FLOPs per update (`step_flops`): XLA's cost analysis of one compiled update (`jax.jit(kernel).lower(...)
.compile().cost_analysis()["flops"]`) on one minibatch, so the work of a learned sampler's meta-model counts
besides the gradient.  XLA counts the arithmetic of its own HLO ops; library calls it does not see into (e.g. a
LAPACK Cholesky on CPU) count 0.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from l2e.chains import ChainSchedule

__all__ = ["BUDGET_MODES", "FLOPS_NOTE", "PROBE_NOTE", "budget_note", "check_sample_memory", "epochs",
           "example_grads", "flops_of",
           "gradient_label", "member_schedule", "seconds_num_steps", "single_chain_schedule", "step_flops",
           "with_num_steps"]

BUDGET_MODES = ("gradients", "seconds")


def check_sample_memory(cfg, tasks) -> None:
    """Refuse a configuration whose kept samples of one run would not fit the resource limit
    (cli.limits.MAX_SAMPLE_BYTES: num_samples float32 copies of each task's parameters), before anything runs.

    Args:
      cfg: the EvalConfig.
      tasks: the built tasks (their parameter shapes are found abstractly: nothing is allocated).
    Returns:
      None.
    Raises:
      ConfigError: above the limit.
    """
    import jax

    from cli.limits import MAX_SAMPLE_BYTES
    from base.io import ConfigError

    for name, task in zip(cfg.task_names(), tasks):
        shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
        size = cfg.num_samples * 4 * sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
        if size > MAX_SAMPLE_BYTES:
            raise ConfigError(f"task {name}: num_samples={cfg.num_samples} copies of its parameters take {size:.3g} "
                              f"bytes, more than the limit of {MAX_SAMPLE_BYTES:.3g} (a resource limit)")
FLOPS_NOTE = ("flops_per_step: XLA cost analysis (jax.jit(kernel).lower(...).compile().cost_analysis()['flops']) of "
              "one update on one minibatch, the sampler's meta-model included; library calls XLA does not see into "
              "(e.g. a CPU Cholesky) count 0; None for the full-batch methods (not measured)")

PROBE_NOTE = ("seconds_per_step: median over 3 repeats of the wall time of n ≥ 10 chained calls (about 0.25 s) of "
              "the method's compiled chunk (after compilation and one warm-up call; its first grid point) divided "
              "by their updates, on this machine")


def single_chain_schedule(cfg, thinning: int | None = None) -> ChainSchedule:
    """One chain of G updates keeping K states `thinning` (default cfg.sample_thinning) updates apart."""
    thin = cfg.sample_thinning if thinning is None else thinning
    return ChainSchedule(cfg.num_steps, cfg.num_samples, thin, cfg.batch_size, cfg.chunk)


def member_schedule(cfg) -> ChainSchedule:
    """One ensemble member: G/K updates, its last state kept."""
    steps = cfg.num_steps // cfg.num_samples
    return ChainSchedule(steps, 1, steps, cfg.batch_size, cfg.chunk)


def example_grads(res, data_size: int) -> int:
    """Per-example gradients of a MethodResult: grad_evals × N (full batch) or × B (minibatch)."""
    per = data_size if res.gradient == "full-batch" else res.batch_size
    return int(res.grad_evals) * int(per)


def epochs(res, data_size: int) -> float:
    """Per-example gradients of a MethodResult / N."""
    return example_grads(res, data_size) / data_size


def gradient_label(res, data_size: int) -> str:
    """"full-batch (N=…)" or "minibatch (B=…)"."""
    return f"full-batch (N={data_size})" if res.gradient == "full-batch" else f"minibatch (B={res.batch_size})"


def budget_note(shared: list[str], own: list[str], mode: str = "gradients") -> str:
    """The report's budget sentence for the registered minibatch (`shared`) and full-batch (`own`) methods."""
    what = ("the budget of G = num_steps minibatch gradient evaluations" if mode == "gradients" else
            "the wall-time budget budget_seconds: each method's G = budget_seconds / its measured seconds per "
            "update (measured once after compilation; time_budget in its entry), K unchanged, a fixed thinning "
            "scaled with G")
    return (f"minibatch methods ({', '.join(shared)}) share {what}; {' and '.join(own)} use full-batch gradients "
            "and their own budgets (settings.<method>), after a deep-ensemble warm start whose cost is recorded in "
            "hyperparameters.warm_start; 'epochs' = example-gradients / N makes the budgets comparable")


# --------------------------------------------------------------------------- FLOPs
def flops_of(compiled) -> float | None:
    """The "flops" entry of a compiled computation's cost analysis (a dict, or a list of one dict per
    computation in some jax versions); None if unavailable or negative (unknown)."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # NotImplementedError / runtime errors on backends without cost analysis
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    if not isinstance(cost, dict) or cost.get("flops") is None:
        return None
    flops = float(cost["flops"])
    return flops if math.isfinite(flops) and flops >= 0 else None


def step_flops(kernel: Callable, *args: Any) -> float | None:
    """FLOPs of one call `kernel(*args)` compiled on its own (FLOPS_NOTE)."""
    import jax

    return flops_of(jax.jit(kernel).lower(*args).compile())


# --------------------------------------------------------------------------- wall-time budgets
def with_num_steps(cfg, num_steps: int):
    """`cfg` with G = num_steps (K unchanged) and, when cfg.thinning is fixed, the thinning scaled by
    num_steps / cfg.num_steps (a multiple of cfg.chunk when it is at least that, and so that the K samples fit);
    thinning None stays None (G // (2K))."""
    thinning = cfg.thinning
    if thinning is not None:
        t = thinning * num_steps / cfg.num_steps
        t = max(cfg.chunk, round(t / cfg.chunk) * cfg.chunk) if t >= cfg.chunk else max(1, round(t))
        while t > 1 and (cfg.num_samples - 1) * t >= num_steps:
            t -= 1
        thinning = t
    return dataclasses.replace(cfg, num_steps=int(num_steps), thinning=thinning)


def seconds_num_steps(cfg, seconds_per_step: float, valid: Callable[[Any], bool] = lambda c: True,
                      search: int = 64) -> int:
    """G for a wall-time budget: the multiple of q = 2·K·chunk nearest to cfg.budget_seconds / seconds_per_step
    (at least q) for which `with_num_steps(cfg, G)` is a valid config and `valid` of it holds (e.g. the
    method's schedule can be built); q keeps every sample step a multiple of the chunk (the measured chunk stays
    the one that runs)."""
    if not seconds_per_step > 0 or not math.isfinite(seconds_per_step):
        raise ValueError(f"measured seconds per step must be positive, got {seconds_per_step}")
    q = 2 * cfg.num_samples * cfg.chunk
    j = max(1, round(cfg.budget_seconds / seconds_per_step / q))
    for cand in sorted(range(max(1, j - search), j + search + 1), key=lambda c: (abs(c - j), c)):
        try:
            if valid(with_num_steps(cfg, cand * q)):
                return cand * q
        except ValueError:  # ConfigError: this G does not fit the config / the method's schedule
            continue
    raise ValueError(f"no valid number of steps near {j * q} for the wall-time budget {cfg.budget_seconds} s")
