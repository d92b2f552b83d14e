"""What a method is: `Method` (settings dataclass, tuning grid, chain schedule, runner) and `Run`, the context
one runner call gets; plus the checks settings dataclasses share.

A method module (evaluate/methods/<name>.py) defines a frozen settings dataclass, a runner
`run(ctx: Run, key, hp) -> MethodResult` and `METHOD = Method(...)`; registry.py lists the module.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

from base.io import ConfigError

__all__ = ["GRID_NAMES", "Method", "Run", "always", "check_grid", "check_in", "check_positive", "lr_friction_grid",
           "lr_grid"]


GRID_NAMES = ("every", "full", "smoke")
"""The preset grids a method declares (Method.grids)."""


class Run(NamedTuple):
    """The context of one runner call.

    task: the built task; cfg: the EvalConfig; settings: the method's settings (cfg.settings.<name>);
    split: "test" / "inner_valid" / ... (a Splits field) or an (x, y) tuple to predict on;
    cache: the evaluation's CompileCache;
    probe: only measure the cost of one update (the drivers compile, warm up and time the method's chunk and
      return a MethodResult without samples; evaluate.budget's wall-time budgets).
    """

    task: Any
    cfg: Any
    settings: Any
    split: Any
    cache: Any
    probe: bool = False


@dataclasses.dataclass(frozen=True)
class Method:
    """One evaluated method.

    name: the registry key (report name, `methods=` entry, `--set settings.<name>.<field>=…`).
    settings: frozen dataclass type of the method's configuration (tuning grid and fixed hyperparameters);
      default-constructible; its __post_init__ raises ConfigError on bad values.
    run: runner(ctx: Run, key, hp) -> MethodResult; key = (init key, chain key); hp = one grid point plus
      what `needs_sampler` / `warm_start` add.
    grid: settings -> tuning points (hyperparameter dicts, tried in order; the first is used without tuning);
      None: no tuning (one run with hp = {}).
    schedule: (cfg, settings) -> ChainSchedule of one chain / ensemble member; None for full-batch methods.
    check: (cfg, settings) -> None, raising ConfigError for settings that do not fit cfg (beyond the schedule).
    full_batch: uses full-batch gradients and its own budget (else the shared G minibatch gradients).
    curve_budget: (settings, cfg, data_size) -> settings: a full-batch method's settings for a budget-curve point of
      G = cfg.num_steps minibatch gradients of B = cfg.batch_size examples — its own work ≈ G·B/N full-batch
      gradients, K = cfg.num_samples draws; None: a full-batch method is not on the curves.
    needs_sampler: hp gets "meta_params", "sampler" and "checkpoint": True — of the evaluation's learned-sampler
      checkpoint (`--sampler`, default the shipped "default"); a string — of that shipped checkpoint
      (l2e.checkpoint.SHIPPED, e.g. "mass").
    needs_released: hp gets the same from the L2E authors' released meta-parameters (`--released PATH`).
    warm_start: hp gets "init_positions", "step_size0" and "warm_start" from the deep ensemble's final run.
    temperature: the temperature T the method targets, reported in every row (1.0 for the posterior samplers; a
      string for methods without one, e.g. "n/a (optimiser)"); a runner that tunes or reads T records it as
      hyperparameters["temperature"], which takes precedence.
    kinetic_check: the method's kinetic temperature is a stationarity diagnostic at its target T (a correct momentum
      sampler with a fixed step in its sampling window): with EvalConfig.kinetic_tolerance, tuning rejects a grid
      point whose chains' T_kin leave [1 − tol, 1 + tol]·T (evaluate.tuning).  False for samplers that run at
      another temperature by design (paper-form L2E), decaying-step samplers (cyclical SGHMC) and optimisers.
    chain_allocation: the evaluation's chain allocation (EvalConfig.chains = M: M chains of G/M updates with K/M
      draws each, pooled) applies — every single-chain minibatch method; False for methods that split the budget
      themselves (ensembles) and for full-batch or warm-started methods with chains of their own.

    What the presets, the card, the benchmarks and the tests read of a method (its one home; nothing else lists it):
    grids: settings fields per preset grid — "every" (the `regression_1d` preset, and the `full` / `references`
      presets where "full" is absent), "full" (the `full` / `references` presets), "smoke" (the smallest settings
      an end-to-end test runs: one grid point); a missing key: the settings' defaults.
    card: the sampler card's builder (evaluate.card): (posterior, eps, friction, sigma_min, num_steps) ->
      (SamplingAlgorithm, weight(state) -> 0/1); None: not on the card (learned samplers join it from their
      checkpoints).
    step_cost: bench.step_cost's probe: (posterior, functional posterior) -> {row label: SamplingAlgorithm}, the
      steps (and phase kernels) the benchmark times against SGHMC's; None: not timed there.
    audit: bench.defaults_audit runs the method at its default settings.
    batch_chains: its runner passes its key on to `driver.run_single_chain` unchanged and returns its result
      unchanged, so the M chains of a chain allocation, and several runs (registry.run_many: seeds, grid points),
      can run as vmapped programs (evaluate.methods.batched; EvalConfig.batch_chains decides).
    """

    name: str
    settings: type
    run: Callable
    grid: Callable[[Any], list[dict]] | None = None
    schedule: Callable | None = None
    check: Callable | None = None
    full_batch: bool = False
    curve_budget: Callable | None = None
    needs_sampler: bool | str = False
    needs_released: bool = False
    warm_start: bool = False
    temperature: float | str = 1.0
    chain_allocation: bool = True
    kinetic_check: bool = False
    grids: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    card: Callable | None = None
    step_cost: Callable | None = None
    audit: bool = False
    batch_chains: bool = False

    def preset_grid(self, grid: str) -> dict:
        """The settings fields of preset grid `grid` ("every", "full", "smoke"; Method.grids), {} for the defaults;
        "full" falls back to "every"."""
        if grid not in GRID_NAMES:
            raise ValueError(f"unknown preset grid {grid!r} (known: {', '.join(GRID_NAMES)})")
        fields = self.grids.get(grid, self.grids.get("every") if grid == "full" else None)
        return dict(fields or {})

    @property
    def tuned(self) -> bool:
        return self.grid is not None

    def points(self, settings) -> list[dict]:
        """The tuning grid of `settings` ([{}] without a grid)."""
        return self.grid(settings) if self.grid is not None else [{}]

    def validate(self, cfg, settings) -> None:
        """Raise ConfigError (one line) unless `settings` fit `cfg` (the schedule can be built, `check` passes)."""
        try:
            if self.schedule is not None:
                self.schedule(cfg, settings)
            if self.check is not None:
                self.check(cfg, settings)
        except ValueError as e:
            raise ConfigError(str(e).splitlines()[0]) from None


def always(state):
    """The sampler card's weight of a state that always counts (Method.card): 1."""
    import jax.numpy as jnp

    return jnp.ones(())


