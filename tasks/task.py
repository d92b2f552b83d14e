"""A classification task: dataset splits + flax classifier + categorical likelihood + Gaussian prior, as pure
jittable functions (`Task`), described by a `TaskSpec`."""
from __future__ import annotations

from dataclasses import dataclass

import jax

from tasks.base import TaskBase, TaskCache, cached_data
from tasks.datasets import check_dataset_name, load_dataset
from tasks.likelihoods import Classification
from tasks.limits import check_parameter_count, model_parameter_count
from tasks.models import IMAGE_KINDS, ModelSpec, build_model
from tasks.splits import Splits, make_splits


@dataclass(frozen=True)
class TaskSpec:
    """Dataset name + architecture + prior variance σ² of p(θ) = N(0, σ² I).

    data_dir and max_train are passed to load_dataset.  valid: the fraction of the training split held out
    for validation, halved into inner and outer validation (None: 0.2, i.e. tasks.splits.make_splits' default
    0.8 / 0.1 / 0.1; a dataset with an official validation split uses that instead).
    """

    dataset: str
    model: ModelSpec
    prior_variance: float = 0.2
    data_dir: str | None = None
    max_train: int | None = None
    valid: float | None = None

    def __post_init__(self):
        if not self.prior_variance > 0:
            raise ValueError(f"TaskSpec.prior_variance must be > 0, got {self.prior_variance!r}")
        if self.valid is not None and not 0 < self.valid < 1:
            raise ValueError(f"TaskSpec.valid must be a fraction in (0, 1), got {self.valid!r}")
        check_dataset_name(self.dataset)

    @property
    def name(self) -> str:
        """E.g. "digits/cnn-c8-d2"."""
        return f"{self.dataset}/{self.model.name}"


def load_splits(dataset: str, data_dir: str | None, max_train: int | None,
                valid: float | None = None) -> tuple[Splits, int]:
    """(splits, number of classes) of a classification dataset (`valid`: see TaskSpec)."""
    ds = load_dataset(dataset, data_dir, max_train)
    if valid is None:
        return make_splits(ds), ds.num_classes
    return make_splits(ds, train_frac=1.0 - valid, inner_frac=valid / 2), ds.num_classes


class Task(TaskBase):
    """A built classification task (see TaskBase): batches (x (B, *input_shape) float32, y (B,) int32),
    model outputs logits (B, num_classes), `predict` gives log-softmax (K, B, num_classes)."""

    likelihood = Classification()

    def __init__(self, spec: TaskSpec, cache: TaskCache | None = None):
        """Load the data of `spec` (through `cache` when given: tasks on the same data share its arrays)."""
        self.spec = spec
        key = ("classification", spec.dataset, spec.data_dir, spec.max_train) + (() if spec.valid is None
                                                                                  else (spec.valid,))
        self.splits, self.num_classes = cached_data(
            cache, key, lambda: load_splits(spec.dataset, spec.data_dir, spec.max_train, spec.valid))
        self.data_size: int = int(self.splits.train[0].shape[0])
        self.input_shape: tuple[int, ...] = tuple(self.splits.train[0].shape[1:])
        if spec.model.kind in IMAGE_KINDS and len(self.input_shape) != 3:
            raise ValueError(f"{spec.name}: a CNN needs (H, W, C) images, got inputs of shape {self.input_shape}")
        check_parameter_count(model_parameter_count(spec.model, self.input_shape, self.num_classes), spec.name)
        self.model = build_model(spec.model, self.num_classes, self.input_shape)

    def __repr__(self) -> str:
        return f"Task({self.spec.name}, N={self.data_size}, input_shape={self.input_shape}, classes={self.num_classes})"

    def logits(self, params, x: jax.Array) -> jax.Array:
        """x: (B, *input_shape) → logits (B, num_classes) (= `apply`)."""
        return self.apply(params, x)


def build_task(spec: TaskSpec, cache: TaskCache | None = None) -> Task:
    """The Task of `spec`: built once per `cache` (a new one each call without a cache)."""
    if cache is None:
        return Task(spec)
    return cache.task(spec, lambda: Task(spec, cache))
