"""Meta-training configuration: frozen dataclasses (the named presets are in meta_train.presets, which imports this
module; `key=value` overrides and ConfigError come from base.io and are re-exported here; the objective group,
ObjectiveConfig, lives with the objectives in meta_train.objectives.settings and is re-exported here). The valid estimators and
objectives, and what each allows, are read from their tables (meta_train.estimators.ESTIMATORS,
meta_train.objectives.OBJECTIVES)."""
from __future__ import annotations

import dataclasses
import json
import math

from l2e.chains import ChainSchedule
from l2e import learned
from base.io import ConfigError, dataclass_from_dict
from cli import apply_overrides, check_seed, limits
from l2e.types import META_STARTS
from meta_train import estimators, objectives
from meta_train.objectives.settings import ObjectiveConfig
from tasks.distribution import TaskDistribution

ESTIMATORS = tuple(estimators.ESTIMATORS)
"""The valid es.estimator values: the keys of meta_train.estimators.ESTIMATORS."""


@dataclasses.dataclass(frozen=True)
class ESConfig:
    """The outer loop: the gradient estimator, its ES population and the outer optimiser (global-norm clip, Adam;
    meta_train.estimators.common.outer_optimizer).

    population: ES members (even; pairs = population/2); sigma: perturbation std;
    lr: Adam learning rate; clip_norm: global-norm gradient clip; reset_optimizer: rebuild Adam every
    iteration (the released code's behaviour, ≈ sign-SGD) instead of keeping its state.
    divergence_penalty: fitness given to a member whose meta-loss is not finite, and the cap of every member's
    fitness (meta_train.estimators.common.cap_fitness).
    execution: how the population's inner chains run — "vmap" (one program over the batched members,
    sharded over the device mesh: the GPU/TPU and multi-host path), "sequential" (each member is an ordinary
    single-chain program, dispatched round-robin over the local devices: on XLA:CPU a vmapped conv net
    becomes a slow grouped convolution), or "auto" (sequential on a single-process CPU, vmap otherwise).
    The modes agree to float32 rounding (tests/test_meta_train.py; meta_train.es).
    estimator: the outer gradient estimator, a key of meta_train.estimators.ESTIMATORS — "antithetic" (full-length
    antithetic ES, above), or a truncated one: "truncated" (truncated ES), "pes" (persistent ES), "noise_reuse"
    (noise-reuse ES), "backprop" (truncated backprop through the chain); truncation: updates per segment for
    those (one outer iteration per segment; it must divide inner.num_steps and be a multiple of
    inner.num_samples).
    """

    population: int = 2
    sigma: float = 0.01
    lr: float = 0.01
    clip_norm: float = 1.0
    reset_optimizer: bool = False
    divergence_penalty: float = 100.0
    execution: str = "auto"
    estimator: str = "antithetic"
    truncation: int = 50

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ConfigError(f"es.estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.truncation <= 0:
            raise ConfigError(f"es.truncation must be a positive integer, got {self.truncation}")
        if self.execution not in ("auto", "vmap", "sequential"):
            raise ConfigError(f"es.execution must be auto, vmap or sequential, got {self.execution!r}")
        if self.population < 2 or self.population % 2:
            raise ConfigError(f"es.population must be a positive even number, got {self.population}")
        for name in ("sigma", "lr", "clip_norm", "divergence_penalty"):
            if not 0 < getattr(self, name) < math.inf:  # refuses nan and inf too
                raise ConfigError(f"es.{name} must be a positive finite number, got {getattr(self, name)}")


OBJECTIVES = tuple(objectives.OBJECTIVES)
"""The valid objective.kind values: the keys of meta_train.objectives.OBJECTIVES."""


SAMPLER_KINDS = tuple(learned.REGISTRY)
"""The learned samplers that can be meta-trained: the keys of the learned-sampler registry (l2e.learned)."""
META_INITS = META_STARTS


@dataclasses.dataclass(frozen=True)
class _RunFields:
    """The fields of MetaTrainConfig that do not depend on the learned-sampler registry (see MetaTrainConfig)."""

    seed: int = 0
    num_outer: int = 100
    meta_loss_examples: int = 512
    checkpoint_every: int = 10
    hidden: tuple[int, ...] = (32, 32)
    meta_init: str = "sghmc"
    init_from: str | None = None
    es: ESConfig = ESConfig()
    inner: ChainSchedule = ChainSchedule(num_steps=3000, num_samples=10, thinning=50, batch_size=128)
    tasks: TaskDistribution = TaskDistribution(datasets=("digits",))
    sampler_kind: str = "l2e"
    objective: ObjectiveConfig = ObjectiveConfig()

    def __post_init__(self):
        check_seed(self.seed)
        if not self.hidden or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in self.hidden):
            raise ConfigError(f"hidden must be positive layer widths (at least one layer), got {self.hidden}")
        limits.at_most("hidden (a width)", max(self.hidden), limits.MAX_META_WIDTH)
        limits.at_most("hidden (its layers)", len(self.hidden), limits.MAX_META_LAYERS)
        for name, value, limit in (("num_outer", self.num_outer, limits.MAX_OUTER),
                                   ("checkpoint_every", self.checkpoint_every, limits.MAX_OUTER),
                                   ("meta_loss_examples", self.meta_loss_examples, limits.MAX_EXAMPLES),
                                   ("es.population", self.es.population, limits.MAX_POPULATION),
                                   ("inner.num_steps", self.inner.num_steps, limits.MAX_STEPS),
                                   ("inner.num_samples", self.inner.num_samples, limits.MAX_SAMPLES),
                                   ("inner.thinning", self.inner.thinning, limits.MAX_STEPS),
                                   ("inner.batch_size", self.inner.batch_size, limits.MAX_BATCH)):
            limits.at_most(name, value, limit)
        if self.meta_init not in META_INITS:
            raise ConfigError(f"meta_init must be one of {META_INITS}, got {self.meta_init!r}")
        if self.sampler_kind not in SAMPLER_KINDS:
            raise ConfigError(f"sampler_kind must be one of {SAMPLER_KINDS}, got {self.sampler_kind!r}")
        for name in ("num_outer", "meta_loss_examples", "checkpoint_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        b, s, k = self.objective.burn_in, self.inner.num_steps, self.inner.num_samples
        tr, estimator = self.es.truncation, estimators.get(self.es.estimator)
        if estimator.TRUNCATED and (s % tr or tr % k or b):
            raise ConfigError(f"es.truncation ({tr}) must divide inner.num_steps ({s}) and be a multiple of "
                              f"inner.num_samples ({k}), with objective.burn_in 0, for es.estimator {self.es.estimator}")
        if objectives.get(self.objective.kind).gradient_only and not estimator.PATHWISE:
            pathwise = [name for name, m in estimators.ESTIMATORS.items() if m.PATHWISE]
            raise ConfigError(f"objective.kind {self.objective.kind} gives gradients only: it needs es.estimator "
                              f"{' or '.join(pathwise)}")
        if b and (s - b) // k < 1:
            raise ConfigError(f"objective.burn_in ({b}) leaves fewer than inner.num_samples ({k}) steps of the "
                              f"inner.num_steps ({s})")
        refusal = estimator.objective_refusal(self)  # what this estimator cannot do with the objective, and why
        if refusal:
            raise ConfigError(f"es.estimator {self.es.estimator} cannot take objective.kind {self.objective.kind} "
                              f"as configured: {refusal}")
        for budget in self.objective.budgets:
            limits.at_most("objective.budgets (a budget)", budget, limits.MAX_STEPS)
            try:
                if (budget - self._burn_in_at(budget)) // k < 1:
                    raise ValueError(f"fewer than inner.num_samples ({k}) updates after the burn-in "
                                     f"({self._burn_in_at(budget)})")
                self.schedule_at(budget)
            except ValueError as e:
                raise ConfigError(f"objective.budgets: a chain of {budget} updates does not fit: {e}") from None

    @property
    def learned_sampler(self):
        """The registry entry (l2e.types.LearnedSampler) of the sampler being meta-trained."""
        return learned.get(self.sampler_kind)

    @property
    def sampler_config(self):
        """The configuration of the sampler being meta-trained — its registry entry's config group — with the
        entry's sampling-window rule applied at the first update of the window (e.g. Mass-L2E's freeze_step)."""
        return self.sampler_config_at(self.schedule)

    @property
    def schedule(self) -> ChainSchedule:
        """The inner chain's schedule: `inner` itself, or with objective.burn_in > 0 its samples spread evenly
        over (burn_in, num_steps]."""
        return self.schedule_at(self.inner.num_steps)

    def _burn_in_at(self, budget: int) -> int:
        return int(round(self.objective.burn_in * budget / self.inner.num_steps))

    def schedule_at(self, budget: int) -> ChainSchedule:
        """`schedule` for a chain of `budget` updates, burn-in scaled with it (objective.budgets)."""
        inner = self.inner if budget == self.inner.num_steps else dataclasses.replace(self.inner, num_steps=budget)
        b = self._burn_in_at(budget)
        if not b:
            return inner
        return dataclasses.replace(inner, thinning=(budget - b) // inner.num_samples)

    @property
    def schedules(self) -> tuple[ChainSchedule, ...]:
        """The inner chains of one outer iteration: `schedule_at` each of objective.budgets, or (`schedule`,)."""
        return tuple(self.schedule_at(b) for b in self.objective.budgets) or (self.schedule,)

    def sampler_config_at(self, schedule: ChainSchedule):
        """`sampler_config` with the sampling window of `schedule` (one of `schedules`)."""
        entry = self.learned_sampler
        return entry.sampling_config(getattr(self, entry.config_group),
                                     schedule.num_steps - schedule.num_samples * schedule.thinning)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


MetaTrainConfig = dataclasses.make_dataclass(
    "MetaTrainConfig",
    [(e.config_group, e.config, dataclasses.field(default=e.config())) for e in learned.REGISTRY.values()],
    bases=(_RunFields,), frozen=True, namespace={"__module__": __name__, "__doc__": """Everything that determines a
    meta-training run (with the seed, its numbers are reproducible).

    sampler_kind: the learned sampler meta-trained, a key of the learned-sampler registry (l2e.learned.REGISTRY:
    "l2e" the paper-form step, "kinetic" Kinetic-L2E, "mass" Mass-L2E, "meta_sgmcmc" Meta-SGMCMC, …). Each registry
    entry has one config group here, named by its `config_group` ("sampler" for "l2e", else the kind's name), holding
    its hyperparameters; only the group of `sampler_kind` is used, with the entry's sampling-window rule applied
    (`sampler_config`: e.g. Mass-L2E's freeze_step is the first update of the sampling window).
    hidden: the meta-model's hidden widths (of each head for a multi-head meta-model).
    meta_init: the start φ₀ (l2e.types.META_STARTS): "sghmc" — the meta-parameters at which the step is its
    hand-designed counterpart (exactly SGHMC for the correct samplers; for "l2e" the MLP fitted to α ≈ 0, β ≈ the
    normalised momentum), or "random" (haiku-style init of every layer, as the paper).
    init_from: a checkpoint (shipped name or directory, as l2e.load_sampler takes) of the same sampler kind and
    hidden widths whose meta-parameters start the run instead (fine-tuning); None: meta_init.
    objective: the meta-objective and its sampling window (ObjectiveConfig)."""})


def from_dict(d: dict) -> MetaTrainConfig:
    """Rebuild a config from `to_dict()` output (lists back to tuples)."""
    return dataclass_from_dict(MetaTrainConfig, d)


__all__ = ["ConfigError", "ESConfig", "ESTIMATORS", "META_INITS", "MetaTrainConfig", "OBJECTIVES", "ObjectiveConfig",
           "SAMPLER_KINDS", "apply_overrides", "from_dict"]
