"""What every task shares: the Gaussian prior, the Posterior, minibatches, and the likelihood-backed prediction
and scoring API (`TaskBase`); `TaskCache`, the explicit cache of built tasks and loaded data."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable

import jax
import jax.numpy as jnp
import numpy as np

from l2e.types import Posterior
from tasks.likelihoods import Likelihood
from tasks.splits import Data


class TaskCache:
    """Built tasks by spec, and loaded data (splits) by loader key, the `max_data` most recently used kept.

    One per program run (a meta-training run, an evaluation) so that a spec is built once and tasks on the same
    data share its arrays: `tasks.build(spec, cache)`.
    """

    def __init__(self, max_data: int = 8):
        self.max_data = max_data
        self._tasks: dict[Hashable, Any] = {}
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def task(self, spec: Hashable, build: Callable[[], Any]):
        """The task of `spec`, built by `build()` on first use."""
        if spec not in self._tasks:
            self._tasks[spec] = build()
        return self._tasks[spec]

    def data(self, key: Hashable, load: Callable[[], Any]):
        """The data under `key`, loaded by `load()` unless among the `max_data` most recently used."""
        if key in self._data:
            self._data.move_to_end(key)
        else:
            self._data[key] = load()
            if len(self._data) > self.max_data:
                self._data.popitem(last=False)
        return self._data[key]


def cached_data(cache: TaskCache | None, key: Hashable, load: Callable[[], Any]):
    """`cache.data(key, load)`, or `load()` without a cache."""
    return load() if cache is None else cache.data(key, load)


class TaskBase:
    """A built task: Gaussian prior N(0, σ² I) from `spec.prior_variance`, the Posterior, minibatches, and the
    prediction / scoring API of its `likelihood` (tasks.likelihoods).  Pure, jittable methods; data always
    comes in as arguments.

    Subclasses set `spec`, `splits`, `data_size`, `input_shape`, `model` (a flax module) and `likelihood`.
    """

    likelihood: Likelihood

    @property
    def kind(self) -> str:
        """"classification" or "regression"."""
        return self.likelihood.kind

    @property
    def metric_keys(self) -> tuple[str, ...]:
        """The keys `metrics` returns."""
        return self.likelihood.metric_keys

    def init_params(self, key: jax.Array):
        """Fresh flax "params" dict (without the outer {"params": ...} wrapper)."""
        return self.model.init(key, jnp.zeros((1, *self.input_shape), jnp.float32))["params"]

    def apply(self, params, x: jax.Array):
        """The model's output on x (B, *input_shape): logits (B, C), or (loc (B,), scale (B,)) for regression."""
        return self.model.apply({"params": params}, x)

    def nll(self, params, batch: Data) -> jax.Array:
        """Mean negative log-likelihood (nats per example) of batch = (x (B, ...), y (B,))."""
        x, y = batch
        return self.likelihood.mean_nll(self.apply(params, x), y)

    def log_likelihood(self, params, x: jax.Array, y: jax.Array) -> jax.Array:
        """Per-example log p(y_b | x_b, θ) (nats), (B,), of x (B, ...) and y (B,) under the task's likelihood."""
        return self.likelihood.log_likelihood(self.apply(params, x), y)

    def predict(self, params_samples, x: jax.Array) -> jax.Array:
        """params_samples: params with a leading sample axis K → (K, B, C) log-softmax or (K, B, 2) [loc, scale]
        (jittable; one vmapped call)."""
        return jax.vmap(lambda p: self.likelihood.predictive(self.apply(p, x)))(params_samples)

    def score(self, outputs, y) -> float:
        """Tuning score of `predict` outputs (K, n, ...) against y (n,): BMA NLL, or −LPPD of the mixture."""
        return self.likelihood.score(outputs, y)

    def metrics(self, outputs, y) -> dict:
        """The metrics of `predict` outputs (K, n, ...) against y (n,), keys `metric_keys` (float64 numpy)."""
        return self.likelihood.metrics(outputs, y)

    def curve(self, outputs, y) -> dict:
        """Metrics of the first k = 1..K samples of outputs (collection order): {"num_samples": [..], ...}."""
        return self.likelihood.curve(outputs, y)

    def error_and_nll(self, outputs, y) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample (each network alone) error (K,) and mean NLL (K,) of outputs (K, n, ...) against y."""
        return self.likelihood.error_and_nll(outputs, y)

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
        """Uniform minibatch with replacement; pure (batch_size must be static under jit).

        Raises:
          ValueError: x and y of different lengths (they would pair wrong labels), no examples, or a batch_size that
            is not a positive integer.
        """
        x, y = data
        if x.shape[:1] != y.shape[:1] or not x.shape or x.shape[0] == 0:
            raise ValueError(f"sample_batch: x {tuple(x.shape)} and y {tuple(y.shape)} must hold the same positive "
                             "number of examples (leading axis)")
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"sample_batch: batch_size must be a positive integer, got {batch_size!r}")
        idx = jax.random.randint(key, (batch_size,), 0, x.shape[0])
        return x[idx], y[idx]
