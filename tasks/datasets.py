"""Datasets as numpy arrays: images float32 NHWC in [0, 1], tabular float32 (n, features) z-scored, labels int32."""
from __future__ import annotations

import functools
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

_REPO_ROOT = Path(__file__).resolve().parents[1]


class DatasetError(ValueError):
    """A user-facing data problem (unknown name, missing/corrupt file, bad argument); one-line message."""


@dataclass(frozen=True)
class Dataset:
    """A train/test classification dataset. Arrays are made read-only so cached copies cannot be mutated.

    x_*: float32, images (n, H, W, C) in [0, 1] or tabular (n, features); y_*: int32 (n,) in [0, num_classes).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    def __post_init__(self):
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if len(x) != len(y):
                raise DatasetError(f"{self.name}: {split} has {len(x)} inputs but {len(y)} labels")
        for a in (self.x_train, self.y_train, self.x_test, self.y_test):
            a.flags.writeable = False


# ----------------------------------------------------------------------------- file readers


def _read_bytes(path: str | os.PathLike) -> bytes:
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


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read a uint8 IDX file (raw or gzip, detected by the 1f 8b magic) into an array of its declared dims."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise DatasetError(f"{path}: bad IDX magic: expected 00 00 08 <ndim>, got {raw[:4].hex(' ') or 'empty file'}")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path}: truncated IDX header: expected {header} bytes, got {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    expected, got = int(np.prod(dims, dtype=np.int64)), len(raw) - header
    if got != expected:
        kind = "truncated" if got < expected else "oversized"
        raise DatasetError(f"{path}: {kind} IDX file: expected {expected} bytes of data, got {got}")
    return np.frombuffer(raw, np.uint8, expected, header).reshape(dims)


def read_npz_images(path: str | os.PathLike, key: str = "arr_0") -> np.ndarray:
    """Read array `key` of an .npz file (e.g. the KMNIST release, key "arr_0")."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        with np.load(path) as f:
            if key not in f.files:
                raise DatasetError(f"{path}: missing key {key!r}, has {sorted(f.files)}")
            return f[key]
    except (OSError, ValueError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{path}: not a readable npz file ({e})") from None


# ----------------------------------------------------------------------------- helpers


def _images(x: np.ndarray) -> np.ndarray:
    """uint8 (n, H, W[, C]) -> float32 (n, H, W, C) in [0, 1]."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise DatasetError(f"expected images of shape (n, H, W[, C]), got {x.shape}")
    return (x.astype(np.float32) / 255.0) if x.dtype == np.uint8 else x.astype(np.float32)


def _zscore(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = x_train.mean(0), x_train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return ((x_train - mu) / sd).astype(np.float32), ((x_test - mu) / sd).astype(np.float32)


def _default_dir(sub: str) -> Path:
    if env := os.environ.get("L2E_DATA_DIR"):
        return Path(env) / sub
    shared = _REPO_ROOT.parent / "shared" / "data" / sub
    if shared.is_dir():
        return shared
    raise DatasetError(f"{sub}: no data_dir given and neither $L2E_DATA_DIR/{sub} nor {shared} exists")


def _find(data_dir: Path, stem: str) -> Path | None:
    return next((p for p in (data_dir / stem, data_dir / f"{stem}.gz") if p.is_file()), None)


# ----------------------------------------------------------------------------- loaders


def _digits(data_dir: Path | None) -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    perm = np.random.default_rng(0).permutation(len(d.target))
    x = (d.images[perm] / 16.0).astype(np.float32)[..., None]
    y = d.target[perm].astype(np.int32)
    return Dataset("digits", x[:1437], y[:1437], x[1437:], y[1437:], 10)


def _blur(a: np.ndarray) -> np.ndarray:
    k = np.array([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0
    for axis in (1, 2):
        p = np.pad(a, [(0, 0)] + [(2, 2) if ax == axis else (0, 0) for ax in (1, 2)], mode="wrap")
        a = sum(w * np.take(p, range(i, i + a.shape[axis]), axis=axis) for i, w in enumerate(k))
    return a


def _synthetic(name: str, seed: int, num_classes: int, n_train: int = 2000, n_test: int = 500) -> Dataset:
    """Class c = smooth random 8x8 prototype; sample = prototype rolled by ±1 px + N(0, 0.3²) noise, clipped.

    The noise level makes a linear model reach ~90 % test accuracy, so the task is not trivial.
    """
    rng = np.random.default_rng(seed)
    protos = _blur(rng.random((num_classes, 8, 8)))
    lo, hi = protos.min((1, 2), keepdims=True), protos.max((1, 2), keepdims=True)
    protos = (protos - lo) / (hi - lo)
    n = n_train + n_test
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
    shifts = rng.integers(-1, 2, (n, 2))
    x = np.stack([np.roll(protos[c], tuple(s), axis=(0, 1)) for c, s in zip(y, shifts)])
    x = np.clip(x + 0.3 * rng.standard_normal(x.shape), 0.0, 1.0).astype(np.float32)[..., None]
    return Dataset(name, x[:n_train], y[:n_train], x[n_train:], y[n_train:], num_classes)


def _tabular(name: str) -> Callable[[Path | None], Dataset]:
    def load(data_dir: Path | None) -> Dataset:
        import sklearn.datasets as skd
        from sklearn.model_selection import train_test_split

        d = getattr(skd, f"load_{name}")()
        xtr, xte, ytr, yte = train_test_split(
            d.data, d.target, test_size=0.2, random_state=0, stratify=d.target
        )
        xtr, xte = _zscore(xtr, xte)
        return Dataset(name, xtr, ytr.astype(np.int32), xte, yte.astype(np.int32), len(d.target_names))

    return load


def _idx_dataset(name: str) -> Callable[[Path | None], Dataset]:
    """MNIST-format loader: the 4 IDX files in data_dir (KMNIST may instead use its .npz release)."""

    def load(data_dir: Path | None) -> Dataset:
        data_dir = Path(data_dir) if data_dir is not None else _default_dir(name)
        arrays = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            for part, kind in (("x", "images-idx3-ubyte"), ("y", "labels-idx1-ubyte")):
                path = _find(data_dir, f"{prefix}-{kind}")
                npz = data_dir / f"{name}-{split}-{'imgs' if part == 'x' else 'labels'}.npz"
                if path is not None:
                    arrays[part + split] = read_idx(path)
                elif name == "kmnist" and npz.is_file():
                    arrays[part + split] = read_npz_images(npz, "arr_0")
                else:
                    alt = f" or {npz.name}" if name == "kmnist" else ""
                    raise DatasetError(f"{name}: missing {prefix}-{kind}[.gz]{alt} in {data_dir}")
        return Dataset(
            name,
            _images(arrays["xtrain"]),
            arrays["ytrain"].astype(np.int32),
            _images(arrays["xtest"]),
            arrays["ytest"].astype(np.int32),
            10,
        )

    return load


DATASETS: dict[str, Callable[[Path | None], Dataset]] = {
    "digits": _digits,
    "synthetic_images": lambda _: _synthetic("synthetic_images", seed=1234, num_classes=10),
    "synthetic_images_b": lambda _: _synthetic("synthetic_images_b", seed=98765, num_classes=6),
    "breast_cancer": _tabular("breast_cancer"),
    "wine": _tabular("wine"),
    "iris": _tabular("iris"),
    "mnist": _idx_dataset("mnist"),
    "fashion_mnist": _idx_dataset("fashion_mnist"),
    "kmnist": _idx_dataset("kmnist"),
}
"""Registry name -> loader(data_dir). Names "tfds:<name>" are handled by `load_dataset` too."""

TABULAR = frozenset({"breast_cancer", "wine", "iris"})
"""Registry names whose inputs are feature vectors (n, features), not images: only MLPs apply."""


def check_dataset_name(name: str) -> None:
    """Raise DatasetError unless `name` is in DATASETS or of the form "tfds:<name>"."""
    if name not in DATASETS and not (name.startswith("tfds:") and len(name) > 5):
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}, tfds:<name>")


# ----------------------------------------------------------------------------- tensorflow_datasets


def _tfds_to_dataset(train_tuple, test_tuple, name: str, num_classes: int | None = None) -> Dataset:
    """Pure conversion of tfds numpy (images (n, H, W[, C]) uint8, labels (n,)) tuples into a Dataset."""
    (xtr, ytr), (xte, yte) = train_tuple, test_tuple
    ytr, yte = np.asarray(ytr).astype(np.int32).reshape(-1), np.asarray(yte).astype(np.int32).reshape(-1)
    if num_classes is None:
        num_classes = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    return Dataset(name, _images(xtr), ytr, _images(xte), yte, int(num_classes))


def _load_tfds(name: str, data_dir: str | None) -> Dataset:
    """Load "tfds:<name>" (train/test splits); downloads only if $L2E_TFDS_DOWNLOAD=1."""
    tfds_name = name.removeprefix("tfds:")
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"{name}: tensorflow_datasets is not installed; pip install tensorflow-datasets") from None
    try:
        (train, test), info = tfds.load(
            tfds_name,
            split=["train", "test"],
            batch_size=-1,
            as_supervised=True,
            data_dir=data_dir,
            download=os.environ.get("L2E_TFDS_DOWNLOAD") == "1",
            with_info=True,
        )
    except Exception as e:  # tfds raises many types; surface one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DatasetError(f"{name}: tfds.load failed: {type(e).__name__}: {msg}") from None
    label = info.features["label"]
    return _tfds_to_dataset(tfds.as_numpy(train), tfds.as_numpy(test), name, getattr(label, "num_classes", None))


# ----------------------------------------------------------------------------- entry point


@functools.lru_cache(maxsize=8)
def _load_full(name: str, data_dir: str | None) -> Dataset:
    if name.startswith("tfds:"):
        return _load_tfds(name, data_dir)
    return DATASETS[name](Path(data_dir) if data_dir is not None else None)


def load_dataset(
    name: str, data_dir: str | None = None, max_train: int | None = None, max_test: int | None = None
) -> Dataset:
    """Load dataset `name` (see DATASETS, or "tfds:<name>"), keeping the first max_train / max_test examples."""
    check_dataset_name(name)
    for arg, v in (("max_train", max_train), ("max_test", max_test)):
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise DatasetError(f"{name}: {arg} must be a positive int or None, got {v!r}")
    ds = _load_full(name, None if data_dir is None else str(data_dir))
    if max_train is None and max_test is None:
        return ds
    return Dataset(
        ds.name, ds.x_train[:max_train], ds.y_train[:max_train], ds.x_test[:max_test], ds.y_test[:max_test],
        ds.num_classes,
    )
