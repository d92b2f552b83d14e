"""Reference posteriors on disk (NUTS references, `python -m evaluate reference`): the format, writing and reading.

One module for both users: evaluate writes references (evaluate.hmc_reference) and reads them for its reports;
meta_train reads them for the "fidelity" objective.  A reference directory ROOT holds

    ROOT/reference.json           the index {task name: {"dir": SUBDIR, "kind", "metadata": "SUBDIR/metadata.json",
                                  "converged"}}; task names as `task_name` (evaluate's report names)
    ROOT/SUBDIR/metadata.json     {"task", "kind", "spec" (the task spec as a dict), "data": {"train", "test", …, the
                                  kind's fingerprint of the test split}, sampler, diagnostics, …}
    classification: SUBDIR/probs.txt (BMA probabilities (n_test, C), one row per test point in the task's order,
                    "%.18e"; the NeurIPS 2021 BDL text layout) and SUBDIR/chain_probs.npz (probs: per-chain BMA
                    probabilities (chains, n_test, C) float32); fingerprint: "classes", "test_labels_sha256"
    regression:     SUBDIR/predictive.npz (loc, scale: per-draw Gaussian predictives (S, n_test) float32, standardised
                    target units); fingerprint: "test_y_mean", "test_y_std"

Reading checks everything and refuses with one `ReferenceDataError` line: a stored spec that is not the task's
(`tasks.stored_spec.comparable_specs`: every field but data_dir, fields added later at their old defaults), another
test split (size, label fingerprint or target statistics), probabilities of the wrong shape, outside [0, 1] or with
rows that do not sum to 1, a row order that does not beat the majority class (`check_alignment`).  A plain text
file of probabilities (`load_reference_probs`) is read with the same checks.  Every file is written atomically.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from l2e.io import atomic_write_bytes, atomic_write_text, read_json
from tasks.stored_spec import comparable_specs

__all__ = ["INDEX", "ROW_SUM_ATOL", "ReferenceDataError", "check_alignment", "find_reference_dir", "labels_sha256",
           "load_reference_dir", "load_reference_probs", "load_task_dir", "load_text_reference", "read_index",
           "read_json_index", "slugify", "task_name", "write_reference"]

INDEX = "reference.json"
"""The index file that marks a reference directory."""
METADATA = "metadata.json"
ROW_SUM_ATOL = 1e-3
"""Default tolerance on |row sum − 1| (the HMC files are float32 averages: within about 1e-6; text files
written with 4–5 decimals need ~1e-3)."""


class ReferenceDataError(ValueError):
    """A reference that cannot be used (missing, unreadable, wrong shape, not probabilities, another task); one line."""


def task_name(spec) -> str:
    """A task's report name and reference index key: spec.name, + "-n<max_train>" when max_train is set."""
    max_train = getattr(spec, "max_train", None)
    return spec.name if max_train is None else f"{spec.name}-n{max_train}"


def slugify(name: str) -> str:
    """Directory name of a task: characters other than [A-Za-z0-9._-] become "_"."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".")
    return slug or "task"


def labels_sha256(labels) -> str:
    """Fingerprint of integer test labels (int64, in test order)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(labels).astype(np.int64).ravel()).tobytes()).hexdigest()


def _read_json(path: Path, where: str):
    return read_json(path, where, ReferenceDataError, shown=path.name)


# --------------------------------------------------------------------------- probabilities (classification)


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


# --------------------------------------------------------------------------- the two file formats


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
        if data.get("test_y_mean") is not None and (abs(float(data["test_y_mean"]) - float(np.mean(y))) > 1e-4
                                                    or abs(float(data["test_y_std"]) - float(np.std(y))) > 1e-4):
            raise ReferenceDataError(f"{where}: computed on other test targets (mean/std differ) than {name!r}")

    @staticmethod
    def write(task_dir: Path, arrays: dict) -> None:
        atomic_write_bytes(task_dir / "predictive.npz", _npz_bytes(
            lambda f: np.savez(f, loc=arrays["loc"].astype(np.float32), scale=arrays["scale"].astype(np.float32))))

    @staticmethod
    def read(task_dir: Path, task, y: np.ndarray) -> dict:
        path = task_dir / "predictive.npz"
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
        if loc.shape[1] != y.shape[0]:
            raise ReferenceDataError(f"{where}: {loc.shape[1]} test columns, expected {y.shape[0]}")
        if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale))):
            raise ReferenceDataError(f"{where}: non-finite loc or scale")
        if np.any(scale <= 0):
            raise ReferenceDataError(f"{where}: non-positive scale")
        return {"loc": loc, "scale": scale}

    @staticmethod
    def read_text(path: Path, task, y: np.ndarray, name: str) -> dict:
        raise ReferenceDataError(f"--reference {path}: task {name!r} is {task.kind}; a text file of class "
                                 "probabilities fits only classification (give a reference directory)")


