"""The antithetic-ES fitness of a population: every member's inner chain and its BMA meta-loss.

One outer iteration draws all its randomness from fold_in(seed key, iteration) (`outer_keys`):
  task ~ distribution;  θ₀ ~ task init;  (φ ± σz) ~ ES.ask (meta_train.estimators.antithetic);
  every member runs the same inner chain (same θ₀, minibatches and Langevin noise: common random
  numbers), keeping only the thinned samples;  fitness = BMA NLL of its samples on held-out
  outer-validation examples (or another objective of meta_train.objectives.OBJECTIVES on them; "fidelity": the TV
  to a NUTS reference's predictive on the reference's test points, `reference_batch`).

Two executions (`execution_mode`), equal to float32 rounding (tests/test_meta_train.py):
  * "vmap": the population axis is sharded over a 1-D mesh ("pop") of the devices (l2e.devices.population_mesh):
    each device runs population/n members' chains as one vmapped program; data, keys and θ₀ are replicated;
    every member sees the same keys whatever the device count (vmap agrees across device counts to float32
    rounding, since a vmapped batch of 4 members and one member per device may round differently).
    The GPU/TPU and multi-host path: with `python -m meta_train --distributed`, jax.devices() is global.
  * "sequential": each member is an ordinary single-chain program on local device m mod n, dispatched
    asynchronously (bit-identical across device counts; on XLA:CPU a vmapped conv net becomes a slow grouped
    convolution, so this is the single-process CPU default).

Compiled programs and replicated data live in a `ProgramCache` that the caller creates and passes in.
"""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from l2e.chains import ChainSchedule, make_chunk, run_chain
from base.io import ConfigError
from l2e.devices import DeviceDataCache, member_device, per_member, population_mesh, replicate, shard_population
from l2e.learned import kind_of_config
from l2e.types import tree_size
from meta_train.objectives import OBJECTIVES, Outcome
from meta_train.objectives.settings import ObjectiveConfig
from meta_train.reference import load_task_reference
from tasks.base import TaskCache
from tasks.build import build
from tasks.task import Task, TaskSpec


class OuterKeys(NamedTuple):
    """The PRNG keys of one outer iteration."""

    task: jax.Array
    init: jax.Array
    chain: jax.Array
    perturb: jax.Array
    loss: jax.Array


def outer_keys(seed: int, iteration: int) -> OuterKeys:
    return OuterKeys(*jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), iteration), 5))


class ProgramCache:
    """What one meta-training run builds once: its tasks (`tasks`, a tasks.TaskCache), compiled inner-loop
    programs (keyed by what they are built from) and data copies, replicated over a mesh (the
    `max_replicated` most recently used) and per device (`devices`)."""

    def __init__(self, max_replicated: int = 8, tasks: TaskCache | None = None):
        self.tasks = TaskCache() if tasks is None else tasks
        self.devices = DeviceDataCache()
        self.max_replicated = max_replicated
        self._programs: dict[tuple, Callable] = {}
        self._replicated: collections.OrderedDict[tuple, Any] = collections.OrderedDict()

    def task(self, spec: TaskSpec) -> Task:
        """The task of `spec` (a TaskSpec or a RegressionSpec), built once."""
        return build(spec, self.tasks)

    def program(self, key: tuple, build: Callable[[], Callable]) -> Callable:
        """The program cached under `key`, built by `build()` on first use."""
        if key not in self._programs:
            self._programs[key] = build()
        return self._programs[key]

    def replicated_data(self, spec: TaskSpec, mesh: Mesh):
        """(train data, outer-validation (x, y)) of `spec`'s task, replicated over `mesh`."""
        key = (spec, mesh)
        if key in self._replicated:
            self._replicated.move_to_end(key)
        else:
            task = self.task(spec)
            self._replicated[key] = (replicate(task.train_data, mesh), replicate(task.splits.outer_valid, mesh))
            if len(self._replicated) > self.max_replicated:
                self._replicated.popitem(last=False)
        return self._replicated[key]


def _states_only(chunk):
    """chunk(...) -> state from a chunk returning (state, infos): the infos are not needed for the fitness."""
    return lambda *args: chunk(*args)[0]


def sampler_module(sampler):
    """The learned-sampler registry entry (l2e.types.LearnedSampler: its `init(position)` and
    `build_kernel(posterior, config)`) of the sampler a config configures (looked up at call time, so tests can
    substitute it)."""
    return kind_of_config(sampler)


def _chunk_outputs(chunk, kinetic: bool):
    """chunk(...) -> (state, infos) as (state, per-step Σ r·∇_rK (length,)) when `kinetic`, else (state, None)."""
    if kinetic:
        return lambda *args: (lambda state, infos: (state, infos.kinetic))(*chunk(*args))
    return lambda *args: (chunk(*args)[0], None)


