"""The distribution of tasks meta-training samples from: datasets × architectures, or a weighted list of task
strings (tasks.spec_parse.GRAMMAR)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import numpy as np

from tasks.datasets import TABULAR, check_dataset_name
from tasks.models import ModelSpec
from tasks.task import TaskSpec
from tasks.task_strings import parse_task_list, weighted_specs


@dataclass(frozen=True)
class TaskDistribution:
    """Uniform over datasets × (channels × depths × residual CNNs, plus MLPs of widths mlp_hidden), or, when
    `tasks` is given, over its task strings (classification and regression, any model of the grammar) with the
    probabilities their :weight=W options give (default 1 each).

    CNNs are skipped for tabular datasets (tasks.datasets.TABULAR), which therefore need mlp_hidden.  With
    `tasks`, `datasets` must be empty and the grid fields (channels … max_train) are not used: every task string
    carries its own options.  `--set tasks=a,b` or `--set tasks=@FILE` replaces the whole group (`from_override`).
    """

    datasets: tuple[str, ...] = ()
    channels: tuple[int, ...] = (4, 8, 16)
    depths: tuple[int, ...] = (1, 2, 3, 4, 5)
    residual: tuple[bool, ...] = (False, True)
    mlp_hidden: tuple[tuple[int, ...], ...] = ()
    prior_variance: float = 0.2
    data_dir: str | None = None
    max_train: int | None = None
    tasks: tuple[str, ...] = ()

    def __post_init__(self):
        for field in ("datasets", "tasks"):
            if isinstance(getattr(self, field), str):
                object.__setattr__(self, field, (getattr(self, field),))
        for field in ("datasets", "channels", "depths", "residual", "tasks"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        object.__setattr__(self, "mlp_hidden", tuple(tuple(h) for h in self.mlp_hidden))
        if self.tasks:
            if self.datasets:
                raise ValueError("TaskDistribution: give datasets (a grid) or tasks (task strings), not both")
            weighted_specs(self.tasks)  # parses, resolves and checks every string now
            return
        if not self.datasets:
            raise ValueError("TaskDistribution.datasets must not be empty (or give tasks: a list of task strings)")
        for name in self.datasets:
            check_dataset_name(name)
        for name in self.datasets:
            if name in TABULAR and not self.mlp_hidden:
                raise ValueError(f"TaskDistribution: tabular dataset {name!r} needs mlp_hidden (CNNs need images)")
        if not self.specs():
            raise ValueError("TaskDistribution has no architectures (channels, depths, residual and mlp_hidden empty)")

    @classmethod
    def from_override(cls, value: str) -> "TaskDistribution":
        """`--set tasks=VALUE`: comma-separated task strings (each optionally :weight=W) or "@FILE" (one per line)."""
        return cls(tasks=parse_task_list(value))

    @property
    def weights(self) -> tuple[float, ...]:
        """The relative probability of each of `specs()`."""
        return weighted_specs(self.tasks)[1] if self.tasks else (1.0,) * len(self.specs())

    def specs(self) -> list:
        """All task specs: the task strings' in order, or, for the grid, ordered by dataset, then CNNs (channels,
        depth, residual; images only), then MLPs."""
        if self.tasks:
            return list(weighted_specs(self.tasks)[0])
        cnns = [ModelSpec("cnn", c, d, r) for c, d, r in itertools.product(self.channels, self.depths, self.residual)]
        mlps = [ModelSpec("mlp", hidden=h) for h in self.mlp_hidden]
        return [
            TaskSpec(ds, m, self.prior_variance, self.data_dir, self.max_train)
            for ds in self.datasets
            for m in ([] if ds in TABULAR else cnns) + mlps
        ]

    def sample(self, key: jax.Array):
        """A random spec (uniform, or by `weights`); deterministic in `key` (not jittable: returns a Python
        object)."""
        specs, weights = self.specs(), self.weights
        if len(set(weights)) == 1:
            return specs[int(jax.random.randint(key, (), 0, len(specs)))]
        p = np.asarray(weights, np.float64) / sum(weights)
        return specs[int(jax.random.choice(key, len(specs), p=p.astype(np.float32)))]
