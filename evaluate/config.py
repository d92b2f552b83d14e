"""Evaluation configuration: the frozen `EvalConfig`, presets, and `key=value` overrides (base.io).

Per-method settings (tuning grids, fixed hyperparameters, full-batch budgets) live in the group
`settings.<method>` (`evaluate.methods.registry.MethodSettings`), e.g. `--set settings.sghmc.lrs=0.01,0.1`.
"""
from __future__ import annotations

import dataclasses
import json

from evaluate.budget import BUDGET_MODES
from evaluate.reference import REFERENCE_TASKS
from evaluate.methods.batch import BATCH_MODES
from evaluate.methods.registry import METHODS, MethodSettings, get_method, method_settings, preset_grids
from l2e.chains import ChainSchedule
from base.io import ConfigError
from cli import apply_overrides, check_seed, limits
from tasks.models import ModelSpec
from tasks.reference import task_name
from tasks.regression import RegressionSpec
from tasks.task import TaskSpec

__all__ = ["DEFAULT_METHODS", "FULL_GRID_POINTS", "METHODS", "ConfigError", "EvalConfig", "MethodSettings", "PRESETS",
           "apply_overrides", "check_runs", "get_preset", "method_settings"]

DEFAULT_METHODS = ("l2e", "l2e_mass", "sghmc", "csghmc", "deep_ensemble")
"""The methods of `EvalConfig()` and of the "default" / "smoke" presets."""


