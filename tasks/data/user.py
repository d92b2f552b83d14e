"""The user's own data (npz: tasks.data.npz, csv: tasks.data.csv) as a classification `Dataset` or
`RegressionData`, and the likelihood its targets imply.

Dataset strings (tasks.spec_parse.ParsedTask.dataset): "npz:PATH[:classes=C]" and
"csv:PATH:target=COLUMN[:classes=C][:test=F][:seed=S]".

  * likelihood (when the task string does not state it): integer targets (an integer dtype in the npz, integer
    tokens in the csv) -> classification; any non-integer target -> regression; whole numbers stored as floats
    ("1.0") are ambiguous and refused with a request for :likelihood=.
  * classification: labels 0..C-1, C = classes= or 1 + the largest training label; every split's labels are
    checked against [0, C).  Feature matrices (n, d) are z-scored with the training split's statistics; image
    arrays (n, H, W[, C]) are used as given (uint8 scaled to [0, 1]).
  * regression: the validation rows are x_valid / y_valid, else the last `valid` fraction (default 0.1) of the
    training rows; inputs (flattened to (n, d)) and targets are z-scored with the remaining training rows'
    statistics, so metrics are on the standardised target scale (as the UCI sets).
"""
from __future__ import annotations

import functools
import os

import numpy as np

from tasks.data.base import Dataset, DatasetError, UserData, as_images
from tasks.data.uci import RegressionData
from tasks.limits import MAX_CLASSES

MAX_IMAGE_VALUE = 1e6
"""The largest magnitude of a floating-point image input (images are used as given, not standardised)."""

DEFAULT_REGRESSION_VALID = 0.1


def _split_dataset(dataset: str) -> tuple[str, str, dict]:
    from tasks.spec_parse import split_dataset

    return split_dataset(dataset)


@functools.lru_cache(maxsize=4)
def _read_cached(dataset: str, stamp: tuple) -> UserData:
    source, path, opts = _split_dataset(dataset)
    if source == "npz":
        from tasks.data.npz import read_npz_data

        return read_npz_data(path)
    from tasks.data.csv import read_csv_data

    return read_csv_data(path, opts["target"], opts.get("test", 0.2), opts.get("seed", 0))


def read_user_data(dataset: str) -> tuple[UserData, dict]:
    """(checked UserData, data options) of an npz / csv dataset string (read once per file version)."""
    _, path, opts = _split_dataset(dataset)
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    return _read_cached(dataset, stamp), opts


def infer_likelihood(dataset: str) -> tuple[str, str]:
    """("classification" | "regression", why) from the targets of the user's data; DatasetError if ambiguous."""
    data, _ = read_user_data(dataset)
    name = data.y_names["train"]
    if data.integer_targets:
        return "classification", f"inferred: integer targets in {name}"
    y = data.y["train"]
    if np.any(y != np.round(y)):
        return "regression", f"inferred: non-integer targets in {name}"
    raise DatasetError(f"{data.where}: cannot tell classification from regression: {name} holds whole numbers "
                       "stored as floats; add :likelihood=classification or :likelihood=regression to the task")


def _num_classes(data: UserData, classes: int | None) -> int:
    """C: `classes` or 1 + the largest training label; every split's labels integral and in [0, C)."""
    for split, y in data.y.items():
        bad = y[y != np.round(y)] if y.dtype.kind == "f" else y[:0]
        if bad.size:
            raise DatasetError(f"{data.where}: {data.y_names[split]} holds non-integer label {bad[0]!r}, but the "
                               "likelihood is classification")
    for split, y in data.y.items():
        top = float(np.max(y))
        if top >= MAX_CLASSES:  # before C is sized from it: an int64 label of 2**32 + 1 would wrap to 1 in int32
            raise DatasetError(f"{data.where}: {data.y_names[split]} has label {top:.0f}, beyond the limit of "
                               f"{MAX_CLASSES} classes (a resource limit)")
    if classes is not None and int(classes) > MAX_CLASSES:
        raise DatasetError(f"{data.where}: classes={classes} is more than the limit of {MAX_CLASSES} (a resource "
                           "limit)")
    num = int(classes) if classes is not None else int(np.max(data.y["train"])) + 1
    origin = "classes=" if classes is not None else "1 + the largest training label; set :classes=C"
    for split, y in data.y.items():
        lo, hi = int(np.min(y)), int(np.max(y))
        if lo < 0 or hi >= num:
            raise DatasetError(f"{data.where}: {data.y_names[split]} has label {lo if lo < 0 else hi} outside the "
                               f"class range [0, {num}) ({origin})")
    if num < 2:
        raise DatasetError(f"{data.where}: {data.y_names['train']} has a single class; classification needs two")
    return num


