"""Train / inner-validation / outer-validation / test splits of a Dataset, as jnp arrays."""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from tasks.data.base import Dataset

Data = tuple[jax.Array, jax.Array]  # (x (n, ...) float32, y (n,) int32)


@dataclass(frozen=True)
class Splits:
    """train: sampler data; inner_valid / outer_valid: meta-learning validation; test: the official test split."""

    train: Data
    inner_valid: Data
    outer_valid: Data
    test: Data


def make_splits(ds: Dataset, train_frac: float = 0.8, inner_frac: float = 0.1) -> Splits:
    """Cut the official train split in order: [0, train_frac) train, [train_frac, train_frac+inner_frac) inner
    validation, the rest outer validation; test is the official test split.

    A dataset with an official validation split (Dataset.x_valid, e.g. MedMNIST's BloodMNIST) keeps its whole
    training split for training and uses the official validation split for both validation roles (docs/l2e.md, Task distribution).
    """
    if ds.x_valid is not None:
        if len(ds.x_train) == 0 or len(ds.x_valid) == 0:
            raise ValueError(f"{ds.name}: empty train ({len(ds.x_train)}) or validation ({len(ds.x_valid)}) split")
        valid = (jnp.asarray(ds.x_valid), jnp.asarray(ds.y_valid))
        return Splits((jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)), valid, valid,
                      (jnp.asarray(ds.x_test), jnp.asarray(ds.y_test)))
    n = len(ds.x_train)
    a, b = round(n * train_frac), round(n * (train_frac + inner_frac))
    if not (0 < a < b < n):
        raise ValueError(
            f"{ds.name}: train_frac={train_frac}, inner_frac={inner_frac} on {n} examples give empty splits "
            f"(train {a}, inner {b - a}, outer {n - b})"
        )
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    return Splits((x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:]), (jnp.asarray(ds.x_test), jnp.asarray(ds.y_test)))