def _check_setting_limits(method: str, settings) -> None:
    """A method's settings within the resource limits: integers (steps, chains, warm-up; also inside value lists) at
    most cli.limits.MAX_STEPS, value lists (tuning grids) at most MAX_GRID long."""
    if not dataclasses.is_dataclass(settings):
        return
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, tuple):
            limits.at_most(f"settings.{method}.{f.name} (its length)", len(value), limits.MAX_GRID)
            for v in value:
                limits.at_most(f"settings.{method}.{f.name}", v if isinstance(v, int) else 0, limits.MAX_STEPS)
        else:
            limits.at_most(f"settings.{method}.{f.name}", value if isinstance(value, int) else 0, limits.MAX_STEPS)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Everything that determines an evaluation run (with the seed and checkpoint, its numbers are reproducible).

    tasks / held_out: the evaluation tasks (classification `TaskSpec`s or `tasks.regression.RegressionSpec`s)
      and, in parallel, why each is held out of meta-training.
    methods: registered method names (evaluate.methods.registry), run and reported in this order.
    num_steps: G, the number of minibatch gradient evaluations every minibatch method gets.
    num_samples: K, samples per method (single chains: thinned from one chain; cSGHMC: one per cycle end of the
      last K cycles; ensembles: K members of G/K updates).  G must be a multiple of K.
    thinning: updates between single-chain samples (None → G // (2K): the K samples span the last half).
    batch_size: minibatch size; chunk: updates per compiled call (Python-unrolled, see l2e.chains).
    eval_batch: test-set examples per compiled prediction call (the last batch is padded).
    tune: tune each method over its grid (else the first grid point is used); tune_examples: the first this
      many `inner_valid` examples score the grid (`task.score`: BMA NLL; regression −LPPD of the pooled mixture).
    settings: the settings of every registered method (tuning grids in mean-loss units, see
      docs/samplers.md; full-batch methods' chains and budgets).
    barrier_examples: test examples of the loss-barrier path (docs/evaluation.md, Loss barrier).
    seeds: evaluation seeds (None → (seed,)); each repeats every method, tuning included, with the task keys
      folded from PRNGKey(seed) as for `seed`; with more than one the report gives mean ± standard error per
      metric (evaluate.seeds) and keeps every seed's entry.
    budget: "gradients" (every minibatch method gets G = num_steps updates) or "seconds" (every minibatch method
      gets budget_seconds of wall time per run: evaluate.budget.seconds_num_steps; budget_seconds is ignored
      under "gradients").
    extend_grid: when the selected learning rate lies on an edge of a method's grid, extend the grid in that
      direction (evaluate.tuning; at most GRID_EXTENSIONS times); the entry says so (grid_extended).
    optional_methods: methods skipped with a note in the report (rather than an error) when their input is
      missing (l2e_released without its file).
    kinetic_tolerance: tol — with it, tuning ranks a grid point of a method with Method.kinetic_check whose chains'
      kinetic temperature leaves [1 − tol, 1 + tol]·T behind every point inside the band (a chain running hot is
      on the edge of stability or dominated by its gradient noise; evaluate.tuning); among points outside it the
      validation score decides as without it; the entry lists them (kinetic_rejected).  None: not checked.
    batch_chains: how the M chains of a chain allocation run for a method with Method.batch_chains — "auto" (one
      vmapped program unless the model convolves on the CPU), "always", "never" (one at a time): evaluate.methods.batch.
    failure_extensions: when no grid point of a method scores finitely (every one diverged) or, with
      kinetic_tolerance, none is inside the band, up to this many more points are tried, each the previous smallest
      learning rate divided by the grid's ratio lrs[1]/lrs[0] (3 for a single-lr grid), stopping at the first that
      is; the entry lists them as "rescue" in grid_extended.
    chains: M, the chain allocation of every single-chain minibatch method (Method.chain_allocation): M parallel
      chains of G/M updates keeping K/M draws each, pooled into one BMA (M = 1: one chain of G; M = K: one draw
      per chain). M must divide K; ensembles and full-batch methods keep their own split.
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
    settings: MethodSettings = MethodSettings()
    title: str = "L2E evaluation on held-out tasks"
    barrier_examples: int = 500
    seeds: tuple[int, ...] | None = None
    budget: str = "gradients"
    budget_seconds: float | None = None
    extend_grid: bool = False
    optional_methods: tuple[str, ...] = ()
    chains: int = 1
    kinetic_tolerance: float | None = None
    failure_extensions: int = 0
    batch_chains: str = "auto"

    def __post_init__(self):
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "methods", tuple(self.methods))
        object.__setattr__(self, "held_out", tuple(self.held_out) or ("",) * len(self.tasks))
        object.__setattr__(self, "optional_methods", tuple(self.optional_methods))
        if self.seeds is not None:
            object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if not self.tasks:
            raise ConfigError("tasks must not be empty")
        for spec in self.tasks:
            if not isinstance(spec, (TaskSpec, RegressionSpec)):
                raise ConfigError(f"tasks must hold TaskSpec or RegressionSpec entries, got {type(spec).__name__}")
        if len(self.held_out) != len(self.tasks):
            raise ConfigError(f"held_out has {len(self.held_out)} entries for {len(self.tasks)} tasks")
        self._check_sizes()
        self._check_protocol()
        self._check_methods()

    def _check_sizes(self) -> None:
        for name in ("num_steps", "num_samples", "batch_size", "chunk", "eval_batch", "tune_examples",
                     "barrier_examples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_steps % self.num_samples:
            raise ConfigError(
                f"num_steps ({self.num_steps}) must be a multiple of num_samples ({self.num_samples}): "
                "ensemble members and cSGHMC cycles split the budget evenly")
        if self.thinning is not None and self.thinning <= 0:
            raise ConfigError(f"thinning must be a positive integer or None, got {self.thinning}")
        if self.batch_chains not in BATCH_MODES:
            raise ConfigError(f"batch_chains must be one of {', '.join(BATCH_MODES)}, got {self.batch_chains!r}")
        if isinstance(self.chains, bool) or not isinstance(self.chains, int) or self.chains < 1 \
                or self.num_samples % self.chains:
            raise ConfigError(f"chains must be a positive integer dividing num_samples ({self.num_samples}), got "
                              f"{self.chains!r}")
        for name, limit in (("num_steps", limits.MAX_STEPS), ("num_samples", limits.MAX_SAMPLES),
                            ("batch_size", limits.MAX_BATCH), ("chunk", limits.MAX_STEPS),
                            ("eval_batch", limits.MAX_BATCH), ("tune_examples", limits.MAX_EXAMPLES),
                            ("barrier_examples", limits.MAX_EXAMPLES), ("thinning", limits.MAX_STEPS),
                            ("chains", limits.MAX_CHAINS)):
            limits.at_most(name, getattr(self, name), limit)

    def _check_protocol(self) -> None:
        """seeds, budget mode and optional methods."""
        check_seed(self.seed)
        for s in self.seeds or ():
            check_seed(s, "seeds")
        if self.seeds is not None:
            if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
                raise ConfigError(f"seeds must be distinct non-negative integers, got {self.seeds}")
        if self.budget not in BUDGET_MODES:
            raise ConfigError(f"budget must be one of {', '.join(BUDGET_MODES)}, got {self.budget!r}")
        if self.budget_seconds is not None and not 0 < self.budget_seconds < float("inf"):
            raise ConfigError(f"budget_seconds must be positive, got {self.budget_seconds}")
        limits.at_most("budget_seconds", self.budget_seconds, limits.MAX_SECONDS)
        for name in self.optional_methods:
            get_method(name)
        tol = self.kinetic_tolerance
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1):
            raise ConfigError(f"kinetic_tolerance must be a number in (0, 1) or None, got {tol!r}")
        ext = self.failure_extensions
        if isinstance(ext, bool) or not isinstance(ext, int) or not 0 <= ext <= 10:
            raise ConfigError(f"failure_extensions must be an integer in [0, 10], got {ext!r}")

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The evaluation seeds: `seeds`, or (seed,)."""
        return self.seeds if self.seeds is not None else (self.seed,)

    def check_budget(self) -> None:
        """ConfigError unless budget="seconds" has its budget_seconds (checked when an evaluation starts, so the
        two can be set by overrides in either order)."""
        if self.budget == "seconds" and self.budget_seconds is None:
            raise ConfigError("budget=seconds needs budget_seconds (wall seconds per run, e.g. --budget-seconds 30)")

    def _check_methods(self) -> None:
        """Known, distinct methods whose settings fit this config (their warm start's too)."""
        if not self.methods:
            raise ConfigError("methods must not be empty")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"methods has duplicates: {self.methods}")
        used = set(self.methods)
        if any(get_method(m).warm_start for m in self.methods):
            used.add("deep_ensemble")
        for name in METHODS:
            if name in used:
                get_method(name).validate(self, getattr(self.settings, name))
                _check_setting_limits(name, getattr(self.settings, name))

    @property
    def sample_thinning(self) -> int:
        """Updates between consecutive single-chain samples."""
        return self.thinning or max(1, self.num_steps // (2 * self.num_samples))

    def schedule(self, method: str) -> ChainSchedule:
        """The ChainSchedule of one chain of `method` (of one member for an ensemble)."""
        m = get_method(method)
        if m.schedule is None:
            raise ConfigError(f"method {method!r} has no minibatch chain schedule")
        return m.schedule(self, getattr(self.settings, method))

    def task_names(self) -> list[str]:
        """Report names of the tasks: spec.name (+ "-n<max_train>"), "#2", "#3"… for repeats."""
        names, seen = [], {}
        for spec in self.tasks:
            name = task_name(spec)
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return names

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


_EVERY_METHOD_GRID = preset_grids("every")
"""Tuning grids of the `regression_1d` preset: each method's Method.grids["every"] (the others: their defaults)."""

FULL_GRID_POINTS = 4
_FULL_GRID = preset_grids("full")
"""Tuning grids of the `full` preset: each method's Method.grids["full"] (else "every"): FULL_GRID_POINTS points for
every tuned method but the tuning-free learned ones (their one point, the multiplier 1) (sghmc, baoab, the
preconditioned SGHMCs: 4 lrs × 1 friction; warm_sghmc: 2 lrs × 2 Adam fractions; sghmc_tempered: 2 lrs ×
T ∈ {1, 0.1}), extended at an edge of the lr grid (extend_grid)."""

_SMILE_CHAINS = dict(smile=dict(chains=5), psmile=dict(chains=5))
"""SMILE / pSMILE chains of the presets with K = 10 samples: the authors run 8 chains from 8 deep-ensemble members;
5 is the largest divisor of K not above 8 (evaluate.methods.smile)."""

PRESETS: dict[str, EvalConfig] = {
    # under a minute end to end (compilation included): one tiny task, a short budget, 1–2 lrs per method
    "smoke": EvalConfig(
        tasks=(TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1), max_train=400),),
        held_out=("none (smoke test: inside the meta-training distribution)",),
        num_steps=60, num_samples=3, thinning=10, batch_size=32, chunk=2, eval_batch=128, tune_examples=64,
        settings=method_settings(sghmc=dict(lrs=(0.03, 0.1), frictions=(10.0,)), csghmc=dict(lrs=(0.1,)),
                                 l2e=dict(lrs=(0.5,)), deep_ensemble=dict(lrs=(0.1,))),
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
    # every method on a UCI regression task and a small image task (≲ 15 min on 2 CPU cores before the tempered
    # SGHMC control, the released L2E (when the data root holds l2e_released/) and grid extension).  FULL_GRID_POINTS
    # grid points per tuned method, an lr grid extended at its edges (extend_grid).  MILE / NUTS-BDE
    # budgets are scaled far down from MILE's
    # (50k warm-up + 10k sampling steps; NUTS 100 warm-up, 1000 draws, 12 chains): 2 chains (the first 2 DE
    # members), MILE warm-up (n1, n2, n3) = (800, 100, 100) + 10 draws 10 steps apart, NUTS 100 warm-up + 10 draws
    # with trees capped at 2^7 leapfrog steps.  yacht needs uci/yacht in the data root
    # ($L2E_DATA_DIR, else ~/.cache/l2e).
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
        settings=method_settings(**_FULL_GRID, **_SMILE_CHAINS,
                                 mile=dict(chains=2, steps=(800, 100, 100), samples=10, thinning=10),
                                 nuts_bde=dict(chains=2, warmup=100, samples=10, thinning=1, max_doublings=7)),
        title="L2E evaluation: every baseline (full)",
        extend_grid=True, optional_methods=("l2e_released",),
    ),
    # the 1-D "in-between uncertainty" problem (tasks.regression.synthetic_1d): the band plot of every method
    "regression_1d": EvalConfig(
        tasks=(RegressionSpec("synthetic_1d"),),
        held_out=("dataset+task (1-D regression with a gap in the inputs)",),
        methods=METHODS,
        num_steps=2000, num_samples=10, batch_size=64, chunk=2,
        settings=method_settings(**_EVERY_METHOD_GRID, **_SMILE_CHAINS,
                                 mile=dict(chains=2, steps=(2000, 250, 250), samples=10, thinning=20),
                                 nuts_bde=dict(chains=2, warmup=200, samples=10, thinning=2, max_doublings=8)),
        title="L2E evaluation: 1-D in-between uncertainty",
        optional_methods=("l2e_released",),
    ),
    # the paper's CIFAR-10 comparison (docs/evaluation.md, The paper's protocol, the released code's schedule) on a machine with the data (TFDS
    # cifar10 train[:40960] / test, fashion_mnist) and, for agreement / TV against HMC, the reference file:
    #   python -m evaluate --preset paper --reference cifar10/resnet20-frn=PATH/hmc_reference/cifar10/probs.csv
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
        settings=method_settings(l2e=dict(lrs=(2.0,)), deep_ensemble=dict(lrs=(0.1,), momentum=0.9),
                                 csghmc=dict(lrs=(0.5,), cycles=12, exploration_ratio=0.94, momentum_decay=0.01)),
        title="L2E evaluation: the paper's CIFAR-10 / Fashion-MNIST comparison",
    ),
}