def _make_chunk(cache: ProgramCache, spec: TaskSpec, sampler, schedule: ChainSchedule, phase: str | None = None):
    kernel = sampler_module(sampler).kernel(cache.task(spec).posterior, sampler, phase)
    return make_chunk(kernel, Task.sample_batch, schedule.batch_size, schedule.chunk_length)


def chunk_phase(sampler, schedule: ChainSchedule, start: int) -> str | None:
    """The phase kernel the chunk starting at update `start` runs with (LearnedSampler.phase_of; None: the general
    kernel, and always for a sampler without phase kernels). Under vmap a branch on the per-member step runs both
    sides, so the phase kernels matter most there."""
    phase_of = sampler_module(sampler).phase_of
    return None if phase_of is None else phase_of(sampler, start, schedule.chunk_length)


def member_chunk(cache: ProgramCache, spec: TaskSpec, sampler, schedule: ChainSchedule,
                 kinetic: bool = False, phase: str | None = None):
    """Jitted single-member chunk (state, key, start, data, meta_params) -> (state, per-step kinetic or None) of
    the sampler's `phase` kernel (`chunk_phase`); runs on its inputs' device."""
    build = lambda: jax.jit(_chunk_outputs(_make_chunk(cache, spec, sampler, schedule, phase), kinetic))  # noqa: E731
    return cache.program(("member_chunk", spec, sampler, schedule, kinetic, phase), build)


def population_chunk(cache: ProgramCache, spec: TaskSpec, sampler,
                     schedule: ChainSchedule, mesh: Mesh, kinetic: bool = False, phase: str | None = None):
    """Jitted chunk over the population -> (states, per-step kinetic (P, length) or None) of the sampler's `phase`
    kernel: states and meta-params have the population on axis 0 (sharded over `mesh`); key, start and data are
    shared."""

    def build():
        chunk = _make_chunk(cache, spec, sampler, schedule, phase)
        if kinetic:
            return per_member(_chunk_outputs(chunk, True), mesh, (True, False, False, False, True))
        states = per_member(_states_only(chunk), mesh, (True, False, False, False, True))
        return lambda *args: (states(*args), None)

    return cache.program(("population_chunk", spec, sampler, schedule, mesh, kinetic, phase), build)


def reference_batch(cache: ProgramCache, spec, objective):
    """The meta-loss batch of a reference objective (meta_train.objectives.Objective.reference) on `spec`'s task:
    (test inputs (n_test, ...), the objective's reference target — for "fidelity" the reference BMA probabilities
    (n_test, C) float32, or a ReferenceTarget with its dispersion weight) from the reference directory
    objective.reference (meta_train.reference), loaded and checked once per cache. objective: the ObjectiveConfig.
    ConfigError (meta_train.reference.ReferenceError) if the task has no fitting reference."""
    if objective.reference is None:
        raise ConfigError(f"objective.kind {objective.kind} needs objective.reference (a directory of NUTS "
                          "references, e.g. results/references)")
    entry = OBJECTIVES[objective.kind]

    def build():
        task = cache.task(spec)
        ref = load_task_reference(objective.reference, task, draws=entry.draws(objective))
        return task.splits.test[0], entry.target(task, ref, objective)

    return cache.program(("reference_batch", spec, objective), build)


def _outcome_loss(cache: ProgramCache, spec, objective, budget: int, temperature: float):
    """The objective's loss of one chain as (samples, x, y or the reference target) -> scalar (the Outcome built
    from them; meta_train.objectives.protocol)."""
    entry = OBJECTIVES[objective.kind]
    loss = entry.loss_fn(cache.task(spec), objective)
    if entry.reference:
        return lambda samples, x, ref: loss(Outcome(samples, x, None, ref, budget=budget, temperature=temperature))
    return lambda samples, x, y: loss(Outcome(samples, x, y, budget=budget, temperature=temperature))


def member_meta_loss(cache: ProgramCache, spec: TaskSpec, objective, budget: int = 0, temperature: float = 1.0):
    """Jitted meta-loss (the objective of the ObjectiveConfig `objective`) of one member's samples (leaves (K, ...))
    on (x, y) (a reference objective: (x, reference target)), for a chain of `budget` updates at `temperature`."""
    return cache.program(("member_meta_loss", spec, objective, budget, temperature),
                         lambda: jax.jit(_outcome_loss(cache, spec, objective, budget, temperature)))


def population_meta_loss(cache: ProgramCache, spec: TaskSpec, mesh: Mesh, objective, budget: int = 0,
                         temperature: float = 1.0):
    """Jitted meta-loss per member: samples leaves (P, K, ...), x (B, ...), y (B,) → (P,), replicated over
    `mesh` (so every host can read it)."""
    return cache.program(("population_meta_loss", spec, mesh, objective, budget, temperature), lambda: per_member(
        _outcome_loss(cache, spec, objective, budget, temperature), mesh, (True, False, False), out_replicated=True))


