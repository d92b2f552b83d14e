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


def read_npz_images(path: str | os.PathLike, key: str = "arr_0") -> np.ndarray:
    """Read array `key` of an .npz file (e.g. the KMNIST release, key "arr_0")."""
    return read_npz(path, (key,))[key]


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


def _local_dir(data_dir: Path | None, sub: str) -> Path | None:
    """The folder holding `sub`'s local files: data_dir itself, or data_dir/sub (so one data root serves all
    datasets); without data_dir, $L2E_DATA_DIR/sub or ../shared/data/sub; None if there is none."""
    if data_dir is not None:
        data_dir = Path(data_dir)
        return data_dir / sub if (data_dir / sub).is_dir() else data_dir
    try:
        d = _default_dir(sub)
    except DatasetError:
        return None
    return d if d.is_dir() else None


def _has_idx(d: Path | None) -> bool:
    return d is not None and all(
        _find(d, f"{p}-{k}") is not None
        for p in ("train", "t10k") for k in ("images-idx3-ubyte", "labels-idx1-ubyte")
    )


def _idx_dataset(name: str, tfds_name: str | None = None) -> Callable[[Path | None], Dataset]:
    """MNIST-format loader: the 4 IDX files in data_dir (KMNIST may instead use its .npz release).

    Without data_dir and without a local copy ($L2E_DATA_DIR/<name>, ../shared/data/<name>), falls back to
    TFDS `tfds_name` when tensorflow_datasets is installed (the paper-scale setting).
    """

    def load(data_dir: Path | None) -> Dataset:
        d = _local_dir(data_dir, name)
        if data_dir is None and tfds_name is not None and not _has_idx(d) and name != "kmnist":
            if _tfds_available():
                return _tfds_named(name, _TFDSSource(tfds_name, 10), None)
            if d is None:
                raise DatasetError(
                    f"{name}: no data_dir given, no local copy in $L2E_DATA_DIR/{name} or ../shared/data/{name}, "
                    f"and tensorflow_datasets is not installed (pip install tensorflow-datasets)"
                )
        if d is None:
            raise DatasetError(f"{name}: no data_dir given and neither $L2E_DATA_DIR/{name} nor "
                               f"../shared/data/{name} exists")
        arrays = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            for part, kind in (("x", "images-idx3-ubyte"), ("y", "labels-idx1-ubyte")):
                path = _find(d, f"{prefix}-{kind}")
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
            _images(arrays["xtrain"]),
            arrays["ytrain"].astype(np.int32),
            _images(arrays["xtest"]),
            arrays["ytest"].astype(np.int32),
            10,
        )

    return load


# ----------------------------------------------------------------------------- MedMNIST (local .npz)

MEDMNIST_CLASSES: dict[str, int] = {
    "pathmnist": 9, "dermamnist": 7, "octmnist": 4, "pneumoniamnist": 2, "retinamnist": 5, "breastmnist": 2,
    "bloodmnist": 8, "tissuemnist": 8, "organamnist": 11, "organcmnist": 11, "organsmnist": 11,
}
"""MedMNIST v2 single-label 2-D datasets and their class counts (chestmnist is multi-label: not supported)."""


def _medmnist(name: str) -> Callable[[Path | None], Dataset]:
    """MedMNIST v2 release file `<name>.npz` (keys {train,val,test}_{images,labels}; images (n, 28, 28[, 3])
    uint8, labels (n, 1)) from data_dir, data_dir/medmnist, $L2E_DATA_DIR/medmnist or ../shared/data/medmnist.
    The official validation split is kept (Dataset.x_valid) and serves both validation roles."""
    num_classes = MEDMNIST_CLASSES[name]

    def load(data_dir: Path | None) -> Dataset:
        d = _local_dir(data_dir, "medmnist")
        if d is None:
            raise DatasetError(f"{name}: no data_dir given and neither $L2E_DATA_DIR/medmnist nor "
                               f"../shared/data/medmnist exists")
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
            out[split] = (_images(x), y.reshape(-1).astype(np.int32))
        return Dataset(name, *out["train"], *out["test"], num_classes, *out["val"])

    return load


# ----------------------------------------------------------------------------- tensorflow_datasets

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CIFAR_TRAIN = "train[:40960]"  # the Izmailov et al. (2021) / L2E CIFAR protocol (spec §6)

CIFAR10_CORRUPTIONS = (
    "brightness", "contrast", "defocus_blur", "elastic", "fog", "frost", "frosted_glass_blur", "gaussian_blur",
    "gaussian_noise", "impulse_noise", "jpeg_compression", "motion_blur", "pixelate", "saturate", "shot_noise",
    "snow", "spatter", "speckle_noise", "zoom_blur",
)
"""TFDS cifar10_corrupted configs are "<corruption>_<severity 1-5>"."""


@dataclass(frozen=True)
class _TFDSSource:
    """A named TFDS dataset: builder (with config), class count, split strings, optional per-channel (mean, std)."""

    tfds_name: str
    num_classes: int
    train_split: str = "train"
    test_split: str = "test"
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None


