"""The leaderboard's numbers, pure functions of per-task curve results (evaluate.curve.run.curve_task's dict).

Definitions (docs/evaluation.md, "Leaderboard"):

- A row is one curve row (a method at chain allocation M: "sghmc", "sghmc@M=10") × one tuning choice ("oracle",
  "validation"); its key is "<curve row>/<choice>".
- A (task, seed) pair is solved by a row when its TV and its energy distance both reach FLOOR_FACTOR × the K-draw
  floor with the dispersion ratios in band (the curve's reach criterion: `to_floor`'s per-seed gradients, not None);
  its pair cost is the larger of the two gradients-to-floor, +inf when unsolved. Tuning-inclusive: + the row's
  tuning gradients on that task (grid points × tuning budget, the warm start's grid included).
- A row's task cost: the mean of its pair costs over the task's seeds when it solves every seed, else +inf (a row
  solves a task only on every seed, as the curve report's bar).
- The per-task best: the smallest task cost over the rows (rule "every seed"). When no row solves every seed, the
  best shown is the smallest pair cost (rule "one pair"); such a task has no ratios (every row's task cost is +inf)
  and is left out of the median ratio; when no pair is solved at all, there is no best (rule None).
- A row's ratio on a task: its task cost ÷ the task's best (+inf when it does not solve the task); its median ratio:
  the median over the tasks with an "every seed" best, +inf counted as larger than any number; reported (a number)
  only when finite, else None ("—"). The same with the tuning-inclusive costs (their own per-task best).
- Reach rate: solved pairs ÷ all pairs (every task × seed, including pairs no row solves).
- Rank stability: the tasks with an "every seed" best resampled with replacement BOOTSTRAP_RESAMPLES times (numpy
  default_rng(BOOTSTRAP_SEED)); in each resample every row's median ratio over the drawn tasks; the probability
  that a row's is finite and ≤ WITHIN × the smallest row's of that resample.
- Performance profile (Dolan–Moré), per tuning choice among that choice's rows: for every (task, seed) pair r =
  pair cost ÷ the smallest pair cost of those rows on the pair (+inf when unsolved, and for every row on a pair no row
  solves); ρ(τ) = the fraction of all pairs with r ≤ τ. Tuning-exclusive and tuning-inclusive costs.
- Distance to the floor (per budget G, `floor_distances`): a run's max(TV ÷ the task's TV floor, E² ÷ its E² floor)
  (the K-draw floors' medians; 1 = at the floor; +inf where the run has no TV or energy: every chain divergent); per
  row and G, over the (task, seed) pairs with a run at G, their geometric mean (+inf when any is) and median. A
  continuous companion to the reach, which a K-draw estimate near the floor crosses at some budgets and not others.
- T_kin off: a row's runs whose mean kinetic temperature over the window (a run's "t_kin") lies outside
  T·(1 ± T_KIN_TOLERANCE), T = 1 (the curves sample the posterior), out of its runs that report one (samplers with
  a momentum); every budget counts.
- T_kin by distance (`t_kin_by_distance`): the same runs by their distance to the floor (ARRIVAL_BOUNDS: at most
  FLOOR_FACTOR ×, up to 2 ×, beyond): whether a row's kinetic temperature is right where its draws have arrived,
  apart from the transient's (chains still descending carry the potential energy they shed as heat).
"""
from __future__ import annotations

import math

import numpy as np

from evaluate.curve.fidelity import FLOOR_FACTOR

__all__ = ["ARRIVAL_BOUNDS", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CHOICES", "FAMILIES", "PROFILE_TAUS",
           "T_KIN_TOLERANCE", "WITHIN", "bootstrap_within", "floor_distances", "leaderboard", "median_ratio",
           "pair_costs", "profile", "profile_ratios", "row_key", "t_kin_by_distance", "t_kin_off", "task_best",
           "task_cost"]

