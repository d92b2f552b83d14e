"""Evaluation configuration: frozen dataclasses, presets, and `key=value` overrides (as in meta_train)."""
from __future__ import annotations

import dataclasses
import json

from l2e.chains import ChainSchedule
from meta_train.config import ConfigError, apply_overrides
from tasks.models import ModelSpec
from tasks.regression import RegressionSpec
from tasks.task import TaskSpec

__all__ = ["DEFAULT_METHODS", "FULL_BATCH_METHODS", "METHODS", "ConfigError", "EvalConfig", "MethodGrid", "PRESETS",
           "apply_overrides", "get_preset"]

METHODS = ("l2e", "sghmc", "csghmc", "psgld", "fsghmc", "deep_ensemble", "noisy_de", "mile", "nuts_bde")
"""Every known method, in the order they are run and reported (the deep ensemble runs before the full-batch
methods, which start from its members)."""
DEFAULT_METHODS = ("l2e", "sghmc", "csghmc", "deep_ensemble")
"""The methods of `EvalConfig()` and of the "default" / "smoke" presets."""
FULL_BATCH_METHODS = ("mile", "nuts_bde")
"""Full-batch methods with their own budget (EvalConfig.mile_* / nuts_*); the rest share G minibatch gradients."""
GRID_METHODS = ("l2e", "sghmc", "csghmc", "psgld", "fsghmc", "deep_ensemble", "noisy_de")
"""Methods with a learning-rate grid (tuned on inner-valid); mile / nuts_bde have none (ε₀ = the DE lr)."""


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
    psgld: pSGLD (BASELINES §4), RMSprop decay psgld_rho, stabiliser psgld_lam, T = 1.
    fsghmc: functional SGHMC (BASELINES §5), friction fsghmc_friction, RBF GP prior (median-heuristic
      lengthscale, variance fsghmc_kernel_variance) at fsghmc_measurement_points points redrawn every step,
      relative jitter fsghmc_jitter; fsghmc_weight_prior adds the task's weight prior (flagged deviation).
    noisy_de: the deep-ensemble pipeline with SGHMC noise at T = 1 (BASELINES §7), momentum de_momentum.
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
    psgld_lrs: tuple[float, ...] = (0.001, 0.003, 0.01)
    psgld_rho: float = 0.99
    psgld_lam: float = 1e-5
    fsghmc_lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    fsghmc_friction: float = 10.0
    fsghmc_measurement_points: int = 40
    fsghmc_kernel_variance: float = 1.0
    fsghmc_jitter: float = 1e-3
    fsghmc_weight_prior: bool = True
    noisy_de_lrs: tuple[float, ...] = (0.03, 0.1, 0.3)

    def __post_init__(self):
        for name in ("sghmc_lrs", "sghmc_frictions", "csghmc_lrs", "l2e_lrs", "de_lrs", "psgld_lrs", "fsghmc_lrs",
                     "noisy_de_lrs"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not values:
                raise ConfigError(f"grid.{name} must hold at least one learning rate")
            if not all(0 < v < float("inf") for v in values):
                raise ConfigError(f"grid.{name} must hold positive finite learning rates, got {values}")
        for name in ("csghmc_momentum_decay", "psgld_lam", "fsghmc_friction", "fsghmc_kernel_variance",
                     "fsghmc_jitter"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ConfigError(f"grid.{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.psgld_rho <= 1.0:
            raise ConfigError(f"grid.psgld_rho must be in [0, 1], got {self.psgld_rho}")
        if self.fsghmc_measurement_points < 1:
            raise ConfigError(f"grid.fsghmc_measurement_points must be a positive integer, got "
                              f"{self.fsghmc_measurement_points}")
        if not 0.0 <= self.csghmc_exploration_ratio < 1.0:
            raise ConfigError(f"grid.csghmc_exploration_ratio must be in [0, 1), got {self.csghmc_exploration_ratio}")
        if not 0.0 <= self.de_momentum < 1.0:
            raise ConfigError(f"grid.de_momentum must be in [0, 1), got {self.de_momentum}")
        if self.csghmc_cycles is not None and self.csghmc_cycles < 1:
            raise ConfigError(f"grid.csghmc_cycles must be a positive integer or None, got {self.csghmc_cycles}")

    def points(self, method: str) -> list[dict]:
        """The tuning grid of `method`: hyperparameter dicts (SGHMC: learning rate × friction); [{}] for a
        method without a grid (mile, nuts_bde)."""
        if method == "sghmc":
            return [{"learning_rate": lr, "friction": c} for lr in self.sghmc_lrs for c in self.sghmc_frictions]
        if method in FULL_BATCH_METHODS:
            return [{}]
        return [{"learning_rate": lr} for lr in self.lrs(method)]

    def lrs(self, method: str) -> tuple[float, ...]:
        """The learning-rate grid of `method`."""
        return {"sghmc": self.sghmc_lrs, "csghmc": self.csghmc_lrs, "l2e": self.l2e_lrs,
                "deep_ensemble": self.de_lrs, "psgld": self.psgld_lrs, "fsghmc": self.fsghmc_lrs,
                "noisy_de": self.noisy_de_lrs}[method]


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
    tune_examples: the first this many `inner_valid` examples score the grid (BMA NLL; regression: NLL = −LPPD
      of the pooled Gaussian mixture).
    Tasks are classification `TaskSpec`s or `tasks.regression.RegressionSpec`s.

    Full-batch methods (own budgets, not G; every gradient is a full-batch one):
    fullbatch_chains: chains of MILE / NUTS-BDE = the first this many deep-ensemble members (≤ num_samples),
      which are their initial positions (the DE's tuned lr is MILE's ε₀);
    mile_steps: MILE warm-up (n₁, n₂, n₃) MCLMC steps per chain (MILE's own default (40000, 5000, 5000) is
      scaled down in the presets); mile_samples draws per chain, mile_thinning steps apart (2 full-batch
      gradients per step);
    nuts_warmup: window-adaptation transitions per chain; nuts_samples draws per chain nuts_thinning apart;
      nuts_max_doublings: tree depth cap (≤ 2^d leapfrog steps per transition; MILE's BDE uses 10).
    barrier_examples: test examples of the loss-barrier path (METRICS §4).
    """

    seed: int = 0
    tasks: tuple[TaskSpec | RegressionSpec, ...] = ()
    held_out: tuple[str, ...] = ()
    methods: tuple[str, ...] = DEFAULT_METHODS
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
    fullbatch_chains: int = 2
    mile_steps: tuple[int, ...] = (400, 50, 50)
    mile_samples: int = 10
    mile_thinning: int = 10
    nuts_warmup: int = 50
    nuts_samples: int = 10
    nuts_thinning: int = 1
    nuts_max_doublings: int = 10
    barrier_examples: int = 500

    def __post_init__(self):
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "methods", tuple(self.methods))
        if not self.held_out:
            object.__setattr__(self, "held_out", ("",) * len(self.tasks))
        object.__setattr__(self, "held_out", tuple(self.held_out))
        if not self.tasks:
            raise ConfigError("tasks must not be empty")
        for spec in self.tasks:
            if not isinstance(spec, (TaskSpec, RegressionSpec)):
                raise ConfigError(f"tasks must hold TaskSpec or RegressionSpec entries, got {type(spec).__name__}")
        if len(self.held_out) != len(self.tasks):
            raise ConfigError(f"held_out has {len(self.held_out)} entries for {len(self.tasks)} tasks")
        if not self.methods:
            raise ConfigError("methods must not be empty")
        for m in self.methods:
            if m not in METHODS:
                raise ConfigError(f"unknown method {m!r}; known: {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"methods has duplicates: {self.methods}")
        for name in ("num_steps", "num_samples", "batch_size", "chunk", "eval_batch", "tune_examples",
                     "fullbatch_chains", "mile_samples", "mile_thinning", "nuts_samples", "nuts_thinning",
                     "nuts_max_doublings", "barrier_examples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_steps % self.num_samples:
            raise ConfigError(
                f"num_steps ({self.num_steps}) must be a multiple of num_samples ({self.num_samples}): "
                "deep-ensemble members and cSGHMC cycles split the budget evenly")
        if len(self.mile_steps) != 3 or any(int(v) < 0 for v in self.mile_steps) or int(self.mile_steps[0]) < 1:
            raise ConfigError(f"mile_steps must be three non-negative integers (n1 ≥ 1, n2, n3), got {self.mile_steps}")
        if self.nuts_warmup < 0:
            raise ConfigError(f"nuts_warmup must be a non-negative integer, got {self.nuts_warmup}")
        if any(m in FULL_BATCH_METHODS for m in self.methods) and self.fullbatch_chains > self.num_samples:
            raise ConfigError(f"fullbatch_chains ({self.fullbatch_chains}) must be ≤ num_samples ({self.num_samples}): "
                              "MILE / NUTS-BDE start from that many deep-ensemble members")
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
        if method in ("sghmc", "l2e", "psgld", "fsghmc"):
            return ChainSchedule(g, k, self.sample_thinning, self.batch_size, self.chunk)
        if method == "csghmc":
            return ChainSchedule(g, k, g // self.cycles, self.batch_size, self.chunk)
        if method in ("deep_ensemble", "noisy_de"):
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


_ALL_METHODS_GRID = MethodGrid(
    sghmc_lrs=(0.003, 0.01, 0.03, 0.1), sghmc_frictions=(10.0,), csghmc_lrs=(0.01, 0.03, 0.1, 0.3),
    l2e_lrs=(0.25, 0.5, 1.0), de_lrs=(0.003, 0.01, 0.03, 0.1), psgld_lrs=(0.0003, 0.001, 0.003),
    fsghmc_lrs=(0.003, 0.01, 0.03, 0.1), noisy_de_lrs=(0.003, 0.01, 0.03, 0.1))
"""Tuning grids of the `full` and `regression_1d` presets (every method)."""

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
    # every method on a UCI regression task and a small image task (≲ 15 min on 2 CPU cores).  MILE / NUTS-BDE budgets are scaled far down from MILE's
    # (50k warm-up + 10k sampling steps; NUTS 100 warm-up, 1000 draws, 12 chains): 2 chains (the first 2 DE
    # members), MILE warm-up (n1, n2, n3) = (800, 100, 100) + 10 draws 10 steps apart, NUTS 100 warm-up + 10 draws
    # with trees capped at 2^7 leapfrog steps.  yacht needs shared/data/uci (or $L2E_DATA_DIR/uci).
    "full": EvalConfig(
        tasks=(
            RegressionSpec("uci:yacht"),
            TaskSpec("digits", ModelSpec("mlp", hidden=(32,))),
        ),
        held_out=(
            "dataset+task (UCI regression, Gaussian location/scale MLP 16x16; MILE protocol, seed 1)",
            "architecture (8x8 digit images with an MLP 32; meta-training saw only CNNs): a small image task; "
            "an MLP rather than CNN c4 d1, whose full-batch gradient is 30x slower on CPU (NUTS / MILE budget)",
        ),
        methods=METHODS,
        num_steps=2000, num_samples=10, batch_size=64, chunk=2,
        grid=_ALL_METHODS_GRID,
        fullbatch_chains=2, mile_steps=(800, 100, 100), mile_samples=10, mile_thinning=10,
        nuts_warmup=100, nuts_samples=10, nuts_thinning=1, nuts_max_doublings=7,
        title="L2E evaluation: every baseline (full)",
    ),
    # the 1-D "in-between uncertainty" problem (tasks.regression.synthetic_1d): the band plot of every method
    "regression_1d": EvalConfig(
        tasks=(RegressionSpec("synthetic_1d"),),
        held_out=("dataset+task (1-D regression with a gap in the inputs)",),
        methods=METHODS,
        num_steps=2000, num_samples=10, batch_size=64, chunk=2,
        grid=_ALL_METHODS_GRID,
        fullbatch_chains=2, mile_steps=(2000, 250, 250), mile_samples=10, mile_thinning=20,
        nuts_warmup=200, nuts_samples=10, nuts_thinning=2, nuts_max_doublings=8,
        title="L2E evaluation: 1-D in-between uncertainty",
    ),
    # the paper's CIFAR-10 comparison (spec §6, the released code's schedule) on a machine with the data (TFDS
    # cifar10 train[:40960] / test, fashion_mnist) and, for agreement / TV against HMC, the reference file:
    #   python -m evaluate --preset paper --reference cifar10/resnet20-frn=../shared/data/hmc_reference/cifar10/probs.csv
    # ResNet20-FRN-Swish with prior N(0, 1/5), batch 128; 600 CIFAR epochs (320 steps each) = 192,000 gradients
    # per method, 10 samples at the end of epochs 150, 200, …, 600; L2E lr (ε²N) 2.0 as the paper's CIFAR-10
    # evaluation; cSGHMC 12 cycles of 50 epochs, exploration 0.94, momentum decay 0.01 (L2E Table 13; lr₀ 0.5
    # of the authors' public script); deep ensemble: 10 members of 60 epochs, SGD momentum 0.9, lr 0.1. Fixed
    # hyperparameters (tune=False: the paper's lr values were lost); GPU work.
    "paper": EvalConfig(
        tasks=(
            TaskSpec("cifar10", ModelSpec("resnet20_frn"), prior_variance=0.2),
            TaskSpec("fashion_mnist", ModelSpec("fmnist_1conv"), prior_variance=0.2),
        ),
        held_out=(
            "dataset+architecture (CIFAR-10, ResNet20-FRN-Swish; the Izmailov et al. HMC reference setting)",
            "dataset+architecture (Fashion-MNIST, 1-conv CNN; the paper's FMNIST evaluation model)",
        ),
        methods=("l2e", "csghmc", "deep_ensemble"),
        num_steps=192_000, num_samples=10, thinning=16_000, batch_size=128, chunk=10, eval_batch=500,
        tune=False,
        grid=MethodGrid(l2e_lrs=(2.0,), csghmc_lrs=(0.5,), csghmc_cycles=12, csghmc_exploration_ratio=0.94,
                        csghmc_momentum_decay=0.01, de_lrs=(0.1,), de_momentum=0.9),
        title="L2E evaluation: the paper's CIFAR-10 / Fashion-MNIST comparison",
    ),
}


def get_preset(name: str) -> EvalConfig:
    """The preset called `name` (ConfigError if unknown)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
