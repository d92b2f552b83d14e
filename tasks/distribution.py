"""The distribution of tasks meta-training samples from: datasets × architectures."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax

from tasks.datasets import TABULAR, check_dataset_name
from tasks.models import ModelSpec
from tasks.task import TaskSpec


@dataclass(frozen=True)
class TaskDistribution:
    """Uniform over datasets × (channels × depths × residual CNNs, plus MLPs of widths mlp_hidden).

    CNNs are skipped for tabular datasets (tasks.datasets.TABULAR), which therefore need mlp_hidden.
    """

    datasets: tuple[str, ...]
    channels: tuple[int, ...] = (4, 8, 16)
    depths: tuple[int, ...] = (1, 2, 3, 4, 5)
    residual: tuple[bool, ...] = (False, True)
    mlp_hidden: tuple[tuple[int, ...], ...] = ()
    prior_variance: float = 0.2
    data_dir: str | None = None
    max_train: int | None = None

    def __post_init__(self):
        if isinstance(self.datasets, str):
            object.__setattr__(self, "datasets", (self.datasets,))
        for field in ("datasets", "channels", "depths", "residual"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        object.__setattr__(self, "mlp_hidden", tuple(tuple(h) for h in self.mlp_hidden))
        if not self.datasets:
            raise ValueError("TaskDistribution.datasets must not be empty")
        for name in self.datasets:
            check_dataset_name(name)
        for name in self.datasets:
            if name in TABULAR and not self.mlp_hidden:
                raise ValueError(f"TaskDistribution: tabular dataset {name!r} needs mlp_hidden (CNNs need images)")
        if not self.specs():
            raise ValueError("TaskDistribution has no architectures (channels, depths, residual and mlp_hidden empty)")

    def specs(self) -> list[TaskSpec]:
        """All task specs, ordered by dataset, then CNNs (channels, depth, residual; images only), then MLPs."""
        cnns = [ModelSpec("cnn", c, d, r) for c, d, r in itertools.product(self.channels, self.depths, self.residual)]
        mlps = [ModelSpec("mlp", hidden=h) for h in self.mlp_hidden]
        return [
            TaskSpec(ds, m, self.prior_variance, self.data_dir, self.max_train)
            for ds in self.datasets
            for m in ([] if ds in TABULAR else cnns) + mlps
        ]

    def sample(self, key: jax.Array) -> TaskSpec:
        """A uniformly random spec; deterministic in `key` (not jittable: returns a Python object)."""
        specs = self.specs()
        return specs[int(jax.random.randint(key, (), 0, len(specs)))]
