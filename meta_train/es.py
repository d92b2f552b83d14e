"""The antithetic-ES fitness of a population: every member's inner chain and its BMA meta-loss.

One outer iteration draws all its randomness from fold_in(seed key, iteration) (`outer_keys`):
  task ~ distribution;  θ₀ ~ task init;  (φ ± σz) ~ ES.ask (meta_train.outer);
  every member runs the same inner chain (same θ₀, minibatches and Langevin noise: common random
  numbers), keeping only the thinned samples;  fitness = BMA NLL of its samples on held-out
  outer-validation examples.

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
import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.devices import DeviceDataCache, member_device, per_member, population_mesh, replicate, shard_population
from l2e.l2e import L2EConfig, build_kernel, init as l2e_init
from tasks.base import TaskCache
from tasks.task import Task, TaskSpec, build_task


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
        """The task of `spec`, built once."""
        return build_task(spec, self.tasks)

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


def member_chunk(cache: ProgramCache, spec: TaskSpec, sampler: L2EConfig, schedule: ChainSchedule):
    """Jitted single-member chunk (state, key, start, data, meta_params) -> state; runs on its inputs' device."""

    def build():
        task = cache.task(spec)
        chunk = make_chunk(build_kernel(task.posterior, sampler), Task.sample_batch, schedule.batch_size,
                           schedule.chunk_length)
        return jax.jit(_states_only(chunk))

    return cache.program(("member_chunk", spec, sampler, schedule), build)


def population_chunk(cache: ProgramCache, spec: TaskSpec, sampler: L2EConfig, schedule: ChainSchedule,
                     mesh: Mesh):
    """Jitted chunk over the population -> (states, None): states and meta-params have the population on
    axis 0 (sharded over `mesh`); key, start and data are shared."""

    def build():
        task = cache.task(spec)
        chunk = make_chunk(build_kernel(task.posterior, sampler), Task.sample_batch, schedule.batch_size,
                           schedule.chunk_length)
        states = per_member(_states_only(chunk), mesh, (True, False, False, False, True))
        return lambda *args: (states(*args), None)

    return cache.program(("population_chunk", spec, sampler, schedule, mesh), build)


def bma_nll_fn(task: Task):
    """BMA NLL of samples (leaves (K, ...)) on x (B, ...), y (B,): −mean_b log mean_k p_k(y_b | x_b)."""

    def bma_nll(samples, x, y):
        logp = jax.vmap(lambda p: jax.nn.log_softmax(task.logits(p, x)))(samples)  # (K, B, C)
        ll = jnp.take_along_axis(logp, y[None, :, None], axis=2)[..., 0]  # (K, B)
        k = ll.shape[0]
        return -jnp.mean(jax.nn.logsumexp(ll, axis=0) - math.log(k))

    return bma_nll


def member_meta_loss(cache: ProgramCache, spec: TaskSpec):
    """Jitted BMA NLL of one member's samples (leaves (K, ...)) on (x, y)."""
    return cache.program(("member_meta_loss", spec), lambda: jax.jit(bma_nll_fn(cache.task(spec))))


def population_meta_loss(cache: ProgramCache, spec: TaskSpec, mesh: Mesh):
    """Jitted BMA NLL per member: samples leaves (P, K, ...), x (B, ...), y (B,) → (P,), replicated over
    `mesh` (so every host can read it)."""
    return cache.program(("population_meta_loss", spec, mesh), lambda: per_member(
        bma_nll_fn(cache.task(spec)), mesh, (True, False, False), out_replicated=True))


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


