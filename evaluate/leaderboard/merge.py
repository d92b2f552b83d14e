"""`python -m evaluate leaderboard --merge DIR --merge DIR … --output OUT`: one leaderboard from runs of disjoint
method lists on the same zoo tasks — a user's sampler, or a new method of ours, joins a committed leaderboard without
rerunning its methods.

The runs must share everything but their methods (budgets, extension budget, chain allocations, seeds, tuning
budget and seed, K, reference directory) — but a run that extends nothing (--extend 0) merges with runs that do, and
the merged board extends nothing (every extension's points dropped, as below); a task enters OUT when every run
finished it against the same reference (its "created" stamp) and the same floors (to FLOOR_RTOL). Each merged task's
record holds the union of the runs' method rows, one extension record (the rows every run that extended the task
continued) and the sum of their seconds. A run extends a task only when none of its rows solves a seed by the largest
budget; where some runs extended a task and others did not (a row of theirs solved a seed), the merged board would
not have extended it: the extension's points are dropped from the rows that have them (their gradients to floor
recomputed), so that every row of a merged task runs the same budgets, and the record says so ("extension_dropped":
the budget). OUT gets the merged configuration (the methods of every run, in --merge order, and the runs' commands)
and the leaderboard of those tasks; the merged directory can be merged again, or rewritten with --report-only.
"""
from __future__ import annotations

from pathlib import Path

from base.io import ConfigError

__all__ = ["SHARED", "cut_row", "merge_runs"]

SHARED = ("format", "preset", "budgets", "extend", "chains", "seeds", "tune_budget", "tune_seed", "k", "reference")
"""The configuration keys every merged run must share."""


def _records(run: Path) -> dict[str, dict]:
    from base.io import read_json
    from evaluate.leaderboard.store import TASKS

    out = {}
    for path in sorted((run / TASKS).glob("*.json")):
        record = read_json(path, "leaderboard task result")
        if not isinstance(record, dict) or "task" not in record or "result" not in record:
            raise ConfigError(f"{path} is not a leaderboard task result")
        out[record["task"]] = record
    return out


FLOOR_RTOL = 1e-6
"""Floors recomputed from the same reference agree to float rounding, not bit for bit: a CNN task's energy floor
moved by 2e-9 (relative) between two runs of the same code on this machine. Far below the floors' own spread."""


def _same_floors(a, b) -> bool:
    """The same structure, and every number within FLOOR_RTOL (relative) of the other's."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_floors(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= FLOOR_RTOL * max(abs(a), abs(b))
    return a == b


def _merge_task(name: str, records: list[dict], runs: list[Path], conf: dict) -> dict:
    first = records[0]
    for run, record in zip(runs[1:], records[1:]):
        if record.get("reference_created") != first.get("reference_created"):
            raise ConfigError(f"--merge {run}: task {name} ran against another reference (created "
                              f"{record.get('reference_created')}, not {first.get('reference_created')})")
        if not _same_floors(record["result"]["floors"], first["result"]["floors"]):
            raise ConfigError(f"--merge {run}: task {name} has other floors")
    extended = [r["extended"] for r in records if r.get("extended")]
    dropped = None
    if extended and len(extended) < len(records):  # not every run extended: cut every row back to the budgets
        dropped, extended = extended[0]["budget"], []
    methods = {}
    for record in records:
        rows = record["result"]["methods"]
        methods.update(rows if dropped is None else {m: cut_row(row, max(conf["budgets"]), first["result"]["floors"])
                                                     for m, row in rows.items()})
    if extended:  # every run extends at the same budget (a SHARED key); the rows each run extended, together
        extended = {"budget": extended[0]["budget"], "rows": [m for e in extended for m in e.get("rows", [])],
                    "mismatched": [m for e in extended for m in e.get("mismatched", [])]}
    return {**first, "configuration": conf, "result": {**first["result"], "methods": methods},
            "extended": extended or None, **({"extension_dropped": dropped} if dropped is not None else {}),
            "seconds": sum(float(r.get("seconds") or 0.0) for r in records)}


def cut_row(row: dict, largest: int, floors: dict) -> dict:
    """A curve row without its points beyond the budget `largest`, its gradients to floor recomputed."""
    from evaluate.curve.fidelity import to_floor

    choices = {}
    for c, choice in row["choices"].items():
        seeds = {s: [p for p in points if p["budget"] <= largest] for s, points in choice["seeds"].items()}
        choices[c] = {**choice, "seeds": seeds, "to_floor": to_floor(seeds, floors)}
    return {**row, "choices": choices}


def merge_runs(runs: list) -> tuple[dict, dict[str, dict]]:
    """(the merged configuration, {task: merged record}) of leaderboard directories `runs` (module docstring);
    ConfigError (one line) for a directory that is not a leaderboard, configurations that differ in a SHARED key,
    a method in two runs, or a task whose reference or floors differ between runs."""
    from evaluate.leaderboard.store import config_differences, read_configuration

    runs = [Path(r) for r in runs]
    if len(runs) < 2:
        raise ConfigError("--merge needs at least two leaderboard directories")
    confs = []
    for run in runs:
        conf = read_configuration(run) if run.is_dir() else None
        if conf is None:
            raise ConfigError(f"--merge {run} is not a leaderboard directory (no configuration.json)")
        confs.append(conf)
    extends = {c.get("extend") for c in confs}
    for run, conf in zip(runs[1:], confs[1:]):
        differ = [k for k in config_differences({k: confs[0].get(k) for k in SHARED}, {k: conf.get(k) for k in SHARED})
                  if k != "extend" or 0 not in extends]  # a run that extends nothing joins any (module docstring)
        if differ:
            raise ConfigError(f"--merge {run} differs from {runs[0]} in {', '.join(differ)}")
    methods, user = [], []
    for run, conf in zip(runs, confs):
        for m in conf["methods"]:
            if m in methods:
                raise ConfigError(f"--merge {run}: method {m} is in another run too")
            methods.append(m)
        user += [u for u in conf.get("user_methods", []) if u not in user]
    merged = {**{k: confs[0][k] for k in SHARED}, **({"extend": 0} if 0 in extends else {}), "methods": methods,
              "user_methods": user, "merged_from": [c.get("merged_from", [str(r)]) for r, c in zip(runs, confs)]}
    records = [_records(run) for run in runs]
    common = [n for n in records[0] if all(n in r for r in records[1:])]
    return merged, {n: _merge_task(n, [r[n] for r in records], runs, merged) for n in common}