CHOICES = ("oracle", "validation")
FAMILIES = ("linear", "mlp", "cnn", "classification", "regression", "large-n")
"""The family breakdown's columns (tags of tasks.zoo.families)."""
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
WITHIN = 1.25
"""Rank stability: a row's median ratio within this factor of the resample's best row's."""
PROFILE_TAUS = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0)
"""The τ at which leaderboard.json records each performance profile."""
T_KIN_TOLERANCE = 0.1
"""T_kin off: |t_kin − 1| > this (the tuning-free criterion, T_kin within 10 % of T)."""
ARRIVAL_BOUNDS = (FLOOR_FACTOR, 2.0)
"""T_kin by distance: the distances to the floor that bound its classes (at most FLOOR_FACTOR × the floor, the
reach's threshold: arrived; up to 2 ×: near; beyond: still travelling)."""
INF = math.inf


def t_kin_off(t_kin: float) -> bool:
    """Whether a run's T_kin lies outside 1 ± T_KIN_TOLERANCE (T = 1; a non-finite T_kin is off)."""
    return not abs(t_kin - 1.0) <= T_KIN_TOLERANCE


def row_key(row_name: str, choice: str) -> str:
    """The leaderboard row of a curve row and a tuning choice: "<curve row>/<choice>", e.g. "sghmc@M=10/oracle"."""
    return f"{row_name}/{choice}"


def _seeds(task: dict) -> list[str]:
    """The task's seeds (as curve.json keys them), in the order of their first appearance over its rows."""
    seen: dict[str, None] = {}
    for row in task["methods"].values():
        for choice in row["choices"].values():
            seen.update(dict.fromkeys(choice["seeds"]))
    return list(seen)


def pair_costs(task: dict) -> dict[str, dict]:
    """{row key: {"costs": {seed: pair cost (+inf unsolved)}, "tuning": tuning gradients, "divergent": divergent
    chains over every run, "runs": runs, "t_kin_off": runs with T_kin off, "t_kin_runs": runs reporting T_kin}} of
    one task's curve result (module docstring)."""
    seeds = _seeds(task)
    out = {}
    for name, row in task["methods"].items():
        for choice in CHOICES:
            c = row["choices"].get(choice)
            if c is None:
                continue
            order = list(c["seeds"])
            tv, e2 = c["to_floor"]["tv"]["per_seed"], c["to_floor"]["energy"]["per_seed"]
            costs = {s: INF for s in seeds}
            for s, a, b in zip(order, tv, e2):
                if a is not None and b is not None:
                    costs[s] = float(max(a, b))
            points = [p for pts in c["seeds"].values() for p in pts]
            t_kin = [p["t_kin"] for p in points if p.get("t_kin") is not None]
            out[row_key(name, choice)] = {"costs": costs, "tuning": float(row["tuning"].get("gradients") or 0),
                                          "divergent": int(sum(p.get("divergent_chains") or 0 for p in points)),
                                          "runs": len(points), "t_kin_runs": len(t_kin),
                                          "t_kin_off": sum(t_kin_off(t) for t in t_kin)}
    return out


def _runs_with_distance(tasks: dict[str, dict], key: str):
    """(run, distance) over row `key`'s runs on the tasks with floors (`floor_distances`)."""
    name, choice = key.rsplit("/", 1)
    for task in tasks.values():
        c = task["methods"].get(name, {}).get("choices", {}).get(choice)
        floors = task.get("floors") or {}
        if c is None or "tv" not in floors or "energy" not in floors:  # no floors: no distance
            continue
        tv, e2 = floors["tv"]["median"], floors["energy"]["median"]
        for p in (p for pts in c["seeds"].values() for p in pts):
            ok = p.get("tv") is not None and p.get("energy") is not None
            yield p, (max(p["tv"] / tv, p["energy"] / e2) if ok else INF)