TFDS_SOURCES: dict[str, _TFDSSource] = {
    # EMNIST: the variant is explicit and the head is sized to its true class count (spec §9.7). The paper's
    # code used byclass with a 10-class head (a bug); "emnist" is the paper's variant with the correct head.
    "emnist": _TFDSSource("emnist/byclass", 62),
    "emnist_byclass": _TFDSSource("emnist/byclass", 62),
    "emnist_bymerge": _TFDSSource("emnist/bymerge", 47),
    "emnist_balanced": _TFDSSource("emnist/balanced", 47),
    "emnist_digits": _TFDSSource("emnist/digits", 10),
    "emnist_mnist": _TFDSSource("emnist/mnist", 10),
    "cifar10": _TFDSSource("cifar10", 10, CIFAR_TRAIN, "test", (CIFAR10_MEAN, CIFAR10_STD)),
    "cifar100": _TFDSSource("cifar100", 100, CIFAR_TRAIN, "test", (CIFAR100_MEAN, CIFAR100_STD)),
    # SVHN as the OOD set of CIFAR-10 models: normalised with CIFAR-10's statistics (the model's input space)
    "svhn_cropped": _TFDSSource("svhn_cropped", 10, "train", "test", (CIFAR10_MEAN, CIFAR10_STD)),
}
"""Registry names loaded through tensorflow_datasets (data_dir is TFDS's data_dir; $TFDS_DATA_DIR works too)."""


def _tfds_available() -> bool:
    try:
        import tensorflow_datasets  # noqa: F401
    except ImportError:
        return False
    return True


def _import_tfds(name: str):
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"{name}: tensorflow_datasets is not installed; pip install tensorflow-datasets") from None
    return tfds


def _tfds_arrays(name: str, tfds_name: str, splits: list[str], data_dir: str | None):
    """[(x, y) numpy per split], num_classes from the builder info (None if unknown). Downloads only if
    $L2E_TFDS_DOWNLOAD=1; otherwise the data must already be prepared in TFDS's data_dir."""
    tfds = _import_tfds(name)
    try:
        arrays, info = tfds.load(
            tfds_name,
            split=splits,
            batch_size=-1,
            as_supervised=True,
            data_dir=None if data_dir is None else str(data_dir),
            download=os.environ.get("L2E_TFDS_DOWNLOAD") == "1",
            with_info=True,
        )
        out = []
        for x, y in (tfds.as_numpy(a) for a in arrays):
            out.append((np.asarray(x), np.asarray(y)))
    except Exception as e:  # tfds raises many types; surface one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = "" if os.environ.get("L2E_TFDS_DOWNLOAD") == "1" else " (set L2E_TFDS_DOWNLOAD=1 to allow a download)"
        raise DatasetError(f"{name}: tfds.load({tfds_name!r}) failed: {type(e).__name__}: {msg}{hint}") from None
    try:
        label = info.features["label"]
    except Exception:  # no "label" feature (or no info): the class count is inferred from the labels
        label = None
    return out, getattr(label, "num_classes", None)


def _tfds_to_dataset(train_tuple, test_tuple, name: str, num_classes: int | None = None,
                     normalize: tuple | None = None) -> Dataset:
    """Pure conversion of tfds numpy (images (n, H, W[, C]) uint8, labels (n,)) tuples into a Dataset;
    `normalize` = (mean, std) per channel, applied after scaling to [0, 1]."""
    (xtr, ytr), (xte, yte) = train_tuple, test_tuple
    ytr, yte = np.asarray(ytr).astype(np.int32).reshape(-1), np.asarray(yte).astype(np.int32).reshape(-1)
    if num_classes is None:
        num_classes = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    xtr, xte = _images(xtr), _images(xte)
    if normalize is not None:
        xtr, xte = _normalize(xtr, normalize, name), _normalize(xte, normalize, name)
    return Dataset(name, xtr, ytr, xte, yte, int(num_classes))


def _normalize(x: np.ndarray, normalize, name: str) -> np.ndarray:
    mean, std = (np.asarray(v, np.float32) for v in normalize)
    if x.shape[-1] != mean.shape[0]:
        raise DatasetError(f"{name}: expected {mean.shape[0]}-channel images, got shape {x.shape}")
    return ((x - mean) / std).astype(np.float32)


def _tfds_named(name: str, src: _TFDSSource, data_dir: str | None) -> Dataset:
    (train, test), nc = _tfds_arrays(name, src.tfds_name, [src.train_split, src.test_split], data_dir)
    if nc is not None and nc != src.num_classes:
        raise DatasetError(f"{name}: tfds reports {nc} classes for {src.tfds_name}, expected {src.num_classes}")
    return _tfds_to_dataset(train, test, name, src.num_classes, src.normalize)


