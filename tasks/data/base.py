"""Shared pieces of the dataset loaders: the `Dataset` record, `DatasetError`, file readers, image / z-score
conversion and the default data folders: $L2E_DATA_DIR/<name>, else the per-user cache folder
$XDG_CACHE_HOME/l2e/<name> (default ~/.cache/l2e/<name>); docs/data.md, "Data folders"."""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_ENV = "L2E_DATA_DIR"
"""The environment variable naming the data root."""


class DatasetError(ValueError):
    """A user-facing data problem (unknown name, missing/corrupt file, bad argument); one-line message."""


@dataclass(frozen=True)
class Dataset:
    """A train/test classification dataset. Arrays are made read-only so cached copies cannot be mutated.

    x_*: float32, images (n, H, W, C) in [0, 1] (the CIFAR-protocol entries are instead normalised per
    channel) or tabular (n, features); y_*: int32 (n,) in [0, num_classes) (checked).
    x_valid / y_valid: an official validation split (MedMNIST), else None; tasks.splits.make_splits then
    uses it for both validation roles.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    x_valid: np.ndarray | None = None
    y_valid: np.ndarray | None = None

    def __post_init__(self):
        if (self.x_valid is None) != (self.y_valid is None):
            raise DatasetError(f"{self.name}: give both x_valid and y_valid or neither")
        for split in self.splits:
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if len(x) != len(y):
                raise DatasetError(f"{self.name}: {split} has {len(x)} inputs but {len(y)} labels")
            check_finite(x, f"{self.name}: {split} inputs")
            check_labels(y, f"{self.name}: {split} labels")
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise DatasetError(
                    f"{self.name}: {split} labels span [{int(y.min())}, {int(y.max())}] but the dataset has "
                    f"{self.num_classes} classes"
                )
        for split in self.splits:
            getattr(self, f"x_{split}").flags.writeable = False
            getattr(self, f"y_{split}").flags.writeable = False

    @property
    def splits(self) -> tuple[str, ...]:
        """The official splits present: ("train", "test") or ("train", "valid", "test")."""
        return ("train", "test") if self.x_valid is None else ("train", "valid", "test")


@dataclass(frozen=True)
class UserData:
    """Checked user arrays by split ("train", optional "valid", "test"): x (n, ...), y (n,); `where` names the
    file, y_names[split] the key or column of its targets (for messages); integer_targets: stored as integers."""

    where: str
    x: dict
    y: dict
    y_names: dict
    integer_targets: bool


def check_finite(a: np.ndarray, where: str) -> None:
    """DatasetError naming the first non-finite entry of a floating-point array (NaN / inf data would give NaN
    losses instead of an error)."""
    a = np.asarray(a)
    if a.dtype.kind in "fc" and a.size and not np.all(np.isfinite(a)):
        first = np.argwhere(~np.isfinite(a))[0]
        raise DatasetError(f"{where}: non-finite value {a[tuple(first)]} at index {tuple(int(i) for i in first)} "
                           f"({int((~np.isfinite(a)).sum())} in all)")


def check_labels(y: np.ndarray, where: str) -> None:
    """DatasetError unless class labels are integers (integer dtype, or floats with integral values)."""
    y = np.asarray(y).ravel()
    if y.dtype.kind in "iub":
        return
    ok = np.isfinite(y) & (y == np.round(y)) if y.dtype.kind == "f" else np.zeros(y.shape, bool)
    if not np.all(ok):
        raise DatasetError(f"{where}: class labels must be integers, got {y[np.argmax(~ok)]!r} ({y.dtype})")


# ----------------------------------------------------------------------------- file readers


def check_data_file(path: Path) -> None:
    """DatasetError unless `path` is a regular file of at most tasks.limits.MAX_DATA_BYTES (a FIFO or a device such
    as /dev/zero would hang the reader; a huge file would exhaust memory).

    Args:
      path: the user's data file.
    Returns:
      None.
    """
    import stat

    from tasks.limits import MAX_DATA_BYTES

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DatasetError(f"{path}: " + ("file not found (a directory)" if stat.S_ISDIR(st.st_mode)
                                          else "not a regular file"))
    if st.st_size > MAX_DATA_BYTES:
        raise DatasetError(f"{path}: {st.st_size} bytes, more than the limit of {MAX_DATA_BYTES} (a resource limit)")


def read_bytes(path: str | os.PathLike) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DatasetError(f"{path}: corrupt gzip data ({e})") from None
    return raw



def read_npz(path: str | os.PathLike, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read arrays `keys` of an .npz file; a missing, corrupt or truncated file or key raises DatasetError."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        f = np.load(path, allow_pickle=False)
        if not hasattr(f, "files"):
            raise DatasetError(f"{path}: not an npz archive (a single .npy array)")
        with f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise DatasetError(f"{path}: missing key {missing[0]!r}, has {sorted(f.files)}")
            return {k: f[k] for k in keys}
    except DatasetError:
        raise
    except Exception as e:  # zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, ...
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"{path}: not a readable npz file (corrupt or truncated: {msg})") from None



def as_images(x: np.ndarray) -> np.ndarray:
    """uint8 (n, H, W[, C]) -> float32 (n, H, W, C) in [0, 1]."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise DatasetError(f"expected images of shape (n, H, W[, C]), got {x.shape}")
    return (x.astype(np.float32) / 255.0) if x.dtype == np.uint8 else x.astype(np.float32)


