"""Datasets through tensorflow_datasets: the named TFDS sources (EMNIST variants, CIFAR-10/100 in the L2E
protocol, SVHN), CIFAR-10-C and any "tfds:<name>" image classification set.  Nothing downloads unless
$L2E_TFDS_DOWNLOAD=1."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from tasks.data.base import Dataset, DatasetError, as_images


CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CIFAR_TRAIN = "train[:40960]"  # the Izmailov et al. (2021) / L2E CIFAR protocol (docs/evaluation.md, The paper's protocol)

CIFAR10_CORRUPTIONS = (
    "brightness", "contrast", "defocus_blur", "elastic", "fog", "frost", "frosted_glass_blur", "gaussian_blur",
    "gaussian_noise", "impulse_noise", "jpeg_compression", "motion_blur", "pixelate", "saturate", "shot_noise",
    "snow", "spatter", "speckle_noise", "zoom_blur",
)
"""TFDS cifar10_corrupted configs are "<corruption>_<severity 1-5>"."""


@dataclass(frozen=True)
class TFDSSource:
    """A named TFDS dataset: builder (with config), class count, split strings, optional per-channel (mean, std)."""

    tfds_name: str
    num_classes: int
    train_split: str = "train"
    test_split: str = "test"
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None


TFDS_SOURCES: dict[str, TFDSSource] = {
    # EMNIST: the variant is explicit and the head is sized to its true class count (docs/l2e.md, This project's choices). The paper's
    # code used byclass with a 10-class head (a bug); "emnist" is the paper's variant with the correct head.
    "emnist": TFDSSource("emnist/byclass", 62),
    "emnist_byclass": TFDSSource("emnist/byclass", 62),
    "emnist_bymerge": TFDSSource("emnist/bymerge", 47),
    "emnist_balanced": TFDSSource("emnist/balanced", 47),
    "emnist_digits": TFDSSource("emnist/digits", 10),
    "emnist_mnist": TFDSSource("emnist/mnist", 10),
    "cifar10": TFDSSource("cifar10", 10, CIFAR_TRAIN, "test", (CIFAR10_MEAN, CIFAR10_STD)),
    "cifar100": TFDSSource("cifar100", 100, CIFAR_TRAIN, "test", (CIFAR100_MEAN, CIFAR100_STD)),
    # SVHN as the OOD set of CIFAR-10 models: normalised with CIFAR-10's statistics (the model's input space)
    "svhn_cropped": TFDSSource("svhn_cropped", 10, "train", "test", (CIFAR10_MEAN, CIFAR10_STD)),
}
"""Registry names loaded through tensorflow_datasets (data_dir is TFDS's data_dir; $TFDS_DATA_DIR works too)."""


def tfds_available() -> bool:
    try:
        import tensorflow_datasets
    except ImportError:
        return False
    return tensorflow_datasets is not None


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


def tfds_to_dataset(train_tuple, test_tuple, name: str, num_classes: int | None = None,
                     normalize: tuple | None = None) -> Dataset:
    """Pure conversion of tfds numpy (images (n, H, W[, C]) uint8, labels (n,)) tuples into a Dataset;
    `normalize` = (mean, std) per channel, applied after scaling to [0, 1]."""
    (xtr, ytr), (xte, yte) = train_tuple, test_tuple
    ytr, yte = np.asarray(ytr).astype(np.int32).reshape(-1), np.asarray(yte).astype(np.int32).reshape(-1)
    if num_classes is None:
        num_classes = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    xtr, xte = as_images(xtr), as_images(xte)
    if normalize is not None:
        xtr, xte = _normalize(xtr, normalize, name), _normalize(xte, normalize, name)
    return Dataset(name, xtr, ytr, xte, yte, int(num_classes))


def _normalize(x: np.ndarray, normalize, name: str) -> np.ndarray:
    mean, std = (np.asarray(v, np.float32) for v in normalize)
    if x.shape[-1] != mean.shape[0]:
        raise DatasetError(f"{name}: expected {mean.shape[0]}-channel images, got shape {x.shape}")
    return ((x - mean) / std).astype(np.float32)


def tfds_named(name: str, src: TFDSSource, data_dir: str | None) -> Dataset:
    (train, test), nc = _tfds_arrays(name, src.tfds_name, [src.train_split, src.test_split], data_dir)
    if nc is not None and nc != src.num_classes:
        raise DatasetError(f"{name}: tfds reports {nc} classes for {src.tfds_name}, expected {src.num_classes}")
    return tfds_to_dataset(train, test, name, src.num_classes, src.normalize)


def cifar10_corrupted(name: str, data_dir: str | None) -> Dataset:
    """"cifar10_corrupted/<corruption>_<severity>": train = the CIFAR-10 protocol's training split, test = the
    corrupted CIFAR-10 test set (covariate shift), both normalised with CIFAR-10's statistics."""
    config = name.split("/", 1)[1]
    (test,), nc = _tfds_arrays(name, f"cifar10_corrupted/{config}", ["test"], data_dir)
    base = tfds_named("cifar10", TFDS_SOURCES["cifar10"], data_dir)
    x = _normalize(as_images(test[0]), (CIFAR10_MEAN, CIFAR10_STD), name)
    y = np.asarray(test[1]).astype(np.int32).reshape(-1)
    return Dataset(name, base.x_train, base.y_train, x, y, 10)


def check_corruption(name: str) -> None:
    config = name.split("/", 1)[1]
    corruption, _, severity = config.rpartition("_")
    if corruption not in CIFAR10_CORRUPTIONS or severity not in ("1", "2", "3", "4", "5"):
        raise DatasetError(f"unknown dataset {name!r}: expected cifar10_corrupted/<corruption>_<1-5> with "
                           f"corruption one of {', '.join(CIFAR10_CORRUPTIONS)}")


def load_tfds(name: str, data_dir: str | None) -> Dataset:
    """Load "tfds:<name>" (train/test splits, images scaled to [0, 1]); downloads only if $L2E_TFDS_DOWNLOAD=1."""
    tfds_name = name.removeprefix("tfds:")
    (train, test), nc = _tfds_arrays(name, tfds_name, ["train", "test"], data_dir)
    return tfds_to_dataset(train, test, name, nc)