def _inputs(data: UserData) -> dict:
    """Inputs by split: (n, d) z-scored with the training statistics, images as float32 (uint8 scaled)."""
    x_train = data.x["train"]
    if x_train.ndim == 2:
        return standardised(data, data.x, "inputs")
    if x_train.ndim in (3, 4):
        for split, x in data.x.items():
            if x.dtype.kind == "f" and np.max(np.abs(x)) > MAX_IMAGE_VALUE:
                raise DatasetError(f"{data.where}: {split} images hold values up to {float(np.max(np.abs(x))):.3g}; "
                                   f"image inputs must be within ±{MAX_IMAGE_VALUE:g} (uint8, or floats in [0, 1])")
        return {s: as_images(x) for s, x in data.x.items()}
    raise DatasetError(f"{data.where}: inputs of shape {x_train.shape}: expected (n, features) or (n, H, W[, C])")


def standardised(data: UserData, arrays: dict, what: str, stats_from: str = "train") -> dict:
    """Arrays by split z-scored with the `stats_from` split's statistics (computed in the arrays' own dtype), as
    float32; DatasetError if the statistics or the result are not finite (values too large to standardise: float32
    data near its limit overflow, or a standard deviation that does and zeroes every input), numpy's overflow
    warnings silenced.

    Args:
      data: the user's data (for messages).
      arrays: {split: (n, ...) numeric}.
      what: "inputs" or "targets", for the message.
      stats_from: the split whose mean and standard deviation are used.
    Returns:
      {split: float32 array of the same shape}.
    """
    ref = arrays[stats_from]
    with np.errstate(all="ignore"):
        mu, sd = ref.mean(0), ref.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        out = {s: ((a - mu) / sd).astype(np.float32) for s, a in arrays.items()}
    for split, a in out.items():
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(mu)) and np.all(np.isfinite(sd))):
            raise DatasetError(f"{data.where}: {split} {what} are too large to standardise (magnitudes up to "
                               f"{float(np.max(np.abs(arrays[split]))):.3g}); rescale them")
    return out


def load_user_classification(dataset: str) -> Dataset:
    """The classification Dataset of an npz / csv dataset string (module docstring)."""
    data, opts = read_user_data(dataset)
    num = _num_classes(data, opts.get("classes"))
    x = _inputs(data)
    y = {s: np.ascontiguousarray(v, dtype=np.int32) for s, v in data.y.items()}
    return Dataset(data.where, x["train"], y["train"], x["test"], y["test"], num, x.get("valid"), y.get("valid"))


def load_user_regression(dataset: str, valid: float | None = None) -> RegressionData:
    """The standardised RegressionData of an npz / csv dataset string (module docstring)."""
    data, _ = read_user_data(dataset)
    x = {s: np.asarray(v, np.float64).reshape(len(v), -1) for s, v in data.x.items()}
    y = {s: np.asarray(v, np.float64) for s, v in data.y.items()}
    if "valid" not in x:
        n = len(y["train"])
        n_va = max(1, round((valid or DEFAULT_REGRESSION_VALID) * n))
        if n - n_va < 2:
            raise DatasetError(f"{data.where}: {n} training rows are too few to hold out {n_va} for validation")
        x["valid"], y["valid"] = x["train"][n - n_va:], y["train"][n - n_va:]
        x["train"], y["train"] = x["train"][:n - n_va], y["train"][:n - n_va]
    zx, zy = standardised(data, x, "inputs"), standardised(data, y, "targets")
    x_mu, x_sd = x["train"].mean(0), x["train"].std(0)
    x_sd = np.where(x_sd > 0, x_sd, 1.0)
    y_mu, y_sd = float(y["train"].mean()), float(y["train"].std())
    y_sd = y_sd if y_sd > 0 else 1.0
    return RegressionData(data.where, "user", *(np.ascontiguousarray(a) for a in (
        zx["train"], zy["train"], zx["valid"], zy["valid"], zx["test"], zy["test"])), x_mu, x_sd, y_mu, y_sd)