def floor_distances(tasks: dict[str, dict], key: str) -> list[dict]:
    """[{"budget", "pairs", "geomean", "median"}] of row `key` (module docstring), by budget ascending: over the
    (task, seed) pairs with a run at that budget (tasks: {task name: curve_task's result}); geomean and median are
    None where infinite."""
    by: dict[int, list[float]] = {}
    for p, dist in _runs_with_distance(tasks, key):
        by.setdefault(int(p["budget"]), []).append(dist)
    out = []
    for g in sorted(by):
        v = np.asarray(by[g], np.float64)
        geo = float(np.exp(np.mean(np.log(v)))) if np.all(np.isfinite(v)) else None
        out.append({"budget": g, "pairs": int(v.size), "geomean": geo, "median": median_ratio(v)})
    return out


def t_kin_by_distance(tasks: dict[str, dict], key: str, bounds=ARRIVAL_BOUNDS) -> list[dict]:
    """[{"within", "runs", "t_kin_off"}] of row `key` (module docstring, "T_kin by distance"): its runs that report
    T_kin, by their distance to the floor — at most bounds[0], then each next bound, then beyond the last ("within"
    None) —, and of those the runs with T_kin off; [] where no run reports T_kin or the tasks have no floors."""
    edges = tuple(bounds) + (INF,)
    runs, off = [0] * len(edges), [0] * len(edges)
    for p, dist in _runs_with_distance(tasks, key):
        if p.get("t_kin") is None:
            continue
        i = next(i for i, e in enumerate(edges) if dist <= e)
        runs[i] += 1
        off[i] += t_kin_off(p["t_kin"])
    if not sum(runs):
        return []
    return [{"within": None if math.isinf(e) else float(e), "runs": n, "t_kin_off": o}
            for e, n, o in zip(edges, runs, off)]


def task_cost(costs: dict[str, float], add: float = 0.0) -> float:
    """A row's task cost: the mean pair cost over the seeds (+ `add`, the tuning gradients) when every seed is
    solved, else +inf."""
    values = list(costs.values())
    if not values or not all(math.isfinite(v) for v in values):
        return INF
    return float(np.mean(values)) + add


def task_best(rows: dict[str, dict], tuning: bool = False) -> dict:
    """{"rule", "row", "cost", "seed"} of one task (`pair_costs`' dict): rule "every seed" — the row of the smallest
    task cost (ties: the first key in sorted order); else "one pair" — the smallest pair cost (its row and seed);
    else rule None. tuning: the tuning-inclusive costs."""
    task = {k: task_cost(r["costs"], r["tuning"] if tuning else 0.0) for k, r in sorted(rows.items())}
    finite = {k: v for k, v in task.items() if math.isfinite(v)}
    if finite:
        key = min(finite, key=lambda k: (finite[k], k))
        return {"rule": "every seed", "row": key, "cost": finite[key], "seed": None}
    pairs = [(c + (r["tuning"] if tuning else 0.0), k, s) for k, r in sorted(rows.items())
             for s, c in r["costs"].items() if math.isfinite(c)]
    if pairs:
        cost, key, seed = min(pairs)
        return {"rule": "one pair", "row": key, "cost": cost, "seed": seed}
    return {"rule": None, "row": None, "cost": None, "seed": None}


def median_ratio(ratios) -> float | None:
    """The median of `ratios` (+inf counted as larger than any number); None when empty or not finite."""
    values = np.sort(np.asarray(list(ratios), np.float64))
    if values.size == 0:
        return None
    n = values.size
    mid = values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])
    return float(mid) if math.isfinite(mid) else None


def bootstrap_within(ratios: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                     within: float = WITHIN) -> np.ndarray:
    """Per row, the probability that its median ratio over a bootstrap resample of the tasks (columns of `ratios`,
    rows × tasks, +inf allowed) is finite and ≤ `within` × the smallest median of that resample (module docstring).
    All zeros without tasks."""
    rows, n = ratios.shape
    if n == 0 or rows == 0:
        return np.zeros(rows)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    drawn = np.sort(ratios[:, idx], axis=2)  # rows × resamples × n
    med = drawn[:, :, n // 2] if n % 2 else 0.5 * (drawn[:, :, n // 2 - 1] + drawn[:, :, n // 2])
    best = med.min(axis=0)
    ok = np.isfinite(med) & (med <= within * best[None, :])
    return ok.mean(axis=1)


def profile_ratios(costs: np.ndarray) -> np.ndarray:
    """The performance ratios of costs (rows × pairs, +inf unsolved): cost ÷ the pair's smallest cost, +inf where
    the row does not solve the pair and for every row on a pair no row solves."""
    if costs.size == 0:
        return costs.copy()
    best = costs.min(axis=0)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(best)[None, :] & np.isfinite(costs), costs / best[None, :], INF)


