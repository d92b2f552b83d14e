"""The reference format: file names, the per-kind files and test-split fingerprint, the probability-table reader and
row-order check, writing (layout: the module doc of tasks.reference)."""
from __future__ import annotations

import dataclasses

import hashlib
import io
import json
import re
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from base.io import atomic_write_bytes, atomic_write_text, read_json
from tasks.reference.schema import PREDICTIVE_ARRAYS, check_index, check_predictive, read_npz

__all__ = ["DRAWS", "FORMATS", "INDEX", "METADATA", "PREDICTIVE", "ROW_SUM_ATOL", "ReferenceDataError",
           "check_alignment", "data_fingerprint", "labels_sha256", "load_reference_probs", "read_index",
           "read_reference_json", "slugify", "task_name", "write_reference"]

INDEX = "reference.json"
"""The index file that marks a reference directory."""
METADATA = "metadata.json"
DRAWS = "draw_probs.npz"
"""Classification references: a thinned set of the NUTS draws' test probabilities, probs (S, n', C) float16 and their
chain index chain (S,), and rows (n',) the test points they are on when not every point (`evaluate reference
--keep-rows`; references written before it existed have no such file); read by `tasks.reference.load_draws`."""
PREDICTIVE = "predictive.npz"
"""Regression references: loc, scale (S, n), every draw's Gaussian predictive on the test points; float16 since the
zoo (float32 before; both read as float64): the rounding (2**-11 relative) moves the K-draw floors by at most 0.12 %
(power plant, kin8nm; their 10-90 % spread: 48-79 %)."""
ROW_SUM_ATOL = 1e-3
"""Default tolerance on |row sum − 1| (the HMC files are float32 averages: within about 1e-6; text files
written with 4–5 decimals need ~1e-3; draw_probs.npz's float16 rows move by at most 2**-11 ≈ 4.9e-4)."""


class ReferenceDataError(ValueError):
    """A reference that cannot be used (missing, unreadable, wrong shape, not probabilities, another task); one line."""


def task_name(spec) -> str:
    """A task's report name and reference index key.

    Args:
      spec: a TaskSpec or RegressionSpec.

    Returns:
      spec.name, + "-n<max_train>" when max_train is set (e.g. "mnist/mlp-8-n10000"), + "-p<prior variance>" when
      the prior is not the spec's default (e.g. "digits/mlp-16-p0.05"; two priors of one model are two posteriors).
    """
    max_train = getattr(spec, "max_train", None)
    name = spec.name if max_train is None else f"{spec.name}-n{max_train}"
    default = next((f.default for f in dataclasses.fields(spec) if f.name == "prior_variance"), None)
    prior = getattr(spec, "prior_variance", default)
    return name if prior == default else f"{name}-p{prior:g}"


def slugify(name: str) -> str:
    """The directory name of a task: characters other than [A-Za-z0-9._-] become "_" (never empty).

    Args:
      name: a task name.

    Returns:
      The slug (str).
    """
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".")
    return slug or "task"


def labels_sha256(labels) -> str:
    """The fingerprint of a test split's labels.

    Args:
      labels: (n,) integer labels in test order.

    Returns:
      The SHA-256 hex digest of their int64 bytes.
    """
    return hashlib.sha256(np.ascontiguousarray(np.asarray(labels).astype(np.int64).ravel()).tobytes()).hexdigest()


def read_reference_json(path: Path, where: str):
    """json.loads of a reference file; ReferenceDataError "{where}: {name} not found / …" if it cannot be read."""
    return read_json(path, where, ReferenceDataError, shown=path.name)


def _delimiter(path: Path) -> str | None:
    with open(path, "r", errors="replace") as f:
        first = f.readline()
    return "," if "," in first else None


