"""Tuning one method on one task: the grid search on inner-validation, its bounded extension at an edge of the
learning-rate grid, the count of what tuning cost, and the per-method budget of a wall-time evaluation.

  * every grid point (Method.points) gets one run of the method's full budget with the tuning keys
    fold_in(task key, 0), scored by `task.score` of its kept samples on the first cfg.tune_examples
    `inner_valid` examples; a run with a divergent chain scores +inf.  The best finite score wins (if none is
    finite: the first grid point).
  * extension (cfg.extend_grid): while the winner's learning rate is the smallest (largest) lr tried so far and
    the grid has ≥ 2 lrs, one more point is run — the winner with its lr divided (multiplied) by the grid's ratio
    at that edge (lrs[1]/lrs[0], resp. lrs[-1]/lrs[-2]) — at most GRID_EXTENSIONS times; it stops as soon as the
    new point does not win.  `Tuning.extended` lists the directions ("down" / "up") in order.
  * with cfg.kinetic_tolerance, a run of a method with Method.kinetic_check whose chains' T_kin leave
    [1 − tol, 1 + tol]·T is ranked behind every run inside the band (KINETIC_PENALTY; listed in
    `Tuning.kinetic_rejected`); with cfg.failure_extensions, when no point scores finitely (or, with the band, none
    is inside it), smaller learning rates are tried (the smallest so far ÷ the grid's ratio) until one is, at most
    that many times (`Tuning.extended` lists them as "rescue").
  * cost: tuning runs, their gradient evaluations and wall seconds (the final run not included).
  * budget="seconds": a minibatch method's seconds per update are measured once by a probe run (Run.probe) of
    its first grid point; every run of it (tuning and final) then uses evaluate.budget.seconds_num_steps.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import numpy as np

from evaluate import budget
from evaluate.methods import get_method, run_method, split_data

__all__ = ["GRID_EXTENSIONS", "KINETIC_PENALTY", "Progress", "Tuning", "hp_label", "kinetic_outside", "method_config",
           "run_keys", "search", "tune", "tune_and_run"]

GRID_EXTENSIONS = 2
"""Most extensions of a learning-rate grid at its edges (cfg.extend_grid)."""
KINETIC_PENALTY = 1e12
"""Added to the score of a point whose T_kin left the band: any point inside the band wins over every point outside
it, and among points outside it the best score wins (as without the band); divergent points stay +inf."""


@dataclasses.dataclass
class Tuning:
    """best: the chosen grid point; scores: {hp_label: score or None (not finite)} in the order tried (empty
    without tuning); extended: extension directions; kinetic_rejected: hp_labels of the points whose T_kin left
    the band (cfg.kinetic_tolerance); runs / grad_evals / seconds: what the tuning runs cost."""

    best: dict
    scores: dict = dataclasses.field(default_factory=dict)
    extended: list = dataclasses.field(default_factory=list)
    kinetic_rejected: list = dataclasses.field(default_factory=list)
    runs: int = 0
    grad_evals: int = 0
    seconds: float = 0.0

    def cost(self) -> dict:
        return {"runs": self.runs, "grad_evals": self.grad_evals, "seconds": self.seconds}


def run_keys(task_key, phase: int):
    """(init key, chain key) of a phase: 0 tuning, 1 the final run."""
    return tuple(jax.random.split(jax.random.fold_in(task_key, phase)))


def hp_label(point: dict) -> str:
    """E.g. "lr=0.03" or "lr=0.03,friction=10" (keys of the report's tuning grid)."""
    names = {"learning_rate": "lr"}
    return ",".join(f"{names.get(k, k)}={v:g}" for k, v in point.items())


class Progress:
    """The tqdm bar's postfix and count (a no-op without a bar)."""

    def __init__(self, bar=None):
        self.bar = bar

    def start(self, task, method: str, point: dict, phase: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{task.spec.name} {method} {hp_label(point)} ({phase})")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)


def _extension(points: list[dict], tried: list[dict], best: dict) -> tuple[str, dict] | None:
    """(direction, next point) when best's lr is an edge of the lrs tried, else None."""
    lrs = sorted({p["learning_rate"] for p in points if "learning_rate" in p})
    if len(lrs) < 2 or "learning_rate" not in best:
        return None
    seen = sorted({p["learning_rate"] for p in tried if "learning_rate" in p})
    lr = best["learning_rate"]
    if lr == seen[0]:
        return "down", {**best, "learning_rate": lr / (lrs[1] / lrs[0])}
    if lr == seen[-1]:
        return "up", {**best, "learning_rate": lr * (lrs[-1] / lrs[-2])}
    return None


def _rescue_ratio(points: list[dict]) -> float:
    lrs = sorted({p["learning_rate"] for p in points})
    return lrs[1] / lrs[0] if len(lrs) > 1 else 3.0


def search(points: list[dict], score: Callable[[dict], float], extend: bool = False,
           max_extensions: int = GRID_EXTENSIONS, rescues: int = 0, acceptable: float = math.inf) -> Tuning:
    """Grid search: score(point) for every point (lower is better; non-finite never wins; ties keep the earlier
    point), then, with `extend`, the bounded edge extension of the module docstring; then, if no score is below
    `acceptable` and the grid has learning rates, up to `rescues` smaller ones (the smallest so far ÷ the grid's
    ratio, the other keys of the first point with the smallest lr), stopping at the first below `acceptable`."""
    tuning = Tuning(points[0])
    best_score, tried = math.inf, []

    def visit(point) -> bool:
        nonlocal best_score
        value = score(point)
        tried.append(point)
        tuning.scores[hp_label(point)] = value if math.isfinite(value) else None
        if value < best_score:
            tuning.best, best_score = point, value
            return True
        return False

    for point in points:
        visit(point)
    while extend and len(tuning.extended) < max_extensions and math.isfinite(best_score):
        step = _extension(points, tried, tuning.best)
        if step is None:
            break
        tuning.extended.append(step[0])
        if not visit(step[1]):
            break
    if rescues and not best_score < acceptable and all("learning_rate" in p for p in points):
        ratio = _rescue_ratio(points)
        point = min(points, key=lambda p: p["learning_rate"])
        for _ in range(rescues):
            point = {**point, "learning_rate": point["learning_rate"] / ratio}
            tuning.extended.append("rescue")
            visit(point)
            if best_score < acceptable:
                break
    return tuning


def kinetic_outside(result, temperature, tolerance: float | None) -> bool:
    """Whether a run's chains' T_kin leave [1 − tolerance, 1 + tolerance]·T (a missing T_kin of a chain counts as
    outside); False without a tolerance, a numeric T or a T_kin record."""
    if tolerance is None or result.t_kin is None or not isinstance(temperature, (int, float)):
        return False
    return any(t is None or not abs(t - temperature) <= tolerance * temperature for t in result.t_kin)


def _score(task, result, labels) -> float:
    """Tuning score: `task.score` of the kept samples; +inf if any chain diverged or nothing is left."""
    if result.divergent_chains or result.num_finite == 0:
        return math.inf
    value = task.score(result.outputs, labels)
    return value if math.isfinite(value) else math.inf


def tune(task, task_key, method: str, cfg, extra: dict, cache, progress: Progress) -> Tuning:
    """`search` over the method's grid on the tuning examples (cfg.extend_grid: with extension)."""
    x, y = split_data(task, "inner_valid")
    tune_split = (x[:cfg.tune_examples], y[:cfg.tune_examples])
    labels = np.asarray(tune_split[1])
    cost = Tuning({})
    m = get_method(method)
    tolerance = cfg.kinetic_tolerance if m.kinetic_check else None

    def score(point):
        progress.start(task, method, point, "tuning")
        res = run_method(method, task, run_keys(task_key, 0), {**point, **extra}, cfg, tune_split, cache)
        cost.runs += 1
        cost.grad_evals += res.grad_evals
        cost.seconds += res.seconds
        progress.done()
        value = _score(task, res, labels)
        temperature = point.get("temperature", extra.get("temperature", m.temperature))
        if math.isfinite(value) and kinetic_outside(res, temperature, tolerance):
            rejected[hp_label(point)] = value
            return value + KINETIC_PENALTY
        return value

    rejected: dict[str, float] = {}  # label -> its validation score, shown in the report without the penalty
    points = m.points(getattr(cfg.settings, method))
    tuning = search(points, score, extend=cfg.extend_grid, rescues=cfg.failure_extensions,
                    acceptable=KINETIC_PENALTY / 2 if tolerance is not None else math.inf)
    tuning.scores.update(rejected)  # exactly: value + 1e12 − 1e12 keeps only ~1e-4 of it in float64
    tuning.kinetic_rejected = list(rejected)
    tuning.runs, tuning.grad_evals, tuning.seconds = cost.runs, cost.grad_evals, cost.seconds
    return tuning


def method_config(task, task_key, method: str, cfg, extra: dict, cache) -> tuple:
    """(config the method's runs use, time-budget record or None): cfg itself, or under budget="seconds" for a
    minibatch method cfg with G from its probed seconds per update (evaluate.budget.seconds_num_steps)."""
    m = get_method(method)
    if cfg.budget != "seconds" or m.full_batch:
        return cfg, None
    point = m.points(getattr(cfg.settings, method))[0]
    x, y = split_data(task, "inner_valid")
    probe = run_method(method, task, run_keys(task_key, 0), {**point, **extra}, cfg,
                       (x[:cfg.tune_examples], y[:cfg.tune_examples]), cache, probe=True)
    sps = probe.measured_seconds_per_step

    def valid(c) -> bool:
        m.validate(c, getattr(c.settings, method))
        return True

    steps = budget.seconds_num_steps(cfg, sps, valid)
    mcfg = budget.with_num_steps(cfg, steps)
    record = {"mode": "seconds", "budget_seconds": cfg.budget_seconds, "seconds_per_step": sps,
              "num_steps": steps, "thinning": mcfg.sample_thinning,
              "planned_seconds": steps * sps, "measured": budget.PROBE_NOTE}
    return mcfg, record


def tune_and_run(task, task_key, method: str, cfg, extra: dict, cache, progress: Progress) -> tuple:
    """(final MethodResult on test, Tuning, time-budget record or None)."""
    m = get_method(method)
    mcfg, time_budget = method_config(task, task_key, method, cfg, extra, cache)
    if cfg.tune and m.tuned:
        tuning = tune(task, task_key, method, mcfg, extra, cache, progress)
    else:
        tuning = Tuning(m.points(getattr(cfg.settings, method))[0])
    progress.start(task, method, tuning.best, "final")
    res = run_method(method, task, run_keys(task_key, 1), {**tuning.best, **extra}, mcfg, "test", cache)
    progress.done()
    return res, tuning, time_budget
