"""A task: dataset splits + flax model + mean cross-entropy likelihood + Gaussian prior, as pure jittable functions."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from l2e.types import Posterior
from tasks.datasets import check_dataset_name, load_dataset
from tasks.models import IMAGE_KINDS, ModelSpec, build_model
from tasks.splits import Data, Splits, make_splits


@dataclass(frozen=True)
class TaskSpec:
    """Dataset name + architecture + prior variance σ² of p(θ) = N(0, σ² I).

    data_dir and max_train are passed to load_dataset.
    """

    dataset: str
    model: ModelSpec
    prior_variance: float = 0.2
    data_dir: str | None = None
    max_train: int | None = None

    def __post_init__(self):
        if not self.prior_variance > 0:
            raise ValueError(f"TaskSpec.prior_variance must be > 0, got {self.prior_variance!r}")
        check_dataset_name(self.dataset)

    @property
    def name(self) -> str:
        """E.g. "digits/cnn-c8-d2"."""
        return f"{self.dataset}/{self.model.name}"


@functools.lru_cache(maxsize=8)
def _splits(dataset: str, data_dir: str | None, max_train: int | None) -> tuple[Splits, int]:
    ds = load_dataset(dataset, data_dir, max_train)
    return make_splits(ds), ds.num_classes


class TaskBase:
    """What every task shares: Gaussian prior N(0, σ² I) from `spec.prior_variance`, the Posterior, minibatches.

    Subclasses set `spec`, `splits`, `data_size` and define `nll(params, batch)`.
    """

    def log_prior(self, params) -> jax.Array:
        """log N(θ; 0, σ² I) up to a constant: −Σθ² / (2σ²)."""
        sq = sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))
        return -0.5 * sq / self.spec.prior_variance

    @property
    def posterior(self) -> Posterior:
        return Posterior(self.nll, self.log_prior, self.data_size)

    @property
    def train_data(self) -> Data:
        return self.splits.train

    def log_density(self, params) -> jax.Array:
        """Full-batch unnormalised log posterior ℓ(θ) = −N·mean NLL(train) + log p(θ) (for NUTS, MCLMC/MILE)."""
        return -self.data_size * self.nll(params, self.splits.train) + self.log_prior(params)

    @staticmethod
    def sample_batch(key: jax.Array, data: Data, batch_size: int) -> Data:
        """Uniform minibatch with replacement; pure (batch_size must be static under jit)."""
        x, y = data
        idx = jax.random.randint(key, (batch_size,), 0, x.shape[0])
        return x[idx], y[idx]


class Task(TaskBase):
    """A built task. All methods are pure and jittable; data always comes in as arguments (batches)."""

    kind = "classification"

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.splits, self.num_classes = _splits(spec.dataset, spec.data_dir, spec.max_train)
        self.model = build_model(spec.model, self.num_classes)
        self.data_size: int = int(self.splits.train[0].shape[0])
        self.input_shape: tuple[int, ...] = tuple(self.splits.train[0].shape[1:])
        if spec.model.kind in IMAGE_KINDS and len(self.input_shape) != 3:
            raise ValueError(f"{spec.name}: a CNN needs (H, W, C) images, got inputs of shape {self.input_shape}")

    def __repr__(self) -> str:
        return f"Task({self.spec.name}, N={self.data_size}, input_shape={self.input_shape}, classes={self.num_classes})"

    def init_params(self, key: jax.Array):
        """Fresh flax "params" dict (without the outer {"params": ...} wrapper)."""
        return self.model.init(key, jnp.zeros((1, *self.input_shape), jnp.float32))["params"]

    def logits(self, params, x: jax.Array) -> jax.Array:
        """x: (B, *input_shape) → logits (B, num_classes)."""
        return self.model.apply({"params": params}, x)

    def nll(self, params, batch: Data) -> jax.Array:
        """Mean cross-entropy (nats per example) of batch = (x (B, ...), y (B,) int)."""
        x, y = batch
        logp = jax.nn.log_softmax(self.logits(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), axis=1))



@functools.lru_cache(maxsize=None)
def build_task(spec: TaskSpec) -> Task:
    """Build (and cache per spec) the Task of `spec`; tasks on the same data share its arrays."""
    return Task(spec)


def build(spec) -> TaskBase:
    """Build any task spec: a `TaskSpec` (classification) or a `tasks.regression.RegressionSpec`."""
    from tasks.regression import RegressionSpec, build_regression_task

    if isinstance(spec, RegressionSpec):
        return build_regression_task(spec)
    if isinstance(spec, TaskSpec):
        return build_task(spec)
    raise TypeError(f"not a task spec: {spec!r}")
