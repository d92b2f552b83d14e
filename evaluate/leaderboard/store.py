"""A leaderboard directory's files: its configuration (configuration.json: what a resume must share), one result per
finished task (tasks/<slug>.json, written atomically as each task finishes), and the extension of a task that no
row solved at the largest budget (its curves continued at the --extend budget)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from base.io import ConfigError

__all__ = ["CONFIGURATION", "FORMAT", "TASKS", "config_differences", "extend_result", "load_finished",
           "read_configuration", "solved_any", "task_path", "write_configuration", "write_task"]

FORMAT = 1
CONFIGURATION = "configuration.json"
TASKS = "tasks"
OWN_FILES = ("leaderboard.json", "leaderboard.md", "profile_oracle.png", "profile_validation.png")
"""The aggregate files (rewritten after every task; --overwrite removes them with the task results)."""


def _plain(value):
    """value as JSON reads it back (tuples as lists)."""
    return json.loads(json.dumps(value))


def config_differences(a: dict, b: dict) -> list[str]:
    """The keys whose values differ between two configuration records (tuples and lists alike)."""
    a, b = _plain(a), _plain(b)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def read_configuration(out: Path) -> dict | None:
    """DIR/configuration.json, or None when the directory holds none; ConfigError when it cannot be read."""
    from base.io import read_json

    path = Path(out) / CONFIGURATION
    if not path.exists():
        return None
    conf = read_json(path, f"--output {out}")
    if not isinstance(conf, dict) or conf.get("format") != FORMAT:
        raise ConfigError(f"--output {out}: {CONFIGURATION} is not a leaderboard configuration of this version")
    return conf


def write_configuration(out: Path, conf: dict) -> None:
    """Write DIR/configuration.json atomically."""
    from base.io import atomic_write_text

    atomic_write_text(Path(out) / CONFIGURATION, json.dumps(conf, indent=1) + "\n")


def task_path(out: Path, name: str) -> Path:
    """DIR/tasks/<slug>.json of a task (evaluate.leaderboard.select.slug)."""
    from evaluate.leaderboard.select import slug

    return Path(out) / TASKS / f"{slug(name)}.json"


def write_task(out: Path, record: dict) -> Path:
    """Write a finished task's record ({"format", "task", "configuration", "reference_created", "result",
    "extended", "seconds"}) atomically; returns its path."""
    from base.io import atomic_write_text

    path = task_path(out, record["task"])
    path.parent.mkdir(exist_ok=True)
    return atomic_write_text(path, json.dumps(record, indent=1, default=float))


def load_finished(out: Path, names: list[str], conf: dict, created: dict[str, str]) -> dict[str, dict]:
    """{task: record} of the named tasks whose result DIR/tasks holds; ConfigError for a record of another
    configuration or of another reference (its "created" stamp differs from `created`'s)."""
    from base.io import read_json

    done = {}
    for name in names:
        path = task_path(out, name)
        if not path.exists():
            continue
        record = read_json(path, "leaderboard task result")
        if not isinstance(record, dict) or record.get("task") != name or "result" not in record:
            raise ConfigError(f"{path} is not the result of task {name!r}; pass --overwrite to start again")
        if config_differences(record.get("configuration") or {}, conf):
            raise ConfigError(f"{path} was run with another configuration; pass --overwrite to start again")
        if record.get("reference_created") != created[name]:
            raise ConfigError(f"the reference of {name} changed since its curves ran (created "
                              f"{record.get('reference_created')}, now {created[name]}); pass --overwrite to "
                              "start again")
        done[name] = record
    return done


def solved_any(task: dict) -> bool:
    """Whether any row of a task's curve result solves any seed (evaluate.leaderboard.aggregate: TV and E² both
    reach the floor in band)."""
    from evaluate.leaderboard.aggregate import pair_costs

    return any(math.isfinite(c) for r in pair_costs(task).values() for c in r["costs"].values())


def _same_hp(a: dict, b: dict) -> bool:
    return _plain(a) == _plain(b)


def extend_result(task: dict, extension: dict, budget: int) -> tuple[dict, dict]:
    """(task result with its curves continued, {"budget", "rows", "mismatched"}): each row's choice of `task` (a
    curve_task result) gets the points of the same row and choice of `extension` (a curve_task result at budgets
    (budget,), the same tuning keys: the same hyperparameters chosen) appended to each seed's points, and its
    gradients to floor recomputed (evaluate.curve.fidelity.to_floor). A row whose extension chose other
    hyperparameters (or is missing) is left as it was and listed in "mismatched". `task` is not modified."""
    from evaluate.curve.fidelity import to_floor

    out = {**task, "methods": {}}
    rows, mismatched = [], []
    for name, row in task["methods"].items():
        ext = extension["methods"].get(name)
        if ext is None or not all(c in ext["choices"] and _same_hp(ext["choices"][c]["hp"], row["choices"][c]["hp"])
                                  for c in row["choices"]):
            out["methods"][name] = row
            mismatched.append(name)
            continue
        choices = {}
        for c, choice in row["choices"].items():
            more = ext["choices"][c]["seeds"]
            seeds = {s: list(points) + list(more.get(s, [])) for s, points in choice["seeds"].items()}
            choices[c] = {**choice, "seeds": seeds, "to_floor": to_floor(seeds, task["floors"])}
        out["methods"][name] = {**row, "choices": choices}
        rows.append(name)
    return out, {"budget": int(budget), "rows": rows, "mismatched": mismatched}


def clear(out: Path) -> None:
    """--overwrite: remove a leaderboard's own files from DIR (the task results, the configuration, the aggregate
    files); nothing else."""
    tasks = Path(out) / TASKS
    if tasks.is_dir():
        for f in tasks.glob("*.json"):
            f.unlink()
        for f in tasks.glob(".*.tmp"):
            f.unlink()
    for name in (CONFIGURATION, *OWN_FILES):
        p = Path(out) / name
        if p.exists():
            p.unlink()
