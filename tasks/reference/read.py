"""Reading a reference directory: the entry of a task by name or by spec, checked against the built task
(layout and checks: the module doc of tasks.reference)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.reference.files import (DRAWS, FORMATS, INDEX, METADATA, PREDICTIVE, ROW_SUM_ATOL, ReferenceDataError,
                                   load_reference_probs, read_reference_json, task_name)
from tasks.reference.schema import (DRAW_ARRAYS, MAX_READ_DRAWS, PREDICTIVE_ARRAYS, check_draw_probs, check_index,
                                    check_metadata, check_predictive, read_npz)
from tasks.reference.specs import comparable_specs

__all__ = ["find_reference_dir", "load_draws", "load_reference_dir", "load_task_dir", "load_text_reference",
           "read_json_index"]


def read_metadata(task_dir: Path, where: str) -> dict:
    """The task metadata.json of a reference, its schema checked (tasks.reference.schema)."""
    meta = read_reference_json(task_dir / METADATA, where)
    return check_metadata(meta, f"{where}: {METADATA}", ReferenceDataError, FORMATS)


def _check_metadata(meta, task, name: str, where: str) -> None:
    """Stored kind, spec and test data must be those of the built task."""
    if meta["kind"] != task.kind:
        raise ReferenceDataError(f"{where}: a {meta['kind']} reference, but task {name!r} is {task.kind}")
    stored, configured, diff = comparable_specs(meta["spec"], task.spec)
    if diff:
        raise ReferenceDataError(
            f"{where}: computed for another task spec than {name!r} ({', '.join(diff)} differ: stored "
            f"{diff[0]}={stored.get(diff[0])!r}, configured {configured.get(diff[0])!r})")
    data = meta.get("data") or {}
    y = np.asarray(task.splits.test[1])
    for key, have, what in (("train", task.data_size, "training examples"), ("test", y.shape[0], "test examples")):
        if data.get(key) is not None and int(data[key]) != int(have):
            raise ReferenceDataError(f"{where}: {data[key]} {what} stored, the task has {have}")
    FORMATS[task.kind].check(data, task, y, where, name)


def load_task_dir(task_dir, task, name: str) -> dict:
    """The checked reference in one task directory.

    Args:
      task_dir: ROOT/SUBDIR; task: the built task it must fit; name: the task's name (for messages).

    Returns:
      {"path", "kind", "metadata", "dispersion" (the stored dispersion statistics or None), and "probs" (n, C)
      float64 and "accuracy" (classification) or "loc", "scale" (S, n) float64 (regression)}.
    """
    task_dir = Path(task_dir)
    where = f"reference {task_dir}"
    meta = read_metadata(task_dir, where)
    _check_metadata(meta, task, name, where)
    out = {"path": str(task_dir), "kind": task.kind, "metadata": meta, "dispersion": meta.get("dispersion")}
    out.update(FORMATS[task.kind].read(task_dir, task, np.asarray(task.splits.test[1])))
    return out


def load_text_reference(path, task, name: str) -> dict:
    """A plain text file of class probabilities as the reference of a task (`load_reference_probs`,
    `check_alignment`); ReferenceDataError for a task whose predictive is not a class distribution.

    Args:
      path: the file; task: the built task; name: the task's name in messages.

    Returns:
      {"path", "kind", "probs" (n, C) float64, "accuracy", "metadata": None, "dispersion": None}.
    """
    out = {"path": str(path), "kind": task.kind, "metadata": None, "dispersion": None}
    out.update(FORMATS[task.kind].read_text(Path(path), task, np.asarray(task.splits.test[1]), name))
    return out


def read_json_index(root: Path, what: str) -> dict:
    """The index of a reference directory, checked (ReferenceDataError if missing, unreadable or not an object).

    Args:
      root: the reference directory; what: how messages name it.

    Returns:
      {task name: {"dir", "kind", "metadata", "converged"}}.
    """
    return check_index(read_reference_json(root / INDEX, what), f"{what}: {INDEX}", ReferenceDataError)


def load_reference_dir(path, name: str, task) -> dict:
    """The reference of a task in a reference directory, found by its index name and checked against the task.

    Args:
      path: the reference directory; name: the task's name (its index key); task: the built task.

    Returns:
      `load_task_dir`'s dict.
    """
    root = Path(path)
    index = read_json_index(root, f"reference directory {root}")
    if name not in index:
        raise ReferenceDataError(f"reference directory {root} has no task {name!r} (it has: "
                                 f"{', '.join(index) or 'none'})")
    return load_task_dir(root / index[name]["dir"], task, name)


def find_reference_dir(root, spec, what: str = "reference directory", label: str = "task") -> Path:
    """The task directory in reference directory `root` whose stored spec is `spec` (whatever its index name).

    Args:
      root: the reference directory; spec: the task spec; what / label: how messages name `root` (e.g. a config
        key) and the task (e.g. "meta-training task").

    Returns:
      ROOT/SUBDIR; ReferenceDataError if `root` holds none (naming the entry of the same name with another spec).
    """
    root = Path(root)
    name = task_name(spec)
    if not root.is_dir():
        raise ReferenceDataError(f"{what} {root}: not a directory (no reference for {label} {name!r})")
    index = read_json_index(root, f"{what} {root} (a directory written by `python -m evaluate reference`)")
    by_name = None
    for entry_name, entry in index.items():
        if not (root / entry["dir"] / METADATA).is_file():
            continue
        meta = read_metadata(root / entry["dir"], f"reference {root / entry['dir']}")
        diff = comparable_specs(meta["spec"], spec)[2]
        if not diff:
            return root / entry["dir"]
        if entry_name == name:
            by_name = (entry["dir"], diff)
    if by_name is not None:
        raise ReferenceDataError(f"reference {root / by_name[0]} was computed for another task spec than {label} "
                                 f"{name!r} ({', '.join(by_name[1])} differ)")
    raise ReferenceDataError(f"{what} {root} has no reference for {label} {name!r} (it has: "
                             f"{', '.join(index) or 'none'}); compute one with `python -m evaluate reference`")


def _draw_bound(where: str, axis_of: str):
    """check(headers) for read_npz: at most MAX_READ_DRAWS draws along axis 0 of array `axis_of`."""
    def check(heads: dict) -> None:
        s = heads[axis_of][0][0]
        if s > MAX_READ_DRAWS:
            raise ReferenceDataError(f"{where}: {s} draws, at most {MAX_READ_DRAWS} are read (a resource limit: the "
                                     "curves compare every pair of draws; keep fewer with `evaluate reference "
                                     "--keep-draws`)")
    return check


def load_draws(task_dir, kind: str, probs: np.ndarray | None = None) -> dict | None:
    """The per-draw test predictives of a reference, for the budget curves (sample-level distances, the K-draw floor)
    and the meta-training dispersion target, checked against the reference itself (tasks.reference.schema: the
    archive, its arrays' names, dtypes and shapes, at most MAX_READ_DRAWS draws, read from the headers before anything
    is allocated; then the values) — the reference is checked against the task by `load_task_dir`.

    Args:
      task_dir: the task's reference directory; kind: "classification" or "regression" (the metadata's kind must be
        it); probs: classification, the reference's BMA probabilities already read and checked (`load_task_dir`);
        None: read from probs.txt here.
    Returns:
      {"probs": (S, n', C) float32, "chain": (S,) int, "rows": (n',) int test-point indices or None (every point)}
      (classification, from draw_probs.npz: at least 2 draws, not all the same, on C classes, rows in [0, n),
      probabilities in [0, 1] summing to 1, their average matching probs.txt on those rows) or {"loc", "scale": (S, n)
      float64} (regression, predictive.npz); None for a classification reference without draw_probs.npz.
      ReferenceDataError (one line naming the file) for anything else.
    """
    task_dir = Path(task_dir)
    meta = read_metadata(task_dir, f"reference {task_dir}")
    if meta["kind"] != kind:
        raise ReferenceDataError(f"reference {task_dir}: a {meta['kind']} reference, expected {kind}")
    data, sampler = meta.get("data") or {}, meta.get("sampler") or {}
    if kind == "regression":
        path = task_dir / PREDICTIVE
        where = f"reference draws {path}"
        arrays = read_npz(path, where, PREDICTIVE_ARRAYS, tuple(PREDICTIVE_ARRAYS), ReferenceDataError,
                          check=_draw_bound(where, "loc"))
        test = data.get("test", arrays["loc"].shape[1])
        return check_predictive(arrays, where, ReferenceDataError, test, min_draws=2)
    path = task_dir / DRAWS
    if not path.exists() and not path.is_symlink():
        return None
    if probs is None:
        probs = load_reference_probs(task_dir / "probs.txt", data.get("test"), data.get("classes"))
    where = f"reference draws {path}"
    arrays = read_npz(path, where, DRAW_ARRAYS, ("probs", "chain"), ReferenceDataError,
                      check=_draw_bound(where, "probs"))
    return check_draw_probs(arrays, where, ReferenceDataError, np.asarray(probs), ROW_SUM_ATOL,
                            sampler.get("chains"), sampler.get("total_draws"))
