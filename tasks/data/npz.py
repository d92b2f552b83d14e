"""The user's arrays: an .npz file with x_train, y_train, x_test, y_test (x_valid, y_valid optional).

x_*: numeric (n, features) or images (n, H, W[, C]), the same example shape in every split; y_*: numeric (n,),
class labels 0..C-1 (integer dtype) or regression targets (float dtype).  `read_npz_data` checks everything
before any run: missing or unreadable keys, non-numeric arrays, empty arrays, shape mismatches and NaN / inf;
each problem is one DatasetError line naming the file and the key.  tasks.data.user turns the arrays into a
classification Dataset or RegressionData."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.data.base import DatasetError, UserData, check_data_file
from tasks.limits import MAX_DATA_BYTES

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
OPTIONAL = ("x_valid", "y_valid")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _load(path: Path) -> dict[str, np.ndarray]:
    """The arrays of REQUIRED (+ OPTIONAL when present) from `path`."""
    check_data_file(path)
    try:
        f = np.load(path, allow_pickle=False)
    except Exception as e:  # BadZipFile, ValueError, OSError, EOFError, ...
        raise DatasetError(f"{path}: not a readable npz file ({_first_line(e)})") from None
    if not hasattr(f, "files"):
        raise DatasetError(f"{path}: a single .npy array, not an npz archive with keys {', '.join(REQUIRED)}")
    with f:
        missing = [k for k in REQUIRED if k not in f.files]
        if missing:
            raise DatasetError(f"{path}: missing key {missing[0]!r} (needs {', '.join(REQUIRED)}; "
                               f"has {', '.join(sorted(f.files)) or 'none'})")
        valid = [k for k in OPTIONAL if k in f.files]
        if len(valid) == 1:
            other = OPTIONAL[1 - OPTIONAL.index(valid[0])]
            raise DatasetError(f"{path}: key {valid[0]!r} without {other!r} (give both or neither)")
        unpacked = sum(f.zip.getinfo(f"{k}.npy").file_size for k in REQUIRED + tuple(valid))
        if unpacked > MAX_DATA_BYTES:  # checked before any array is read (a small file can unpack to a huge one)
            raise DatasetError(f"{path}: its arrays take {unpacked} bytes, more than the limit of {MAX_DATA_BYTES} "
                               "(a resource limit)")
        arrays = {}
        for k in REQUIRED + tuple(valid):
            try:
                arrays[k] = np.asarray(f[k])
            except Exception as e:  # object arrays (pickles refused), corrupt members
                raise DatasetError(f"{path}: key {k!r} cannot be read ({_first_line(e)})") from None
    return arrays


def _check(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Numeric, non-empty, shapes that fit, finite; DatasetError naming the key otherwise."""
    for k, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise DatasetError(f"{path}: key {k!r} is not numeric (dtype {a.dtype})")
        if a.size == 0:
            raise DatasetError(f"{path}: key {k!r} is empty (shape {a.shape})")
    example = arrays["x_train"].shape[1:]
    for split in ("train", "valid", "test"):
        if f"x_{split}" not in arrays:
            continue
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if y.ndim != 1:
            raise DatasetError(f"{path}: key 'y_{split}' must have shape (n,), has {y.shape}")
        if x.ndim < 2:
            raise DatasetError(f"{path}: key 'x_{split}' must have shape (n, features) or (n, H, W[, C]), "
                               f"has {x.shape}")
        if len(x) != len(y):
            raise DatasetError(f"{path}: shape mismatch: key 'x_{split}' has {len(x)} examples, 'y_{split}' {len(y)}")
        if x.shape[1:] != example:
            raise DatasetError(f"{path}: shape mismatch: key 'x_{split}' has examples of shape {x.shape[1:]}, "
                               f"'x_train' {example}")
    for k, a in arrays.items():
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            row = int(np.argwhere(~np.isfinite(a.reshape(len(a), -1)))[0, 0])
            raise DatasetError(f"{path}: key {k!r} holds NaN or inf (first in example {row})")


def read_npz_data(path) -> UserData:
    """The checked arrays of the user's .npz file `path` as UserData."""
    path = Path(path)
    arrays = _load(path)
    _check(path, arrays)
    splits = [s for s in ("train", "valid", "test") if f"x_{s}" in arrays]
    return UserData(
        where=str(path),
        x={s: arrays[f"x_{s}"] for s in splits},
        y={s: arrays[f"y_{s}"] for s in splits},
        y_names={s: f"key 'y_{s}'" for s in splits},
        integer_targets=arrays["y_train"].dtype.kind in "biu",
    )
