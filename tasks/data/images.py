"""Image classification sets from local files and generators: scikit-learn digits, the synthetic prototype
sets, MNIST-format IDX folders (MNIST, Fashion-MNIST, KMNIST, with a TFDS fallback) and MedMNIST `.npz` files.
Images are float32 NHWC in [0, 1], labels int32."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from tasks.data.base import (Dataset, DatasetError, as_images, find_file, local_dir, read_bytes, read_npz,
                             searched)
from tasks.data.tfds import TFDSSource, tfds_available, tfds_named


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read a uint8 IDX file (raw or gzip, detected by the 1f 8b magic) into an array of its declared dims."""
    raw = read_bytes(path)
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
    return read_npz(path, (key,))[key]



def digits(data_dir: Path | None) -> Dataset:
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


def synthetic(name: str, seed: int, num_classes: int, n_train: int = 2000, n_test: int = 500) -> Dataset:
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



def _has_idx(d: Path | None) -> bool:
    return d is not None and all(
        find_file(d, f"{p}-{k}") is not None
        for p in ("train", "t10k") for k in ("images-idx3-ubyte", "labels-idx1-ubyte")
    )


def idx_dataset(name: str, tfds_name: str | None = None) -> Callable[[Path | None], Dataset]:
    """MNIST-format loader: the 4 IDX files in data_dir (KMNIST may instead use its .npz release).

    Without data_dir and without a local copy ($L2E_DATA_DIR/<name>, ~/.cache/l2e/<name>), falls back to
    TFDS `tfds_name` when tensorflow_datasets is installed (the paper-scale setting).
    """

    def load(data_dir: Path | None) -> Dataset:
        d = local_dir(data_dir, name)
        if data_dir is None and tfds_name is not None and not _has_idx(d) and name != "kmnist":
            if tfds_available():
                return tfds_named(name, TFDSSource(tfds_name, 10), None)
            if d is None:
                raise DatasetError(
                    f"{name}: no data_dir given, no local copy in {searched(name).replace(' nor ', ' or ')}, "
                    f"and tensorflow_datasets is not installed (pip install tensorflow-datasets)"
                )
        if d is None:
            raise DatasetError(f"{name}: no data_dir given and neither {searched(name)} exists")
        arrays = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            for part, kind in (("x", "images-idx3-ubyte"), ("y", "labels-idx1-ubyte")):
                path = find_file(d, f"{prefix}-{kind}")
                npz = d / f"{name}-{split}-{'imgs' if part == 'x' else 'labels'}.npz"
                if path is not None:
                    arrays[part + split] = read_idx(path)
                elif name == "kmnist" and npz.is_file():
                    arrays[part + split] = read_npz_images(npz, "arr_0")
                else:
                    alt = f" or {npz.name}" if name == "kmnist" else ""
                    raise DatasetError(f"{name}: missing {prefix}-{kind}[.gz]{alt} in {d}")
        for split in ("train", "test"):
            x, y = arrays["x" + split], arrays["y" + split]
            if x.ndim != 3 or y.ndim != 1:
                raise DatasetError(f"{name}: {split} images must be (n, H, W) and labels (n,), got {x.shape} "
                                   f"and {y.shape}")
        return Dataset(
            name,
            as_images(arrays["xtrain"]),
            arrays["ytrain"].astype(np.int32),
            as_images(arrays["xtest"]),
            arrays["ytest"].astype(np.int32),
            10,
        )

    return load



MEDMNIST_CLASSES: dict[str, int] = {
    "pathmnist": 9, "dermamnist": 7, "octmnist": 4, "pneumoniamnist": 2, "retinamnist": 5, "breastmnist": 2,
    "bloodmnist": 8, "tissuemnist": 8, "organamnist": 11, "organcmnist": 11, "organsmnist": 11,
}
"""MedMNIST v2 single-label 2-D datasets and their class counts (chestmnist is multi-label: not supported)."""


def medmnist(name: str) -> Callable[[Path | None], Dataset]:
    """MedMNIST v2 release file `<name>.npz` (keys {train,val,test}_{images,labels}; images (n, 28, 28[, 3])
    uint8, labels (n, 1)) from data_dir, data_dir/medmnist, $L2E_DATA_DIR/medmnist or ~/.cache/l2e/medmnist.
    The official validation split is kept (Dataset.x_valid) and serves both validation roles."""
    num_classes = MEDMNIST_CLASSES[name]

    def load(data_dir: Path | None) -> Dataset:
        d = local_dir(data_dir, "medmnist")
        if d is None:
            raise DatasetError(f"{name}: no data_dir given and neither {searched('medmnist')} exists")
        path = d / f"{name}.npz"
        if not path.is_file() and data_dir is not None and (Path(data_dir) / f"{name}.npz").is_file():
            path = Path(data_dir) / f"{name}.npz"
        keys = tuple(f"{s}_{k}" for s in ("train", "val", "test") for k in ("images", "labels"))
        a = read_npz(path, keys)
        out = {}
        for split in ("train", "val", "test"):
            x, y = a[f"{split}_images"], a[f"{split}_labels"]
            if x.ndim not in (3, 4) or x.dtype != np.uint8:
                raise DatasetError(f"{path}: {split}_images must be uint8 (n, H, W[, C]), got {x.dtype} {x.shape}")
            if y.ndim == 2 and y.shape[1] != 1:
                raise DatasetError(f"{path}: {split}_labels has shape {y.shape}: multi-label data is not supported")
            out[split] = (as_images(x), y.reshape(-1).astype(np.int32))
        return Dataset(name, *out["train"], *out["test"], num_classes, *out["val"])

    return load
