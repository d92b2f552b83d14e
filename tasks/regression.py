"""A regression task: standardised UCI or synthetic 1-D data (tasks.data.uci) + location/scale MLP + Gaussian
likelihood + Gaussian prior, interface-compatible with `tasks.Task` (`RegressionTask`), described by a
`RegressionSpec`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from tasks.base import TaskBase, TaskCache, cached_data
from tasks.data.base import DatasetError
from tasks.data.uci import PROTOCOLS, UCI_DATASETS, RegressionData, load_uci, synthetic_1d
from tasks.likelihoods import GaussianRegression
from tasks.models import ACTIVATIONS, ModelSpec, RegressionMLP, mlp_name
from tasks.splits import Data, Splits


NOISE_MODELS = ("hetero", "homo")
"""RegressionSpec.noise: the network predicts each point's noise scale (hetero), or one learned scale (homo)."""


def _check_dataset(dataset: str) -> None:
    if dataset == "synthetic_1d":
        return
    if not (isinstance(dataset, str) and dataset.startswith(("uci:", "npz:", "csv:")) and len(dataset) > 4):
        raise DatasetError(
            f"regression dataset must be 'synthetic_1d', 'uci:<name>' (names: {', '.join(UCI_DATASETS)}), "
            f"'npz:<path>' or 'csv:<path>:target=<column>', got {dataset!r}"
        )


@dataclass(frozen=True)
class RegressionSpec:
    """Regression dataset + MLP widths + prior variance σ² of p(θ) = N(0, σ² I).

    dataset: "synthetic_1d" or "uci:<name>" (name a folder of data_dir, e.g. "uci:yacht").  split / protocol /
    seed / data_dir are passed to `load_uci` (ignored for synthetic_1d, which uses seed 0).
    MILE's defaults: hidden (16, 16), prior N(0, I), protocol "mile", seeds 1–3.
    "npz:<path>" / "csv:<path>:target=<column>[:test=F][:seed=S]": the user's data (tasks.data.npz / .csv), with
    `valid` the fraction of training rows held out for validation (None: 0.1; npz x_valid / y_valid if given).
    max_train: keep the first max_train training rows (None: all).  activation: the MLP's (tasks.models.
    ACTIVATIONS); factory: "pkg.module:Factory", the user's flax model instead of the MLP (tasks.user_model).
    """

    dataset: str
    hidden: tuple[int, ...] = (16, 16)
    prior_variance: float = 1.0
    split: int = 0
    protocol: str = "mile"
    seed: int = 1
    data_dir: str | None = None
    activation: str = "relu"
    factory: str | None = None
    valid: float | None = None
    max_train: int | None = None
    noise: str = "hetero"

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.data_dir is not None:
            object.__setattr__(self, "data_dir", str(self.data_dir))
        _check_dataset(self.dataset)
        if not self.prior_variance > 0:
            raise ValueError(f"RegressionSpec.prior_variance must be > 0, got {self.prior_variance!r}")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"RegressionSpec.hidden widths must be positive, got {self.hidden}")
        ModelSpec("mlp", hidden=self.hidden)  # the layer limits (tasks.limits)
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"RegressionSpec.protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"RegressionSpec.activation must be one of {', '.join(ACTIVATIONS)}, "
                             f"got {self.activation!r}")
        if self.valid is not None and not 0 < self.valid < 1:
            raise ValueError(f"RegressionSpec.valid must be a fraction in (0, 1), got {self.valid!r}")
        if self.noise not in NOISE_MODELS:
            raise ValueError(f"RegressionSpec.noise must be one of {', '.join(NOISE_MODELS)}, got {self.noise!r}")
        if self.noise == "homo" and self.factory is not None:
            raise ValueError("RegressionSpec.noise='homo' applies to the built-in MLP, not a user factory")
        if self.max_train is not None and self.max_train < 1:
            raise ValueError(f"RegressionSpec.max_train must be positive, got {self.max_train!r}")

    @property
    def name(self) -> str:
        """E.g. "uci:yacht[mile-s1]/mlp-16x16", "uci:yacht[standard-0]/mlp-16x16", "synthetic_1d/mlp-16x16"."""
        data = self.dataset
        if data.startswith("uci:"):
            data += f"[mile-s{self.seed}]" if self.protocol == "mile" else f"[standard-{self.split}]"
        model = self.factory or mlp_name(self.hidden, self.activation)
        return f"{data}/{model}" + ("-homo" if self.noise == "homo" else "")


def load_regression_data(spec: RegressionSpec) -> RegressionData:
    """The standardised data of `spec`: `synthetic_1d()`, `load_uci` with the spec's protocol / split / seed, or
    the user's npz / csv data; the first max_train training rows."""
    if spec.dataset == "synthetic_1d":
        data = synthetic_1d()
    elif spec.dataset.startswith(("npz:", "csv:")):
        from tasks.data.user import load_user_regression

        data = load_user_regression(spec.dataset, spec.valid)
    else:
        data = load_uci(spec.dataset[4:], spec.data_dir, spec.split, spec.protocol, spec.seed)
    if spec.max_train is None or spec.max_train >= len(data.y_train):
        return data
    return dataclasses.replace(data, x_train=data.x_train[:spec.max_train], y_train=data.y_train[:spec.max_train])


def _pair(x: np.ndarray, y: np.ndarray) -> Data:
    return jnp.asarray(x), jnp.asarray(y)


class RegressionTask(TaskBase):
    """A built regression task (see TaskBase): batches (x (B, d) float32, y (B,) float32), model outputs
    (loc (B,), scale (B,)), `predict` gives (K, B, 2) [loc, scale].  splits: train / inner_valid / outer_valid /
    test, where both validation roles are the one validation split; `data` is the RegressionData."""

    likelihood = GaussianRegression()

    def __init__(self, spec: RegressionSpec, cache: TaskCache | None = None):
        """Load the data of `spec` (through `cache` when given: tasks on the same data share its arrays)."""
        self.spec = spec
        key = ("regression", spec.dataset, spec.protocol, spec.split, spec.seed, spec.data_dir)
        if spec.valid is not None or spec.max_train is not None:
            key += (spec.valid, spec.max_train)
        self.data = cached_data(cache, key, lambda: load_regression_data(spec))
        d = self.data
        valid = _pair(d.x_valid, d.y_valid)
        self.splits = Splits(_pair(d.x_train, d.y_train), valid, valid, _pair(d.x_test, d.y_test))
        self.data_size: int = int(d.x_train.shape[0])
        self.input_shape: tuple[int, ...] = (d.num_features,)
        if spec.factory is not None:
            from tasks.user_model import build_user_model

            self.model = build_user_model(spec.factory, self.input_shape, 2, regression=True)
        else:
            from tasks.limits import check_parameter_count, model_parameter_count

            check_parameter_count(model_parameter_count(ModelSpec("mlp", hidden=spec.hidden), self.input_shape, 2),
                                  spec.name)
            self.model = RegressionMLP(spec.hidden, spec.activation, spec.noise == "homo")

    def __repr__(self) -> str:
        return f"RegressionTask({self.spec.name}, N={self.data_size}, features={self.input_shape[0]})"


def build_regression_task(spec: RegressionSpec, cache: TaskCache | None = None) -> RegressionTask:
    """The RegressionTask of `spec`: built once per `cache` (a new one each call without a cache)."""
    if cache is None:
        return RegressionTask(spec)
    return cache.task(spec, lambda: RegressionTask(spec, cache))