def profile(costs: np.ndarray, taus) -> np.ndarray:
    """Dolan–Moré performance profile: costs (rows × pairs, +inf unsolved) -> ρ (rows × len(taus)), ρ[i, j] = the
    fraction of pairs whose ratio (`profile_ratios`) is ≤ taus[j]."""
    rows, pairs = costs.shape
    if pairs == 0:
        return np.zeros((rows, len(taus)))
    r = profile_ratios(costs)
    return np.asarray([[float(np.mean(r[i] <= t)) for t in taus] for i in range(rows)])


def _sorted_ratios(costs: np.ndarray) -> list[list]:
    """Per row, its profile ratios sorted, +inf as None (what the profile plot draws its steps from)."""
    return [[float(v) if math.isfinite(v) else None for v in np.sort(r)] for r in profile_ratios(costs)]


def _ratios(per_task: dict[str, dict], keys: list[str], tuning: bool) -> tuple[list[str], np.ndarray]:
    """(tasks with an "every seed" best, ratios rows × those tasks), tuning-inclusive or not."""
    tasks = [t for t, rows in per_task.items() if task_best(rows, tuning)["rule"] == "every seed"]
    out = np.full((len(keys), len(tasks)), INF)
    for j, t in enumerate(tasks):
        best = task_best(per_task[t], tuning)["cost"]
        for i, k in enumerate(keys):
            r = per_task[t].get(k)
            if r is not None:
                out[i, j] = task_cost(r["costs"], r["tuning"] if tuning else 0.0) / best
    return tasks, out


def _reach(per_task: dict[str, dict], key: str, tasks) -> tuple[int, int]:
    """(solved pairs, all pairs) of a row over `tasks`."""
    solved = pairs = 0
    for t in tasks:
        seeds = {s for r in per_task[t].values() for s in r["costs"]}
        costs = per_task[t].get(key, {"costs": {}})["costs"]
        pairs += len(seeds)
        solved += sum(1 for s in seeds if math.isfinite(costs.get(s, INF)))
    return solved, pairs


def _families(per_task, families, key, i, ratio_tasks, ratios) -> dict:
    """{family: {"tasks", "pairs", "solved", "reach", "median_ratio"}} of row `key` (index i of `ratios`)."""
    out = {}
    for fam in FAMILIES:
        tasks = [t for t in per_task if fam in families.get(t, ())]
        if not tasks:
            continue
        solved, pairs = _reach(per_task, key, tasks)
        cols = [j for j, t in enumerate(ratio_tasks) if t in tasks]
        out[fam] = {"tasks": len(tasks), "pairs": pairs, "solved": solved, "reach": solved / pairs if pairs else None,
                    "median_ratio": median_ratio(ratios[i, cols])}
    return out


def _profiles(per_task: dict[str, dict], keys: list[str], taus) -> dict:
    """{choice: {"rows", "pairs", "tau", "rho", "rho_tuning", "ratios", "ratios_tuning"}}: the performance profiles
    of each choice's rows among themselves (ρ at `taus`; each row's sorted ratios, +inf as None)."""
    pairs = [(t, s) for t, rows in per_task.items() for s in sorted({s for r in rows.values() for s in r["costs"]})]
    out = {}
    for choice in CHOICES:
        mine = [k for k in keys if k.endswith("/" + choice)]
        if not mine:
            continue
        cost = np.full((len(mine), len(pairs)), INF)
        tuned = np.full((len(mine), len(pairs)), INF)
        for i, k in enumerate(mine):
            for j, (t, s) in enumerate(pairs):
                r = per_task[t].get(k)
                if r is not None:
                    cost[i, j] = r["costs"].get(s, INF)
                    tuned[i, j] = cost[i, j] + r["tuning"]
        out[choice] = {"rows": mine, "pairs": len(pairs), "tau": list(taus), "rho": profile(cost, taus).tolist(),
                       "rho_tuning": profile(tuned, taus).tolist(), "ratios": _sorted_ratios(cost),
                       "ratios_tuning": _sorted_ratios(tuned)}
    return out


