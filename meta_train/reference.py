"""NUTS reference predictives for the "fidelity" meta-objective (meta_train.objectives; docs/meta_training.md
§ Objectives).

Reads the reference directories `python -m evaluate reference` writes (evaluate.hmc_reference) directly with
numpy / json — meta_train does not import evaluate (layering: l2e ← tasks ← meta_train / evaluate):

    ROOT/reference.json          {task name: {"dir": SUBDIR, "kind": ..., ...}}
    ROOT/SUBDIR/metadata.json    {"kind", "spec" (the task spec as a dict), "data": {"train", "test", "classes",
                                  "test_labels_sha256", ...}, ...}
    ROOT/SUBDIR/probs.txt        the reference BMA probabilities (n_test, C) on the task's test split, in its order

`load_task_reference(root, task)` finds the entry whose stored spec is the task's (every field but data_dir; fields
added to the specs after a reference was stored take their old defaults, as evaluate.reference does) and checks it
against the built task: classification, training-set size, test-set size, number of classes, the test labels'
fingerprint, probabilities of the right shape whose rows sum to 1.  Every refusal is one `ReferenceError` line
(a ConfigError: the CLI prints it as `error: …`, exit 2) naming the task.
"""
from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from l2e.io import ConfigError, read_json
from tasks.stored_spec import comparable_specs

INDEX = "reference.json"
ROW_SUM_ATOL = 1e-3


class ReferenceError(ConfigError):
    """A reference that is missing or does not fit its meta-training task (one line)."""


class TaskReference(NamedTuple):
    """A task's reference: probs (n_test, C) float32 (rows = the task's test split, in order), its directory."""

    probs: np.ndarray
    path: str


def task_name(spec) -> str:
    """The name `python -m evaluate` gives a task: spec.name, + "-n<max_train>" when max_train is set."""
    max_train = getattr(spec, "max_train", None)
    return spec.name if max_train is None else f"{spec.name}-n{max_train}"


def _read_json(path: Path, what: str):
    return read_json(path, what, ReferenceError)


def find_reference_dir(root, spec) -> Path:
    """The subdirectory of reference directory `root` holding the reference of task `spec` (ReferenceError if none)."""
    root = Path(root)
    name = task_name(spec)
    if not root.is_dir():
        raise ReferenceError(f"objective.reference {root}: not a directory (no reference for task {name!r})")
    index = _read_json(root / INDEX, f"objective.reference {root} (a directory written by `python -m evaluate "
                                     f"reference`)")
    if not isinstance(index, dict):
        raise ReferenceError(f"objective.reference {root}: {INDEX} is not a JSON object")
    by_name = None
    for entry_name, entry in index.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
            continue
        meta_path = root / entry["dir"] / "metadata.json"
        if not meta_path.is_file():
            continue
        meta = _read_json(meta_path, f"reference {root / entry['dir']}")
        if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
            continue
        diff = comparable_specs(meta["spec"], spec)[2]
        if not diff:
            return root / entry["dir"]
        if entry_name == name:
            by_name = (entry["dir"], diff)
    if by_name is not None:
        raise ReferenceError(f"reference {root / by_name[0]} was computed for another task spec than meta-training "
                             f"task {name!r} ({', '.join(by_name[1])} differ)")
    raise ReferenceError(f"objective.reference {root} has no reference for meta-training task {name!r} (it has: "
                         f"{', '.join(index) or 'none'}); compute one with `python -m evaluate reference`")


def load_task_reference(root, task) -> TaskReference:
    """The checked reference of a built task (module doc)."""
    name = task_name(task.spec)
    if task.kind != "classification":
        raise ReferenceError(f"objective.kind fidelity needs classification tasks; meta-training task {name!r} is "
                             f"{task.kind}")
    d = find_reference_dir(root, task.spec)
    where = f"reference {d} (task {name!r})"
    meta = _read_json(d / "metadata.json", where)
    if meta.get("kind") != "classification":
        raise ReferenceError(f"{where}: a {meta.get('kind')} reference, the task is classification")
    data = meta.get("data") or {}
    _, y = task.splits.test
    y = np.asarray(y)
    checks = (("train", task.data_size, "training examples"), ("test", y.shape[0], "test examples"),
              ("classes", task.num_classes, "classes"))
    for key, have, what in checks:
        if data.get(key) is not None and int(data[key]) != int(have):
            raise ReferenceError(f"{where}: {data[key]} {what} stored, the task has {have}")
    sha = hashlib.sha256(np.ascontiguousarray(y.astype(np.int64).ravel()).tobytes()).hexdigest()
    if data.get("test_labels_sha256") not in (None, sha):
        raise ReferenceError(f"{where}: computed on other test labels (fingerprint differs)")
    probs_path = d / "probs.txt"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with open(probs_path, errors="replace") as f:
                delimiter = "," if "," in f.readline() else None
            probs = np.loadtxt(probs_path, delimiter=delimiter, dtype=np.float64, ndmin=2)
    except FileNotFoundError:
        raise ReferenceError(f"{where}: probs.txt not found") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ReferenceError(f"{where}: probs.txt is not a readable numeric table ({type(e).__name__})") from None
    if probs.shape != (y.shape[0], task.num_classes):
        raise ReferenceError(f"{where}: probs.txt is {probs.shape[0]}×{probs.shape[1]}, "
                             f"expected {y.shape[0]}×{task.num_classes} (test examples × classes)")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or np.any(probs > 1):
        raise ReferenceError(f"{where}: probs.txt holds values outside [0, 1] or non-finite ones")
    if np.any(np.abs(probs.sum(axis=1) - 1.0) > ROW_SUM_ATOL):
        raise ReferenceError(f"{where}: rows of probs.txt do not sum to 1")
    return TaskReference(probs.astype(np.float32), str(d))
