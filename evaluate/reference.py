"""Reference predictive probabilities (e.g. full-batch HMC, shared/spec/REFERENCE_DATA.md): loading and checks.

A reference file is plain text, one row per test point (in the project's test order), one column per class,
each row a probability vector (a Bayesian model average, not logits).  Whitespace- or comma-separated
(the delimiter is taken from the first line).  `load_reference_probs` refuses, with a one-line
`ReferenceDataError`, a file that is missing, not numeric, of the wrong number of rows or classes, has
entries outside [0, 1] or rows that do not sum to 1 (|sum − 1| ≤ atol); it never renormalises silently.
`check_alignment` is the mandatory row-order check: the reference's own accuracy on the project's test
labels must beat always predicting the most frequent class, otherwise the rows are not in the test order.

`load_references` resolves the references of an evaluation: plain text files as above, or reference
directories written by `python -m evaluate reference` (evaluate.hmc_reference: reference.json index,
<task>/probs.txt or <task>/predictive.npz, <task>/metadata.json), checked against the configured tasks.
"""
from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np

from l2e.io import read_json
from tasks.models import ModelSpec
from tasks.regression import RegressionSpec
from tasks.stored_spec import comparable_specs
from tasks.task import TaskSpec

__all__ = ["REFERENCE_TASKS", "ROW_SUM_ATOL", "ReferenceDataError", "check_alignment", "load_reference_dir", "load_reference_probs",
           "load_references"]

ROW_SUM_ATOL = 1e-3
"""Default tolerance on |row sum − 1| (the HMC files are float32 averages: within about 1e-6; text files
written with 4–5 decimals need ~1e-3)."""


class ReferenceDataError(ValueError):
    """Reference probabilities that cannot be used (missing, unreadable, wrong shape, not probabilities)."""


def _delimiter(path: Path) -> str | None:
    with open(path, "r", errors="replace") as f:
        first = f.readline()
    return "," if "," in first else None