def _read_table(path: Path, where: str) -> np.ndarray:
    if not path.exists():
        raise ReferenceDataError(f"{where}: file not found")
    if not path.is_file():
        raise ReferenceDataError(f"{where}: not a regular file")
    try:
        with warnings.catch_warnings():  # numpy warns on an empty file; the check below says so in one line
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(path, delimiter=_delimiter(path), dtype=np.float64, ndmin=2)
    except (ValueError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ReferenceDataError(f"{where}: not a numeric table ({first})") from None
    except OSError as e:
        raise ReferenceDataError(f"{where}: cannot read ({e.strerror})") from None


def load_reference_probs(path, num_examples: int | None = None, num_classes: int | None = None,
                         atol: float = ROW_SUM_ATOL) -> np.ndarray:
    """Reference class probabilities from a text file (whitespace- or comma-separated, the delimiter taken from
    the first line), checked; never renormalised.

    Args:
      path: the file; num_examples / num_classes: the expected rows / columns (None: not checked).
      atol: the tolerance on |row sum − 1|.

    Returns:
      (num_examples, num_classes) float64 probabilities.
    """
    path = Path(path)
    where = f"reference probabilities {path}"
    probs = _read_table(path, where)
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
    """The mandatory row-order check: the reference's accuracy on the task's test labels must beat always
    predicting the majority class (otherwise the rows are not in the test order; ReferenceDataError).

    Args:
      probs: (n, C) probabilities; labels: (n,) integer test labels; where: the message's subject.

    Returns:
      The accuracy of argmax(probs) (float in [0, 1]).
    """
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


def _npz_bytes(save: Callable[[io.BytesIO], None]) -> bytes:
    buf = io.BytesIO()
    save(buf)
    return buf.getvalue()


class _Probabilities:
    """Classification: BMA probabilities per test point (probs.txt) and per chain (chain_probs.npz)."""

    @staticmethod
    def fingerprint(task, y: np.ndarray) -> dict:
        return {"classes": int(task.num_classes), "test_labels_sha256": labels_sha256(y)}

    @staticmethod
    def check(data: dict, task, y: np.ndarray, where: str, name: str) -> None:
        if data.get("classes") is not None and int(data["classes"]) != task.num_classes:
            raise ReferenceDataError(f"{where}: {data['classes']} classes stored, the task has {task.num_classes}")
        if data.get("test_labels_sha256") not in (None, labels_sha256(y)):
            raise ReferenceDataError(f"{where}: computed on other test labels (fingerprint differs) than {name!r}")

    @staticmethod
    def write(task_dir: Path, arrays: dict) -> None:
        atomic_write_bytes(task_dir / "probs.txt", _npz_bytes(lambda f: np.savetxt(f, arrays["probs"], fmt="%.18e")))
        atomic_write_bytes(task_dir / "chain_probs.npz", _npz_bytes(
            lambda f: np.savez_compressed(f, probs=arrays["chain_probs"].astype(np.float32))))
        if "draw_probs" in arrays:  # per-draw test predictives (the K-draw floor and sample distances need them)
            rows = {} if "draw_rows" not in arrays else {"rows": np.asarray(arrays["draw_rows"], np.int32)}
            atomic_write_bytes(task_dir / DRAWS, _npz_bytes(lambda f: np.savez_compressed(
                f, probs=arrays["draw_probs"].astype(np.float16), chain=arrays["draw_chain"].astype(np.int16),
                **rows)))

    @staticmethod
    def read(task_dir: Path, task, y: np.ndarray) -> dict:
        return _Probabilities.read_text(task_dir / "probs.txt", task, y, "")

    @staticmethod
    def read_text(path: Path, task, y: np.ndarray, name: str) -> dict:
        probs = load_reference_probs(path, int(y.shape[0]), task.num_classes)
        return {"probs": probs, "accuracy": check_alignment(probs, y, f"reference probabilities {path}")}


class _GaussianDraws:
    """Regression: the per-draw Gaussian predictives (predictive.npz: loc, scale (S, n))."""

    @staticmethod
    def fingerprint(task, y: np.ndarray) -> dict:
        return {"test_y_mean": float(np.mean(y)), "test_y_std": float(np.std(y))}

    @staticmethod
    def check(data: dict, task, y: np.ndarray, where: str, name: str) -> None:
        stored = (data.get("test_y_mean"), data.get("test_y_std"))
        if any(v is not None for v in stored) and (None in stored or abs(stored[0] - float(np.mean(y))) > 1e-4
                                                   or abs(stored[1] - float(np.std(y))) > 1e-4):
            raise ReferenceDataError(f"{where}: computed on other test targets (mean/std differ) than {name!r}")

    @staticmethod
    def write(task_dir: Path, arrays: dict) -> None:
        atomic_write_bytes(task_dir / PREDICTIVE, _npz_bytes(
            lambda f: np.savez(f, loc=arrays["loc"].astype(np.float16), scale=_f16_scale(arrays["scale"]))))

    @staticmethod
    def read(task_dir: Path, task, y: np.ndarray) -> dict:
        path = task_dir / PREDICTIVE
        where = f"reference predictive {path}"
        arrays = read_npz(path, where, PREDICTIVE_ARRAYS, tuple(PREDICTIVE_ARRAYS), ReferenceDataError)
        return check_predictive(arrays, where, ReferenceDataError, int(y.shape[0]))

    @staticmethod
    def read_text(path: Path, task, y: np.ndarray, name: str) -> dict:
        raise ReferenceDataError(f"--reference {path}: task {name!r} is {task.kind}; a text file of class "
                                 "probabilities fits only classification (give a reference directory)")


FORMATS = {"classification": _Probabilities, "regression": _GaussianDraws}
"""The files of a reference by the kind of its task's likelihood (`task.kind`, stored as metadata "kind")."""


def _f16_scale(scale) -> np.ndarray:
    """Predictive scales as float16, kept positive (at least float16's smallest normal, 6.1e-5)."""
    return np.maximum(np.asarray(scale, np.float64), float(np.finfo(np.float16).tiny)).astype(np.float16)


def data_fingerprint(task) -> dict:
    """The test split's fingerprint stored in metadata "data".

    Args:
      task: a built task.

    Returns:
      {"classes", "test_labels_sha256"} (classification) or {"test_y_mean", "test_y_std"} (regression, standardised
      target units).
    """
    return FORMATS[task.kind].fingerprint(task, np.asarray(task.splits.test[1]))


def read_index(root) -> dict:
    """The index of a reference directory, for adding to it.

    Args:
      root: the reference directory.

    Returns:
      {task name: entry} from root/reference.json; {} if it has none.
    Raises:
      ReferenceDataError: an index that is there but unreadable, not JSON or not of the schema
        (tasks.reference.schema): a damaged index is never taken for an empty one (rewriting it would drop every
        other task's entry).
    """
    path = Path(root) / INDEX
    if not path.exists() and not path.is_symlink():
        return {}
    where = f"reference directory {root}"
    return check_index(read_reference_json(path, where), f"{where}: {INDEX}", ReferenceDataError)


def write_reference(out, name: str, arrays: dict, metadata: dict) -> Path:
    """Write one task's reference into out/<slug>/ and add it to out/reference.json (other entries are kept).

    Args:
      out: the reference directory; name: the task's name (`task_name`); arrays: "probs" (n, C), "chain_probs"
        (chains, n, C) (classification) or "loc", "scale" (S, n) (regression); metadata: JSON-serialisable, with
        "kind" and "converged".

    Returns:
      The task's directory.
    """
    out = Path(out)
    index = read_index(out)
    slug = index.get(name, {}).get("dir") or slugify(name)
    taken = {v.get("dir") for k, v in index.items() if k != name and isinstance(v, dict)}
    base, i = slug, 2
    while slug in taken:
        slug, i = f"{base}-{i}", i + 1
    task_dir = out / slug
    FORMATS[metadata["kind"]].write(task_dir, arrays)
    atomic_write_text(task_dir / METADATA, json.dumps(metadata, indent=2) + "\n")
    index[name] = {"dir": slug, "kind": metadata["kind"], "metadata": f"{slug}/{METADATA}",
                   "converged": metadata["converged"]}
    atomic_write_text(out / INDEX, json.dumps(index, indent=2) + "\n")
    return task_dir
