"""Tabular classification sets from scikit-learn (breast_cancer, wine, iris): stratified 80/20 split (seed 0),
features z-scored with the training statistics; and a generated large-N table (`synthetic_tabular`)."""
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


def synthetic_tabular(name: str = "synthetic_tabular", seed: int = 2024, n_train: int = 12500, n_test: int = 2500,
                      features: int = 10, num_classes: int = 3) -> Dataset:
    """A large-N generated classification table (numpy's PCG64 only, so the same rows on every machine).

    x ~ N(0, I_features); the class is drawn from softmax(x·W + 0.5·sin(2·x_0)·v + b) with W, v, b fixed by the
    seed (a mostly linear, partly nonlinear boundary; the labels are noisy, so a softmax regression reaches about
    70 % test accuracy); inputs z-scored with the training rows' statistics. The task keeps 80 % of the training
    rows for training (tasks.splits.make_splits): 10,000 at the defaults.
    """
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((features, num_classes))
    v, b = rng.standard_normal(num_classes), 0.3 * rng.standard_normal(num_classes)
    n = n_train + n_test
    x = rng.standard_normal((n, features))
    logits = x @ w + 0.5 * np.sin(2.0 * x[:, :1]) * v + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random((n, 1)) > np.cumsum(p, 1)).sum(1).astype(np.int32)
    xtr, xte = zscore(x[:n_train], x[n_train:])
    return Dataset(name, xtr.astype(np.float32), y[:n_train], xte.astype(np.float32), y[n_train:], num_classes)