def load_reference_probs(path, num_examples: int | None = None, num_classes: int | None = None,
                         atol: float = ROW_SUM_ATOL) -> np.ndarray:
    """(num_examples, num_classes) float64 probabilities from a text file; see the module docstring.

    num_examples / num_classes: the expected shape (None: not checked)."""
    path = Path(path)
    where = f"reference probabilities {path}"
    if not path.exists():
        raise ReferenceDataError(f"{where}: file not found")
    if not path.is_file():
        raise ReferenceDataError(f"{where}: not a regular file")
    try:
        with warnings.catch_warnings():  # numpy warns on an empty file; the check below says so in one line
            warnings.simplefilter("ignore", UserWarning)
            probs = np.loadtxt(path, delimiter=_delimiter(path), dtype=np.float64, ndmin=2)
    except (ValueError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ReferenceDataError(f"{where}: not a numeric table ({first})") from None
    except OSError as e:
        raise ReferenceDataError(f"{where}: cannot read ({e.strerror})") from None
    rows, cols = probs.shape if probs.size else (0, 0)
    if rows == 0:
        raise ReferenceDataError(f"{where}: empty file")
    if num_examples is not None and rows != num_examples:
        raise ReferenceDataError(f"{where}: {rows} rows, expected {num_examples} (one per test example)")
    if num_classes is not None and cols != num_classes:
        raise ReferenceDataError(f"{where}: {cols} classes (columns), expected {num_classes}")
    if not np.all(np.isfinite(probs)):
        bad = int(np.argmax(~np.all(np.isfinite(probs), axis=1)))
        raise ReferenceDataError(f"{where}: non-finite value in row {bad + 1}")
    if np.any(probs < 0.0) or np.any(probs > 1.0):
        bad = int(np.argmax(np.any((probs < 0.0) | (probs > 1.0), axis=1)))
        raise ReferenceDataError(f"{where}: values outside [0, 1] (first in row {bad + 1})")
    dev = np.abs(probs.sum(axis=1) - 1.0)
    if np.any(dev > atol):
        bad = int(np.argmax(dev > atol))
        raise ReferenceDataError(f"{where}: rows do not sum to 1 (row {bad + 1} sums to "
                                 f"{probs[bad].sum():.6g}; {int((dev > atol).sum())} rows off by more than {atol:g})")
    return probs


def check_alignment(probs: np.ndarray, labels, where: str = "reference probabilities") -> float:
    """Accuracy of argmax(probs) on `labels`; ReferenceDataError if it does not beat the majority class
    (the rows are then not in the order of the test set)."""
    labels = np.asarray(labels).astype(np.int64).ravel()
    if labels.shape[0] != probs.shape[0]:
        raise ReferenceDataError(f"{where}: {probs.shape[0]} rows for {labels.shape[0]} test labels")
    acc = float(np.mean(np.argmax(probs, axis=1) == labels))
    majority = float(np.bincount(labels, minlength=probs.shape[1]).max() / labels.shape[0])
    if not acc > majority:
        raise ReferenceDataError(
            f"{where}: its accuracy on the test labels is {acc:.3f}, no better than the majority class "
            f"({majority:.3f}); the rows are not in the test-set order")
    return acc


REFERENCE_TASKS = (
    (RegressionSpec("uci:power-plant", hidden=()),
     "dataset+task (UCI power plant, 6,697 training rows; heteroscedastic *linear* Gaussian model: every MLP tried "
     "left NUTS chains in different functional modes, see results/references/README.md)"),
    (TaskSpec("digits", ModelSpec("mlp", hidden=(32,))),
     "architecture (8x8 digit images with an MLP 32; meta-training saw only CNNs)"),
    (TaskSpec("mnist", ModelSpec("mlp", hidden=(8,)), max_train=10000),
     "dataset+architecture (MNIST, first 10,000 training images: 8,000 train; MLP 8; meta-training saw digits CNNs)"),
    (TaskSpec("mnist", ModelSpec("mlp", hidden=()), max_train=10000),
     "dataset+architecture (MNIST, first 10,000 training images: 8,000 train; softmax regression, 7,850 parameters, "
     "whose posterior NUTS can converge on; meta-training saw digits CNNs)"),
)
"""The tasks of the committed NUTS references (results/references/; `python -m evaluate reference --preset
references`), in the order that fixes their keys (task t: fold_in(PRNGKey(0), t)), with why each is held out."""

INDEX = "reference.json"
"""Index file of a reference directory (written by evaluate.hmc_reference)."""
def _read_json(path: Path, where: str):
    return read_json(path, where, ReferenceDataError, shown=path.name)


def _check_metadata(meta, task, name: str, where: str) -> None:
    """Stored kind, spec (less tasks.stored_spec.SPEC_IGNORED) and test data must be those of the configured task."""
    if not isinstance(meta, dict) or "spec" not in meta or "kind" not in meta:
        raise ReferenceDataError(f"{where}: metadata.json lacks the task kind or spec")
    if meta["kind"] != task.kind:
        raise ReferenceDataError(f"{where}: a {meta['kind']} reference, but task {name!r} is {task.kind}")
    stored, configured, diff = comparable_specs(meta["spec"], task.spec)
    if diff:
        first = diff[0] if diff else "?"
        raise ReferenceDataError(
            f"{where}: computed for another task spec than {name!r} ({', '.join(diff)} differ: stored "
            f"{first}={stored.get(first)!r}, configured {configured.get(first)!r})")
    data = meta.get("data", {})
    _, y = task.splits.test
    y = np.asarray(y)
    if data.get("test") is not None and int(data["test"]) != y.shape[0]:
        raise ReferenceDataError(f"{where}: {data['test']} test examples stored, the task has {y.shape[0]}")
    if task.kind == "classification":
        if data.get("classes") is not None and int(data["classes"]) != task.num_classes:
            raise ReferenceDataError(f"{where}: {data['classes']} classes stored, the task has {task.num_classes}")
        sha = hashlib.sha256(np.ascontiguousarray(y.astype(np.int64).ravel()).tobytes()).hexdigest()
        if data.get("test_labels_sha256") not in (None, sha):
            raise ReferenceDataError(f"{where}: computed on other test labels (fingerprint differs) than {name!r}")
    elif data.get("test_y_mean") is not None and (abs(float(data["test_y_mean"]) - float(np.mean(y))) > 1e-4
                                                   or abs(float(data["test_y_std"]) - float(np.std(y))) > 1e-4):
        raise ReferenceDataError(f"{where}: computed on other test targets (mean/std differ) than {name!r}")


def _load_regression(path: Path, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    where = f"reference predictive {path}"
    try:
        with np.load(path) as z:
            loc, scale = np.asarray(z["loc"], np.float64), np.asarray(z["scale"], np.float64)
    except FileNotFoundError:
        raise ReferenceDataError(f"{where}: file not found") from None
    except KeyError as e:
        raise ReferenceDataError(f"{where}: no array {e} (needs loc and scale)") from None
    except (OSError, ValueError) as e:
        raise ReferenceDataError(f"{where}: not a readable .npz ({str(e).splitlines()[0]})") from None
    if loc.ndim != 2 or loc.shape != scale.shape:
        raise ReferenceDataError(f"{where}: loc {loc.shape} and scale {scale.shape} must both be (S, n)")
    if loc.shape[1] != num_examples:
        raise ReferenceDataError(f"{where}: {loc.shape[1]} test columns, expected {num_examples}")
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale))):
        raise ReferenceDataError(f"{where}: non-finite loc or scale")
    if np.any(scale <= 0):
        raise ReferenceDataError(f"{where}: non-positive scale")
    return loc, scale


