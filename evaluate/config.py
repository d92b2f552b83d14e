"""Evaluation configuration: frozen dataclasses, presets, and `key=value` overrides (as in meta_train)."""
from __future__ import annotations

import dataclasses
import json

from l2e.chains import ChainSchedule
from meta_train.config import ConfigError, apply_overrides
from tasks.models import ModelSpec
from tasks.task import TaskSpec

__all__ = ["METHODS", "ConfigError", "EvalConfig", "MethodGrid", "PRESETS", "apply_overrides", "get_preset"]

METHODS = ("l2e", "sghmc", "csghmc", "deep_ensemble")
"""Evaluated methods, in the order they are run and reported."""


@dataclasses.dataclass(frozen=True)
class MethodGrid:
    """Learning-rate grids (tuned on inner-validation BMA NLL) and the fixed hyperparameters of each method.

    All learning rates are in mean-loss units (see shared/spec/BASELINES.md §0).  With `tune=False`
    each method uses the **first** value of its grid.

    sghmc: physical SGHMC, lr = ε²·N, friction C; tuned over sghmc_lrs × sghmc_frictions (with C = 0.1
      the chain is underdamped for ~10⁴ steps and diverges at useful learning rates).
    csghmc: cyclical SGHMC in SGD-with-momentum form; `csghmc_cycles` cycles (None → one cycle per
      sample, so cycles = num_samples), cosine step size from lr₀, exploration ratio, momentum decay a.
    l2e: the checkpoint's sampler configuration with its learning_rate replaced by each grid value.
    deep_ensemble: num_samples members, each SGD with momentum `de_momentum` (optax.sgd, heavy ball)
      and a cosine decay of the learning rate to 0 over the member's steps, on the MAP objective
      mean NLL − log p(θ)/N (the Gaussian prior acts as weight decay).
    """

    sghmc_lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    sghmc_frictions: tuple[float, ...] = (3.0, 10.0, 30.0)
    csghmc_lrs: tuple[float, ...] = (0.03, 0.1, 0.3)
    csghmc_cycles: int | None = None
    csghmc_exploration_ratio: float = 0.8
    csghmc_momentum_decay: float = 0.1
    l2e_lrs: tuple[float, ...] = (0.25, 0.5, 1.0)
    de_lrs: tuple[float, ...] = (0.03, 0.1, 0.3)
    de_momentum: float = 0.9

    def __post_init__(self):
        for name in ("sghmc_lrs", "sghmc_frictions", "csghmc_lrs", "l2e_lrs", "de_lrs"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not values:
                raise ConfigError(f"grid.{name} must hold at least one learning rate")
            if not all(0 < v < float("inf") for v in values):
                raise ConfigError(f"grid.{name} must hold positive finite learning rates, got {values}")
        for name in ("csghmc_momentum_decay",):
            if not 0 < getattr(self, name) < float("inf"):
                raise ConfigError(f"grid.{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.csghmc_exploration_ratio < 1.0:
            raise ConfigError(f"grid.csghmc_exploration_ratio must be in [0, 1), got {self.csghmc_exploration_ratio}")
        if not 0.0 <= self.de_momentum < 1.0:
            raise ConfigError(f"grid.de_momentum must be in [0, 1), got {self.de_momentum}")
        if self.csghmc_cycles is not None and self.csghmc_cycles < 1:
            raise ConfigError(f"grid.csghmc_cycles must be a positive integer or None, got {self.csghmc_cycles}")

    def points(self, method: str) -> list[dict]:
        """The tuning grid of `method`: hyperparameter dicts (SGHMC: learning rate × friction)."""
        if method == "sghmc":
            return [{"learning_rate": lr, "friction": c} for lr in self.sghmc_lrs for c in self.sghmc_frictions]
        return [{"learning_rate": lr} for lr in self.lrs(method)]

    def lrs(self, method: str) -> tuple[float, ...]:
        """The learning-rate grid of `method`."""
        return {"sghmc": self.sghmc_lrs, "csghmc": self.csghmc_lrs, "l2e": self.l2e_lrs,
                "deep_ensemble": self.de_lrs}[method]


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Everything that determines an evaluation run (with the seed and checkpoint, its numbers are reproducible).

    tasks / held_out: the evaluation tasks and, in parallel, why each is held out of meta-training.
    num_steps: G, the number of minibatch gradient evaluations every method gets.
    num_samples: K, samples per method (SGHMC / L2E: thinned from one chain; cSGHMC: one per cycle end
      of the last K cycles; deep ensemble: K members of G/K steps).  G must be a multiple of K.
    thinning: steps between SGHMC / L2E samples (None → G // (2K): the K samples span the last half).
    batch_size: minibatch size; chunk: updates per compiled call (Python-unrolled, see l2e.chains).
    eval_batch: test-set examples per compiled prediction call (the last batch is padded).
    tune: tune each method's learning rate over its grid (else the first grid value is used);
    tune_examples: the first this many `inner_valid` examples score the grid (BMA NLL).
    """

    seed: int = 0
    tasks: tuple[TaskSpec, ...] = ()
    held_out: tuple[str, ...] = ()
    methods: tuple[str, ...] = METHODS
    num_steps: int = 1000
    num_samples: int = 10
    thinning: int | None = None
    batch_size: int = 64
    chunk: int = 2
    eval_batch: int = 256
    tune: bool = True
    tune_examples: int = 256
    grid: MethodGrid = MethodGrid()
    title: str = "L2E evaluation on held-out tasks"

    def __post_init__(self):
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "methods", tuple(self.methods))
        if not self.held_out:
            object.__setattr__(self, "held_out", ("",) * len(self.tasks))
        object.__setattr__(self, "held_out", tuple(self.held_out))
        if not self.tasks:
            raise ConfigError("tasks must not be empty")
        if len(self.held_out) != len(self.tasks):
            raise ConfigError(f"held_out has {len(self.held_out)} entries for {len(self.tasks)} tasks")
        if not self.methods:
            raise ConfigError("methods must not be empty")
        for m in self.methods:
            if m not in METHODS:
                raise ConfigError(f"unknown method {m!r}; known: {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"methods has duplicates: {self.methods}")
        for name in ("num_steps", "num_samples", "batch_size", "chunk", "eval_batch", "tune_examples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_steps % self.num_samples:
            raise ConfigError(
                f"num_steps ({self.num_steps}) must be a multiple of num_samples ({self.num_samples}): "
                "deep-ensemble members and cSGHMC cycles split the budget evenly")
        if self.thinning is not None and self.thinning <= 0:
            raise ConfigError(f"thinning must be a positive integer or None, got {self.thinning}")
        cycles = self.cycles
        if cycles < self.num_samples:
            raise ConfigError(f"grid.csghmc_cycles ({cycles}) must be ≥ num_samples ({self.num_samples})")
        if self.num_steps % cycles:
            raise ConfigError(f"num_steps ({self.num_steps}) must be a multiple of grid.csghmc_cycles ({cycles})")
        try:  # the schedules every method will use must be valid
            self.schedule("sghmc"), self.schedule("csghmc"), self.schedule("deep_ensemble")
        except ValueError as e:
            raise ConfigError(str(e).splitlines()[0]) from None

    @property
    def cycles(self) -> int:
        """Number of cSGHMC cycles."""
        return self.grid.csghmc_cycles or self.num_samples

    @property
    def sample_thinning(self) -> int:
        """Steps between consecutive SGHMC / L2E samples."""
        return self.thinning or max(1, self.num_steps // (2 * self.num_samples))

    def schedule(self, method: str) -> ChainSchedule:
        """The ChainSchedule of one chain of `method` (for the deep ensemble: of one member)."""
        g, k = self.num_steps, self.num_samples
        if method in ("sghmc", "l2e"):
            return ChainSchedule(g, k, self.sample_thinning, self.batch_size, self.chunk)
        if method == "csghmc":
            return ChainSchedule(g, k, g // self.cycles, self.batch_size, self.chunk)
        if method == "deep_ensemble":
            return ChainSchedule(g // k, 1, g // k, self.batch_size, self.chunk)
        raise ConfigError(f"unknown method {method!r}")

    def task_names(self) -> list[str]:
        """Report names of the tasks: spec.name (+ "-n<max_train>"), "#2", "#3"… for repeats."""
        names, seen = [], {}
        for spec in self.tasks:
            max_train = getattr(spec, "max_train", None)
            name = spec.name if max_train is None else f"{spec.name}-n{max_train}"
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return names

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


PRESETS: dict[str, EvalConfig] = {
    # under a minute end to end (compilation included): one tiny task, a short budget, 1–2 lrs per method
    "smoke": EvalConfig(
        tasks=(TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1), max_train=400),),
        held_out=("none (smoke test: inside the meta-training distribution)",),
        num_steps=60, num_samples=3, thinning=10, batch_size=32, chunk=2, eval_batch=128, tune_examples=64,
        grid=MethodGrid(sghmc_lrs=(0.03, 0.1), sghmc_frictions=(10.0,), csghmc_lrs=(0.1,), l2e_lrs=(0.5,),
                        de_lrs=(0.1,)),
        title="L2E evaluation (smoke)",
    ),
    # ≲ 10 minutes on 2 CPU cores; meta-training's default distribution is digits + synthetic_images,
    # CNNs with channels (4, 8), depths (1, 2), plain and residual
    "default": EvalConfig(
        tasks=(
            TaskSpec("digits", ModelSpec("cnn", channels=16, depth=3, residual=True)),
            TaskSpec("synthetic_images_b", ModelSpec("cnn", channels=8, depth=2)),
            TaskSpec("breast_cancer", ModelSpec("mlp", hidden=(32, 32))),
        ),
        held_out=(
            "architecture (CNN with 16 channels, depth 3; meta-training saw 4/8 channels, depth 1/2)",
            "dataset (synthetic_images_b: other prototypes, 6 classes; never seen in meta-training)",
            "dataset+architecture (tabular data, MLP 32x32; meta-training saw only image CNNs)",
        ),
        num_steps=1000, num_samples=10, batch_size=64, chunk=2,
    ),
}


def get_preset(name: str) -> EvalConfig:
    """The preset called `name` (ConfigError if unknown)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