def zscore(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = x_train.mean(0), x_train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return ((x_train - mu) / sd).astype(np.float32), ((x_test - mu) / sd).astype(np.float32)


def cache_dir() -> Path:
    """The per-user data folder: $XDG_CACHE_HOME/l2e, by default ~/.cache/l2e."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "l2e"


def data_candidates(sub: str) -> list[Path]:
    """Where a data set `sub` (e.g. "mnist", "uci/yacht", "l2e_released") is looked up, in order:
    $L2E_DATA_DIR/sub (when the variable is set), then cache_dir()/sub."""
    env = os.environ.get(DATA_ENV)
    return ([Path(env) / sub] if env else []) + [cache_dir() / sub]


def searched(sub: str) -> str:
    """Both places of `sub` for a message: "$L2E_DATA_DIR/sub (PATH or unset) nor CACHE/sub"."""
    env = os.environ.get(DATA_ENV)
    first = f"${DATA_ENV}/{sub} ({Path(env) / sub if env else DATA_ENV + ' unset'})"
    return f"{first} nor {cache_dir() / sub}"


def default_path(sub: str) -> Path:
    """The first of `data_candidates(sub)` that exists, else the last (the cache folder, for messages)."""
    candidates = data_candidates(sub)
    return next((d for d in candidates if d.exists()), candidates[-1])


def default_dir(sub: str) -> Path:
    """The folder of data set `sub` without a data_dir: the first existing of $L2E_DATA_DIR/sub and
    ~/.cache/l2e/sub; DatasetError (one line naming both) if neither exists."""
    d = default_path(sub)
    if not d.is_dir():
        raise DatasetError(f"{sub}: no data_dir given and neither {searched(sub)} exists")
    return d


def find_file(data_dir: Path, stem: str) -> Path | None:
    return next((p for p in (data_dir / stem, data_dir / f"{stem}.gz") if p.is_file()), None)



def local_dir(data_dir: Path | None, sub: str) -> Path | None:
    """The folder holding `sub`'s local files: data_dir itself, or data_dir/sub (so one data root serves all
    datasets); without data_dir, `default_dir(sub)`; None if there is none."""
    if data_dir is not None:
        data_dir = Path(data_dir)
        return data_dir / sub if (data_dir / sub).is_dir() else data_dir
    try:
        d = default_dir(sub)
    except DatasetError:
        return None
    return d if d.is_dir() else None