def execution_mode(es_or_mode) -> str:
    """"vmap" or "sequential" for an ESConfig (or its `execution` string); "auto" → sequential on a
    single-process CPU backend, vmap otherwise."""
    mode = getattr(es_or_mode, "execution", es_or_mode)
    if mode == "auto":
        return "sequential" if jax.default_backend() == "cpu" and jax.process_count() == 1 else "vmap"
    return mode


def _loss_indices(keys: OuterKeys, n: int, meta_loss_examples: int) -> jax.Array:
    """Indices of the outer-validation examples the meta-loss is taken on (the same for every member)."""
    return jax.random.choice(keys.loss, n, (min(meta_loss_examples, n),), replace=False)


class Inner(NamedTuple):
    """What every member's inner chain and meta-loss are built from (besides the task and the keys)."""

    sampler: Any  # L2EConfig | KineticConfig
    schedule: ChainSchedule
    meta_loss_examples: int
    objective: Any  # the ObjectiveConfig

    @property
    def log_temperature(self) -> bool:
        return self.objective.log_temperature

    def loss_args(self) -> tuple:
        """(objective, budget, temperature) of the meta-loss programs."""
        return self.objective, self.schedule.num_steps, float(getattr(self.sampler, "temperature", 1.0))


class PopulationFitness(NamedTuple):
    """fitness: (P,) float32 meta-losses (nats); inner_seconds: wall time of the inner loop and the meta-loss;
    t_kin: (P,) kinetic temperatures ⟨Σ r·∇_rK⟩/d over the sampling window, or None (not logged)."""

    fitness: jax.Array
    inner_seconds: float
    t_kin: np.ndarray | None = None


def kinetic_temperature(kinetic: np.ndarray, schedule: ChainSchedule, dim: int) -> np.ndarray:
    """T_kin per member from per-step kinetic sums (..., num_steps): their mean over the sampling window (the last
    num_samples·thinning updates) ÷ d."""
    window = np.asarray(kinetic, np.float64)[..., schedule.num_steps - schedule.num_samples * schedule.thinning:]
    return window.mean(axis=-1) / dim


def _sequential_samples(cache, spec, population, keys, inner: Inner, progress):
    """Each member's thinned samples (a list of position pytrees per member), the member devices and the
    per-step kinetic sums ((P, num_steps) or None)."""
    task, schedule = cache.task(spec), inner.schedule
    p = jax.tree.leaves(population)[0].shape[0]
    def chunk(start):
        phase = chunk_phase(inner.sampler, schedule, start)
        return member_chunk(cache, spec, inner.sampler, schedule, inner.log_temperature, phase)

    theta0 = task.init_params(keys.init)
    placed = [member_device(m) for m in range(p)]
    states = [jax.device_put(sampler_module(inner.sampler).init(theta0), d) for d in placed]
    metas = [jax.device_put(jax.tree.map(lambda x, m=m: x[m], population), d) for m, d in enumerate(placed)]
    train = [cache.devices.put(task.train_data, d) for d in placed]
    chain_keys = [jax.device_put(keys.chain, d) for d in placed]
    length = schedule.chunk_length
    wanted = set(schedule.sample_steps)
    samples, kinetic = [[] for _ in range(p)], [[] for _ in range(p)]
    for start in range(0, schedule.num_steps, length):
        fn = chunk(start)  # one program lookup per chunk, not per member
        for m in range(p):
            states[m], kin = fn(states[m], chain_keys[m], jnp.asarray(start, jnp.int32), train[m], metas[m])
            kinetic[m].append(kin)
            if start + length in wanted:
                samples[m].append(states[m].position)
        if progress is not None:
            progress(length)
    kin = np.stack([np.concatenate([np.asarray(k) for k in ks]) for ks in kinetic]) if inner.log_temperature else None
    return samples, placed, kin


def _sequential_population(cache, spec, population, keys, inner: Inner, progress) -> PopulationFitness:
    """Members as ordinary single-chain programs, member m on local device m mod n_devices; their chunks are
    dispatched asynchronously (members interleaved), so devices run concurrently."""
    task = cache.task(spec)
    t0 = time.perf_counter()
    samples, placed, kin = _sequential_samples(cache, spec, population, keys, inner, progress)
    idx = _loss_indices(keys, task.splits.outer_valid[0].shape[0], inner.meta_loss_examples)
    loss = member_meta_loss(cache, spec, *inner.loss_args())
    fitness = []
    for member, device in zip(samples, placed):
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *member)
        if OBJECTIVES[inner.objective.kind].reference:  # the reference's test points, all of them
            batch = reference_batch(cache, spec, inner.objective)
            fitness.append(loss(stacked, *cache.devices.put(batch, device)))
            continue
        xv, yv = cache.devices.put(task.splits.outer_valid, device)
        at = jax.device_put(idx, device)
        fitness.append(loss(stacked, jnp.take(xv, at, axis=0), jnp.take(yv, at, axis=0)))
    fitness = jnp.asarray(np.asarray([np.asarray(jax.block_until_ready(f)) for f in fitness], np.float32))
    t_kin = None if kin is None else kinetic_temperature(kin, inner.schedule, tree_size(samples[0][0]))
    return PopulationFitness(fitness, time.perf_counter() - t0, t_kin)