FORMATS = {"classification": _Probabilities, "regression": _GaussianDraws}
"""The files of a reference by the kind of its task's likelihood (`task.kind`, stored as metadata "kind")."""


def data_fingerprint(task) -> dict:
    """The test split's fingerprint stored in metadata "data": {"classes", "test_labels_sha256"} (classification)
    or {"test_y_mean", "test_y_std"} (regression)."""
    return FORMATS[task.kind].fingerprint(task, np.asarray(task.splits.test[1]))


# --------------------------------------------------------------------------- writing


def read_index(root) -> dict:
    """The index of reference directory `root` ({} if it has none or it is unreadable)."""
    try:
        index = json.loads((Path(root) / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


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


# --------------------------------------------------------------------------- reading


def _check_metadata(meta, task, name: str, where: str) -> None:
    """Stored kind, spec and test data must be those of the built task."""
    if not isinstance(meta, dict) or "spec" not in meta or "kind" not in meta:
        raise ReferenceDataError(f"{where}: {METADATA} lacks the task kind or spec")
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
    meta = _read_json(task_dir / METADATA, where)
    _check_metadata(meta, task, name, where)
    out = {"path": str(task_dir), "kind": task.kind, "metadata": meta, "dispersion": meta.get("dispersion")}
    out.update(FORMATS[task.kind].read(task_dir, task, np.asarray(task.splits.test[1])))
    return out


def load_text_reference(path, task, name: str) -> dict:
    """A plain text file of class probabilities (`load_reference_probs`, `check_alignment`) as the reference of
    `task` (named `name` in messages): {"path", "kind", "probs" (n, C) float64, "accuracy", "metadata": None,
    "dispersion": None}; ReferenceDataError for a task whose predictive is not a class distribution."""
    out = {"path": str(path), "kind": task.kind, "metadata": None, "dispersion": None}
    out.update(FORMATS[task.kind].read_text(Path(path), task, np.asarray(task.splits.test[1]), name))
    return out


def read_json_index(root: Path, what: str) -> dict:
    """The index (reference.json) of reference directory `root`, a JSON object; `what` names it in messages."""
    index = _read_json(root / INDEX, what)
    if not isinstance(index, dict):
        raise ReferenceDataError(f"{what}: {INDEX} is not a JSON object")
    return index


def load_reference_dir(path, name: str, task) -> dict:
    """The reference of task `name` in reference directory `path` (by its index entry), checked against `task`;
    returns `load_task_dir`'s dict."""
    root = Path(path)
    index = read_json_index(root, f"reference directory {root}")
    if name not in index:
        raise ReferenceDataError(f"reference directory {root} has no task {name!r} (it has: "
                                 f"{', '.join(index) or 'none'})")
    entry = index[name]
    if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
        raise ReferenceDataError(f"reference directory {root}: bad {INDEX} entry for {name!r}")
    return load_task_dir(root / entry["dir"], task, name)


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
        if not isinstance(entry, dict) or not isinstance(entry.get("dir"), str):
            continue
        meta_path = root / entry["dir"] / METADATA
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
        raise ReferenceDataError(f"reference {root / by_name[0]} was computed for another task spec than {label} "
                                 f"{name!r} ({', '.join(by_name[1])} differ)")
    raise ReferenceDataError(f"{what} {root} has no reference for {label} {name!r} (it has: "
                             f"{', '.join(index) or 'none'}); compute one with `python -m evaluate reference`")