# the tasks of the committed NUTS references (results/references/, evaluate.reference.REFERENCE_TASKS) with the
# `full` preset's methods, budgets and grids:
#   python -m evaluate --preset references --reference results/references --seeds 0,1,2
PRESETS["references"] = dataclasses.replace(
    PRESETS["full"], tasks=tuple(t for t, _ in REFERENCE_TASKS), held_out=tuple(h for _, h in REFERENCE_TASKS),
    title="L2E evaluation: every baseline on the committed NUTS references")


def check_runs(cfg: EvalConfig, budgets, chains=(1,), seeds=()) -> None:
    """Check, before anything runs, every configuration a run of several budgets makes from `cfg` (the curves: each
    budget G and chain allocation M as `num_steps` and `chains`, with the window's default thinning and no tuning):
    each is built, so every check and resource limit of EvalConfig runs on it, and every seed is in the range the
    PRNG keeps distinct (cli.check_seed: 2**32 gave seed 0's curve; a budget of 3·10⁸ was refused after the smaller
    budgets ran).

    Args:
      cfg: the EvalConfig.
      budgets: the budgets G.
      chains: the chain allocations M.
      seeds: the seeds.
    Raises:
      ConfigError: naming the budget, allocation or seed.
    """
    for s in seeds:
        check_seed(s, "seeds")
    for g in budgets:
        for m in chains:
            try:
                dataclasses.replace(cfg, num_steps=g, chains=m, thinning=None, tune=False)
            except ConfigError as e:
                raise ConfigError(f"budget {g} with {m} chain{'s' if m != 1 else ''}: {e}") from None


def get_preset(name: str) -> EvalConfig:
    """The preset called `name` (ConfigError if unknown)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
