"""Which zoo tasks a leaderboard runs: the held-out half (tasks.zoo.held_out_names) whose reference the reference
directory holds converged by the zoo's rule (tasks.zoo: function-space split R̂ max < ZOO_RHAT, no divergent
transition, at least ZOO_MIN_CHAINS chains, and the index's own "converged"); the others are skipped, each with why."""
from __future__ import annotations

from pathlib import Path

from base.io import ConfigError

__all__ = ["select_tasks", "slug", "zoo_verdict"]


def slug(name: str) -> str:
    """The file stem of a task's result (DIR/tasks/<slug>.json): its name with every character but letters, digits
    and -_. replaced by _."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def zoo_verdict(entry: dict, metadata: dict | None) -> str | None:
    """Why a reference is not converged by the zoo's rule (tasks.zoo.ZOO_RHAT, ZOO_MIN_CHAINS), or None when it is.

    Args:
      entry: the reference index's entry of the task ({"dir", "kind", "metadata", "converged"}).
      metadata: its metadata.json (None: unreadable).
    Returns:
      One phrase naming the first failed condition, or None.
    """
    from tasks.zoo import zoo_verdict

    if not entry.get("converged"):
        return "not converged by the reference's own rule (index: converged false)"
    if not isinstance(metadata, dict):
        return "its metadata.json cannot be read"
    return zoo_verdict(metadata)


def _metadata(root: Path, entry: dict) -> dict | None:
    """A reference's metadata.json, or None when missing or unreadable."""
    from base.io import read_json

    try:
        return read_json(root / str(entry.get("metadata") or Path(str(entry.get("dir"))) / "metadata.json"),
                         "reference metadata")
    except (ValueError, OSError):
        return None


def select_tasks(reference: str | Path, names: list[str], allow_train: bool) -> tuple[list[str], dict[str, str],
                                                                                     dict[str, str]]:
    """(tasks to run in ZOO order, {skipped task: why}, {task: its reference's "created" stamp}).

    Args:
      reference: the reference directory (its index is read: tasks.reference.read_json_index).
      names: --task names (zoo task names; empty: the held-out half).
      allow_train: whether a meta-training-half task may be named.
    Raises:
      ConfigError: an unknown zoo task, a meta-training-half task without allow_train, a name given twice, or no
      task left to run; ReferenceDataError: an unreadable index.
    """
    from tasks.reference import read_json_index
    from tasks.zoo import ZOO, held_out_names, split

    halves = split()
    unknown = [n for n in names if n not in halves]
    if unknown:
        raise ConfigError(f"--task {unknown[0]!r} is not a zoo task (tasks.zoo.ZOO; see `python -m evaluate "
                          "reference --suite zoo --list`)")
    if len(set(names)) != len(names):
        raise ConfigError(f"--task {next(n for n in names if names.count(n) > 1)!r} given twice")
    train = [n for n in names if halves[n] == "train"]
    if train and not allow_train:
        raise ConfigError(f"--task {train[0]!r} is in the meta-training half: the leaderboard is for the held-out "
                          "half (tasks.zoo.split); pass --allow-train to run it anyway")
    root = Path(reference)
    index = read_json_index(root, f"reference directory {root}")
    wanted = set(names) if names else set(held_out_names())
    run, skipped, created = [], {}, {}
    for e in ZOO:
        if e.name not in wanted:
            continue
        if e.name not in index:
            skipped[e.name] = f"no reference in {root} (not computed yet)"
            continue
        meta = _metadata(root, index[e.name])
        why = zoo_verdict(index[e.name], meta)
        if why is not None:
            skipped[e.name] = why
            continue
        run.append(e.name)
        created[e.name] = str(meta.get("created"))
    if not run:
        why = "; ".join(f"{n}: {w}" for n, w in skipped.items())
        raise ConfigError(f"no task to run: every selected task is skipped ({why})")
    return run, skipped, created
