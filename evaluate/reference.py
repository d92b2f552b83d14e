"""Reference predictive probabilities (e.g. full-batch HMC, shared/spec/REFERENCE_DATA.md): loading and checks.

A reference file is plain text, one row per test point (in the project's test order), one column per class,
each row a probability vector (a Bayesian model average, not logits).  Whitespace- or comma-separated
(the delimiter is taken from the first line).  `load_reference_probs` refuses, with a one-line
`ReferenceDataError`, a file that is missing, not numeric, of the wrong number of rows or classes, has
entries outside [0, 1] or rows that do not sum to 1 (|sum − 1| ≤ atol); it never renormalises silently.
`check_alignment` is the mandatory row-order check: the reference's own accuracy on the project's test
labels must beat always predicting the most frequent class, otherwise the rows are not in the test order.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["ROW_SUM_ATOL", "ReferenceDataError", "check_alignment", "load_reference_probs"]

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