def load_reference_dir(path, name: str, task) -> dict:
    """One task's entry of a reference directory (see `load_references` for the returned dict)."""
    root = Path(path)
    index = _read_json(root / INDEX, f"reference directory {root}")
    if not isinstance(index, dict):
        raise ReferenceDataError(f"reference directory {root}: {INDEX} is not a JSON object")
    if name not in index:
        raise ReferenceDataError(f"reference directory {root} has no task {name!r} (it has: "
                                 f"{', '.join(index) or 'none'})")
    entry = index[name]
    if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
        raise ReferenceDataError(f"reference directory {root}: bad {INDEX} entry for {name!r}")
    task_dir = root / entry["dir"]
    where = f"reference {task_dir}"
    meta = _read_json(task_dir / "metadata.json", where)
    _check_metadata(meta, task, name, where)
    _, y = task.splits.test
    y = np.asarray(y)
    out = {"path": str(task_dir), "kind": task.kind, "metadata": meta, "dispersion": meta.get("dispersion")}
    if task.kind == "classification":
        probs_path = task_dir / "probs.txt"
        out["probs"] = load_reference_probs(probs_path, int(y.shape[0]), task.num_classes)
        out["accuracy"] = check_alignment(out["probs"], y, f"reference probabilities {probs_path}")
    else:
        out["loc"], out["scale"] = _load_regression(task_dir / "predictive.npz", int(y.shape[0]))
    return out


def load_references(references: dict | None, names: list[str], tasks: list) -> dict[str, dict]:
    """{task name: reference} from {task name or None: path}; None stands for the only task, or, for a
    reference directory, for every configured task the directory holds.

    A path is a plain text file of probabilities (classification; see `load_reference_probs`) or a directory
    with reference.json (from `python -m evaluate reference`), whose stored task kind, spec (all fields
    except data_dir) and test data must match the configured task.  Every entry is checked (shape against the
    task's test split, probabilities, row order).  Returned per task: {"path", "kind", "probs" (n, C) and
    "accuracy" (classification) or "loc", "scale" (S, n) (regression), "metadata" (dict, None for a text file),
    "dispersion" (the reference's evaluate.dispersion statistics on the test split from its metadata; None for a
    text file or a reference written before they were stored)}.
    """
    out = {}
    for key, path in (references or {}).items():
        is_dir = Path(path).is_dir()
        if is_dir and not (Path(path) / INDEX).is_file():
            raise ReferenceDataError(f"reference {path}: a directory without {INDEX} (not written by "
                                     "`python -m evaluate reference`)")
        if key is None and is_dir:
            index = _read_json(Path(path) / INDEX, f"reference directory {path}")
            if not isinstance(index, dict):
                raise ReferenceDataError(f"reference directory {path}: {INDEX} is not a JSON object")
            selected = [n for n in names if n in index]
            if not selected:
                raise ReferenceDataError(f"reference directory {path} holds none of the configured tasks "
                                         f"({', '.join(names)}); it has: {', '.join(index) or 'none'}")
        elif key is None:
            if len(names) != 1:
                raise ReferenceDataError(f"--reference {path}: the configuration has {len(names)} tasks; "
                                         f"name one as TASK=PATH (tasks: {', '.join(names)})")
            selected = [names[0]]
        else:
            if key not in names:
                raise ReferenceDataError(f"--reference for unknown task {key!r}; tasks: {', '.join(names)}")
            selected = [key]
        for name in selected:
            if name in out:
                raise ReferenceDataError(f"reference for task {name!r} given twice ({out[name]['path']}, {path})")
            task = tasks[names.index(name)]
            if is_dir:
                out[name] = load_reference_dir(path, name, task)
                continue
            if task.kind != "classification":
                raise ReferenceDataError(f"--reference {path}: task {name!r} is {task.kind}; a text file of class "
                                         "probabilities fits only classification (give a reference directory)")
            _, y_test = task.splits.test
            probs = load_reference_probs(path, int(y_test.shape[0]), task.num_classes)
            acc = check_alignment(probs, np.asarray(y_test), f"reference probabilities {path}")
            out[name] = {"path": str(path), "kind": "classification", "probs": probs, "accuracy": acc,
                         "metadata": None, "dispersion": None}
    return out
