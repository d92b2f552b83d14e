"""Tabular classification sets from scikit-learn (breast_cancer, wine, iris): stratified 80/20 split (seed 0),
features z-scored with the training statistics."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from tasks.data.base import Dataset, zscore


def tabular(name: str) -> Callable[[Path | None], Dataset]:
    def load(data_dir: Path | None) -> Dataset:
        import sklearn.datasets as skd
        from sklearn.model_selection import train_test_split

        d = getattr(skd, f"load_{name}")()
        xtr, xte, ytr, yte = train_test_split(
            d.data, d.target, test_size=0.2, random_state=0, stratify=d.target
        )
        xtr, xte = zscore(xtr, xte)
        return Dataset(name, xtr, ytr.astype(np.int32), xte, yte.astype(np.int32), len(d.target_names))

    return load