def _cifar10_corrupted(name: str, data_dir: str | None) -> Dataset:
    """"cifar10_corrupted/<corruption>_<severity>": train = the CIFAR-10 protocol's training split, test = the
    corrupted CIFAR-10 test set (covariate shift), both normalised with CIFAR-10's statistics."""
    config = name.split("/", 1)[1]
    (test,), nc = _tfds_arrays(name, f"cifar10_corrupted/{config}", ["test"], data_dir)
    base = _tfds_named("cifar10", TFDS_SOURCES["cifar10"], data_dir)
    x = _normalize(_images(test[0]), (CIFAR10_MEAN, CIFAR10_STD), name)
    y = np.asarray(test[1]).astype(np.int32).reshape(-1)
    return Dataset(name, base.x_train, base.y_train, x, y, 10)


def _check_corruption(name: str) -> None:
    config = name.split("/", 1)[1]
    corruption, _, severity = config.rpartition("_")
    if corruption not in CIFAR10_CORRUPTIONS or severity not in ("1", "2", "3", "4", "5"):
        raise DatasetError(f"unknown dataset {name!r}: expected cifar10_corrupted/<corruption>_<1-5> with "
                           f"corruption one of {', '.join(CIFAR10_CORRUPTIONS)}")


def _load_tfds(name: str, data_dir: str | None) -> Dataset:
    """Load "tfds:<name>" (train/test splits, images scaled to [0, 1]); downloads only if $L2E_TFDS_DOWNLOAD=1."""
    tfds_name = name.removeprefix("tfds:")
    (train, test), nc = _tfds_arrays(name, tfds_name, ["train", "test"], data_dir)
    return _tfds_to_dataset(train, test, name, nc)


# ----------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[Path | None], Dataset]] = {
    "digits": _digits,
    "synthetic_images": lambda _: _synthetic("synthetic_images", seed=1234, num_classes=10),
    "synthetic_images_b": lambda _: _synthetic("synthetic_images_b", seed=98765, num_classes=6),
    "breast_cancer": _tabular("breast_cancer"),
    "wine": _tabular("wine"),
    "iris": _tabular("iris"),
    "mnist": _idx_dataset("mnist", "mnist"),
    "fashion_mnist": _idx_dataset("fashion_mnist", "fashion_mnist"),
    "kmnist": _idx_dataset("kmnist"),
    **{m: _medmnist(m) for m in MEDMNIST_CLASSES},
    **{n: functools.partial(lambda n, src, d: _tfds_named(n, src, None if d is None else str(d)), n, src)
       for n, src in TFDS_SOURCES.items()},
}
"""Registry name -> loader(data_dir). Also handled by `load_dataset`: "tfds:<name>" (any TFDS image
classification set, [0, 1] images) and "cifar10_corrupted/<corruption>_<severity>".

Local files: mnist / fashion_mnist / kmnist (IDX or KMNIST .npz; mnist and fashion_mnist fall back to TFDS
when no local copy exists and no data_dir is given), MedMNIST (MEDMNIST_CLASSES, `<name>.npz`).
TFDS (TFDS_SOURCES): emnist variants, cifar10, cifar100 (train[:40960], per-channel normalised), svhn_cropped.
"""

TABULAR = frozenset({"breast_cancer", "wine", "iris"})
"""Registry names whose inputs are feature vectors (n, features), not images: only MLPs apply."""


def check_dataset_name(name: str) -> None:
    """Raise DatasetError unless `name` is in DATASETS, "tfds:<name>" or "cifar10_corrupted/<config>"."""
    if name.startswith("cifar10_corrupted/"):
        _check_corruption(name)
        return
    if name not in DATASETS and not (name.startswith("tfds:") and len(name) > 5):
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}, tfds:<name>, "
                           f"cifar10_corrupted/<corruption>_<severity>")


# ----------------------------------------------------------------------------- entry point


@functools.lru_cache(maxsize=8)
def _load_full(name: str, data_dir: str | None) -> Dataset:
    if name.startswith("tfds:"):
        return _load_tfds(name, data_dir)
    if name.startswith("cifar10_corrupted/"):
        return _cifar10_corrupted(name, data_dir)
    return DATASETS[name](Path(data_dir) if data_dir is not None else None)


def load_dataset(
    name: str, data_dir: str | None = None, max_train: int | None = None, max_test: int | None = None
) -> Dataset:
    """Load dataset `name` (see DATASETS), keeping the first max_train / max_test examples (an official
    validation split is kept whole)."""
    check_dataset_name(name)
    for arg, v in (("max_train", max_train), ("max_test", max_test)):
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise DatasetError(f"{name}: {arg} must be a positive int or None, got {v!r}")
    ds = _load_full(name, None if data_dir is None else str(data_dir))
    if max_train is None and max_test is None:
        return ds
    return Dataset(
        ds.name, ds.x_train[:max_train], ds.y_train[:max_train], ds.x_test[:max_test], ds.y_test[:max_test],
        ds.num_classes, ds.x_valid, ds.y_valid,
    )