def leaderboard(tasks: dict[str, dict], families: dict[str, tuple], resamples: int = BOOTSTRAP_RESAMPLES,
                seed: int = BOOTSTRAP_SEED, taus=PROFILE_TAUS) -> dict:
    """The leaderboard of per-task curve results (module docstring).

    Args:
      tasks: {task name: curve_task's result ("floors", "methods")}.
      families: {task name: family tags (tasks.zoo.families)}.
      resamples, seed: the rank-stability bootstrap's resamples and numpy seed.
      taus: the τ at which the performance profiles are recorded.
    Returns:
      {"rows": [row dicts, sorted by reach rate (descending), then median ratio (none last), then key], "per_task":
      {task: {"best", "best_tuning", "families", "seeds"}}, "ratio_tasks", "ratio_tasks_tuning", "profiles",
      "bootstrap"}. A row dict: "key", "row", "method", "chains", "choice", "solved", "pairs", "reach",
      "median_ratio", "median_ratio_tuning", "within_best", "divergent_chains", "runs", "t_kin_off", "t_kin_runs",
      "families", "ratios" ({task: ratio or None}), "distance" (`floor_distances`), "t_kin_distance"
      (`t_kin_by_distance`).
    """
    per_task = {t: pair_costs(r) for t, r in tasks.items()}
    meta = {row_key(n, c): (n, r["method"], r["chains"], c) for t in tasks.values() for n, r in t["methods"].items()
            for c in CHOICES if c in r["choices"]}
    keys = sorted(meta)
    ratio_tasks, ratios = _ratios(per_task, keys, False)
    tuned_tasks, tuned = _ratios(per_task, keys, True)
    within = bootstrap_within(ratios, resamples, seed)
    rows = []
    for i, k in enumerate(keys):
        solved, pairs = _reach(per_task, k, per_task)
        name, method, chains, choice = meta[k]
        rows.append({"key": k, "row": name, "method": method, "chains": chains, "choice": choice, "solved": solved,
                     "pairs": pairs, "reach": solved / pairs if pairs else 0.0,
                     "median_ratio": median_ratio(ratios[i]), "median_ratio_tuning": median_ratio(tuned[i]),
                     "within_best": float(within[i]) if ratio_tasks else None,
                     "divergent_chains": sum(p[k]["divergent"] for p in per_task.values() if k in p),
                     "runs": sum(p[k]["runs"] for p in per_task.values() if k in p),
                     **{f: sum(p[k].get(f, 0) for p in per_task.values() if k in p)
                        for f in ("t_kin_off", "t_kin_runs")},
                     "families": _families(per_task, families, k, i, ratio_tasks, ratios),
                     "ratios": {t: (float(v) if math.isfinite(v) else None) for t, v in zip(ratio_tasks, ratios[i])},
                     "distance": floor_distances(tasks, k), "t_kin_distance": t_kin_by_distance(tasks, k)})
    rows.sort(key=lambda r: (-r["reach"], INF if r["median_ratio"] is None else r["median_ratio"], r["key"]))
    return {"rows": rows, "ratio_tasks": ratio_tasks, "ratio_tasks_tuning": tuned_tasks,
            "per_task": {t: {"best": task_best(p), "best_tuning": task_best(p, True),
                             "families": list(families.get(t, ())), "seeds": len({s for r in p.values()
                                                                                 for s in r["costs"]})}
                         for t, p in per_task.items()},
            "profiles": _profiles(per_task, keys, taus),
            "bootstrap": {"resamples": resamples, "seed": seed, "within": WITHIN, "tasks": len(ratio_tasks)}}
