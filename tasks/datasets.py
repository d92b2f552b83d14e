"""The dataset registry and entry point: `load_dataset(name, ...)` over the loaders in tasks/data/ (images.py,
tfds.py, tabular.py).  Images float32 NHWC in [0, 1], tabular float32 (n, features) z-scored, labels int32.
Regression data (UCI, synthetic 1-D) is loaded by tasks.data.uci."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import numpy as np

from tasks.data.base import Dataset, DatasetError, read_npz
from tasks.data.images import MEDMNIST_CLASSES, digits, idx_dataset, medmnist, read_idx, read_npz_images, synthetic
from tasks.data.tabular import synthetic_tabular, tabular
from tasks.data.tfds import (
    CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD, TFDS_SOURCES, check_corruption, cifar10_corrupted,
    load_tfds, tfds_named,
)

__all__ = ["CIFAR10_MEAN", "CIFAR10_STD", "CIFAR100_MEAN", "CIFAR100_STD", "DATASETS", "Dataset", "DatasetError",
           "MEDMNIST_CLASSES", "TABULAR", "TFDS_SOURCES", "check_dataset_name", "load_dataset", "load_full",
           "read_idx", "read_npz", "read_npz_images"]

DATASETS: dict[str, Callable[[Path | None], Dataset]] = {
    "digits": digits,
    "synthetic_images": lambda _: synthetic("synthetic_images", seed=1234, num_classes=10),
    "synthetic_images_b": lambda _: synthetic("synthetic_images_b", seed=98765, num_classes=6),
    "breast_cancer": tabular("breast_cancer"),
    "wine": tabular("wine"),
    "iris": tabular("iris"),
    "synthetic_tabular": lambda _: synthetic_tabular(),
    "mnist": idx_dataset("mnist", "mnist"),
    "fashion_mnist": idx_dataset("fashion_mnist", "fashion_mnist"),
    "kmnist": idx_dataset("kmnist"),
    **{m: medmnist(m) for m in MEDMNIST_CLASSES},
    **{n: functools.partial(lambda n, src, d: tfds_named(n, src, None if d is None else str(d)), n, src)
       for n, src in TFDS_SOURCES.items()},
}
"""Registry name -> loader(data_dir). Also handled by `load_dataset`: "tfds:<name>" (any TFDS image
classification set, [0, 1] images), "cifar10_corrupted/<corruption>_<severity>" and the user's data,
"npz:<path>[:classes=C]" / "csv:<path>:target=<column>[...]" (tasks.data.user).

Local files: mnist / fashion_mnist / kmnist (IDX or KMNIST .npz; mnist and fashion_mnist fall back to TFDS
when no local copy exists and no data_dir is given), MedMNIST (MEDMNIST_CLASSES, `<name>.npz`).
TFDS (TFDS_SOURCES): emnist variants, cifar10, cifar100 (train[:40960], per-channel normalised), svhn_cropped.
"""

TABULAR = frozenset({"breast_cancer", "wine", "iris", "synthetic_tabular"})
"""Registry names whose inputs are feature vectors (n, features), not images: only MLPs apply."""


def check_dataset_name(name: str) -> None:
    """Raise DatasetError unless `name` is in DATASETS, "tfds:<name>" or "cifar10_corrupted/<config>"."""
    if name.startswith("cifar10_corrupted/"):
        check_corruption(name)
        return
    if name.startswith(("npz:", "csv:")) and len(name) > 4:  # the user's data (tasks.data.user)
        return
    if name not in DATASETS and not (name.startswith("tfds:") and len(name) > 5):
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}, tfds:<name>, "
                           f"cifar10_corrupted/<corruption>_<severity>")


def load_full(name: str, data_dir: str | None) -> Dataset:
    """The whole dataset `name` (a checked name) from its loader; data_dir as a string or None."""
    if name.startswith("tfds:"):
        return load_tfds(name, data_dir)
    if name.startswith("cifar10_corrupted/"):
        return cifar10_corrupted(name, data_dir)
    if name.startswith(("npz:", "csv:")):
        from tasks.data.user import load_user_classification

        return load_user_classification(name)
    return DATASETS[name](Path(data_dir) if data_dir is not None else None)


def load_dataset(
    name: str, data_dir: str | None = None, max_train: int | None = None, max_test: int | None = None
) -> Dataset:
    """Load dataset `name` (see DATASETS), keeping the first max_train / max_test examples (an official
    validation split is kept whole).  Loads from the files each call (tasks.TaskCache keeps built tasks)."""
    check_dataset_name(name)
    for arg, v in (("max_train", max_train), ("max_test", max_test)):
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise DatasetError(f"{name}: {arg} must be a positive int or None, got {v!r}")
    ds = load_full(name, None if data_dir is None else str(data_dir))
    if max_train is None and max_test is None:
        return ds
    return Dataset(
        ds.name, ds.x_train[:max_train], ds.y_train[:max_train], ds.x_test[:max_test], ds.y_test[:max_test],
        ds.num_classes, ds.x_valid, ds.y_valid,
    )