def lr_grid(settings) -> list[dict]:
    """[{"learning_rate": lr} for lr in settings.lrs]."""
    return [{"learning_rate": lr} for lr in settings.lrs]


def lr_friction_grid(settings) -> list[dict]:
    """[{"learning_rate": lr, "friction": c} for lr in settings.lrs for c in settings.frictions] (SGHMC's grid)."""
    return [{"learning_rate": lr, "friction": c} for lr in settings.lrs for c in settings.frictions]


def check_grid(settings, where: str, *names: str) -> None:
    """Each named field becomes a tuple of floats that must be non-empty, positive and finite."""
    for name in names:
        values = tuple(float(v) for v in getattr(settings, name))
        object.__setattr__(settings, name, values)
        if not values:
            raise ConfigError(f"{where}.{name} must hold at least one value")
        if not all(0 < v < float("inf") for v in values):
            raise ConfigError(f"{where}.{name} must hold positive finite values, got {values}")


def check_positive(settings, where: str, *names: str) -> None:
    """Each named field must be positive and finite."""
    for name in names:
        if not 0 < getattr(settings, name) < float("inf"):
            raise ConfigError(f"{where}.{name} must be positive, got {getattr(settings, name)}")


def check_in(settings, where: str, name: str, low: float, high: float, closed: bool = True) -> None:
    """Field `name` must lie in [low, high] (closed) or [low, high)."""
    v = getattr(settings, name)
    if not (low <= v <= high if closed else low <= v < high):
        raise ConfigError(f"{where}.{name} must be in [{low:g}, {high:g}{']' if closed else ')'}, got {v}")