def _vmap_population(cache, spec, population, keys, inner: Inner, progress) -> PopulationFitness:
    """The population as one vmapped program per device of `population_mesh(P)`."""
    task = cache.task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    mesh = population_mesh(p)
    theta0 = task.init_params(keys.init)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), sampler_module(inner.sampler).init(theta0))
    state, members = shard_population(state, mesh), shard_population(population, mesh)
    train_data, (x, y) = cache.replicated_data(spec, mesh)
    t0 = time.perf_counter()
    def chunk(start):
        phase = chunk_phase(inner.sampler, inner.schedule, start)
        return population_chunk(cache, spec, inner.sampler, inner.schedule, mesh, inner.log_temperature, phase)

    result = run_chain(chunk(0), state, replicate(keys.chain, mesh), train_data, members, inner.schedule,
                       progress=progress, info_axis=1, chunk_at=chunk)
    samples = jax.tree.map(lambda s: jnp.swapaxes(s, 0, 1), result.samples)  # (P, K, ...)
    if OBJECTIVES[inner.objective.kind].reference:  # the reference's test points, all of them
        batch = replicate(reference_batch(cache, spec, inner.objective), mesh)
    else:
        idx = _loss_indices(keys, x.shape[0], inner.meta_loss_examples)
        batch = replicate((jnp.take(x, idx, axis=0), jnp.take(y, idx, axis=0)), mesh)
    fitness = jax.block_until_ready(population_meta_loss(cache, spec, mesh, *inner.loss_args())(samples, *batch))
    if not fitness.is_fully_addressable:  # multi-host: every process holds a full replica
        fitness = fitness.addressable_data(0)
    t_kin = None
    if inner.log_temperature:
        kin = result.info  # a host array, or a device array (multi-host: one addressable replica)
        if not getattr(kin, "is_fully_addressable", True):
            kin = kin.addressable_data(0)
        t_kin = kinetic_temperature(np.asarray(kin), inner.schedule, tree_size(theta0))
    return PopulationFitness(jnp.asarray(np.asarray(fitness)), time.perf_counter() - t0, t_kin)


def evaluate_population(spec: TaskSpec, population, keys: OuterKeys, sampler,
                        schedule: ChainSchedule, meta_loss_examples: int, progress=None, execution: str = "vmap",
                        cache: ProgramCache | None = None, objective="bma",
                        log_temperature: bool = False, reference: str | None = None,
                        dispersion_weight: float = 0.0) -> PopulationFitness:
    """PopulationFitness(fitness (P,) float32 in nats, inner-loop seconds, T_kin (P,) or None) of a batch of
    meta-parameters (leaves (P, ...)) on one task, at one chain length; unpacks as (fitness, seconds, t_kin). The
    fitness is the objective's traced `loss` only; its host-side penalty and the mean over budgets are the shared
    meta-loss's (meta_train.meta_loss).

    sampler: the learned sampler's config (its type picks the sampler: `sampler_module`); objective: the
    ObjectiveConfig (its kind, settings, log_temperature and reference are used, the keyword arguments below not),
    or a key of meta_train.objectives.OBJECTIVES that is not gradient-only ("bma", "ce", "ksd", "fidelity"), whose
    settings are then log_temperature (also return each member's T_kin over the sampling window), reference (the
    reference directory of a reference objective, whose test points and reference target are then the meta-loss
    batch; meta_loss_examples unused) and dispersion_weight ("fidelity"'s dispersion penalty weight);
    execution: "vmap", "sequential" or "auto" (see `execution_mode`); progress(n) is called after every chunk
    of n inner steps; cache: the run's ProgramCache (default: a new one, so every program is compiled anew).
    The fitness comes back as an array on the default device.
    """
    if isinstance(objective, str):
        objective = ObjectiveConfig(kind=objective, log_temperature=log_temperature, reference=reference,
                                    dispersion_weight=dispersion_weight)
    cache = ProgramCache() if cache is None else cache
    run = _sequential_population if execution_mode(execution) == "sequential" else _vmap_population
    return run(cache, spec, population, keys, Inner(sampler, schedule, meta_loss_examples, objective), progress)