def _sequential_samples(cache, spec, population, keys, sampler, schedule, progress):
    """Each member's thinned samples (a list of position pytrees per member) and the member devices."""
    task = cache.task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    chunk = member_chunk(cache, spec, sampler, schedule)
    theta0 = task.init_params(keys.init)
    placed = [member_device(m) for m in range(p)]
    states = [jax.device_put(l2e_init(theta0), d) for d in placed]
    metas = [jax.device_put(jax.tree.map(lambda x, m=m: x[m], population), d) for m, d in enumerate(placed)]
    train = [cache.devices.put(task.train_data, d) for d in placed]
    chain_keys = [jax.device_put(keys.chain, d) for d in placed]
    length = schedule.chunk_length
    wanted = set(schedule.sample_steps)
    samples = [[] for _ in range(p)]
    for start in range(0, schedule.num_steps, length):
        for m in range(p):
            states[m] = chunk(states[m], chain_keys[m], jnp.asarray(start, jnp.int32), train[m], metas[m])
            if start + length in wanted:
                samples[m].append(states[m].position)
        if progress is not None:
            progress(length)
    return samples, placed


def _sequential_population(cache, spec, population, keys, sampler, schedule, meta_loss_examples, progress):
    """Members as ordinary single-chain programs, member m on local device m mod n_devices; their chunks are
    dispatched asynchronously (members interleaved), so devices run concurrently."""
    task = cache.task(spec)
    t0 = time.perf_counter()
    samples, placed = _sequential_samples(cache, spec, population, keys, sampler, schedule, progress)
    idx = _loss_indices(keys, task.splits.outer_valid[0].shape[0], meta_loss_examples)
    loss = member_meta_loss(cache, spec)
    fitness = []
    for member, device in zip(samples, placed):
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *member)
        xv, yv = cache.devices.put(task.splits.outer_valid, device)
        at = jax.device_put(idx, device)
        fitness.append(loss(stacked, jnp.take(xv, at, axis=0), jnp.take(yv, at, axis=0)))
    fitness = jnp.asarray(np.asarray([np.asarray(jax.block_until_ready(f)) for f in fitness], np.float32))
    return fitness, time.perf_counter() - t0


def _vmap_population(cache, spec, population, keys, sampler, schedule, meta_loss_examples, progress):
    """The population as one vmapped program per device of `population_mesh(P)`."""
    task = cache.task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    mesh = population_mesh(p)
    theta0 = task.init_params(keys.init)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), l2e_init(theta0))
    state, members = shard_population(state, mesh), shard_population(population, mesh)
    train_data, (x, y) = cache.replicated_data(spec, mesh)
    t0 = time.perf_counter()
    samples = run_chain(population_chunk(cache, spec, sampler, schedule, mesh), state,
                        replicate(keys.chain, mesh), train_data, members, schedule, progress=progress).samples
    samples = jax.tree.map(lambda s: jnp.swapaxes(s, 0, 1), samples)  # (P, K, ...)
    idx = _loss_indices(keys, x.shape[0], meta_loss_examples)
    batch = replicate((jnp.take(x, idx, axis=0), jnp.take(y, idx, axis=0)), mesh)
    fitness = jax.block_until_ready(population_meta_loss(cache, spec, mesh)(samples, *batch))
    if not fitness.is_fully_addressable:  # multi-host: every process holds a full replica
        fitness = fitness.addressable_data(0)
    return jnp.asarray(np.asarray(fitness)), time.perf_counter() - t0


def evaluate_population(spec: TaskSpec, population, keys: OuterKeys, sampler: L2EConfig,
                        schedule: ChainSchedule, meta_loss_examples: int, progress=None, execution: str = "vmap",
                        cache: ProgramCache | None = None) -> tuple[jax.Array, float]:
    """Fitness (P,) float32 (BMA NLL, nats) of a batch of meta-parameters (leaves (P, ...)) on one task, and
    the seconds spent in the inner loop.

    execution: "vmap", "sequential" or "auto" (see `execution_mode`); progress(n) is called after every chunk
    of n inner steps; cache: the run's ProgramCache (default: a new one, so every program is compiled anew).
    The fitness comes back as an array on the default device.
    """
    cache = ProgramCache() if cache is None else cache
    run = _sequential_population if execution_mode(execution) == "sequential" else _vmap_population
    return run(cache, spec, population, keys, sampler, schedule, meta_loss_examples, progress)
