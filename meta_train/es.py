"""The ES outer step: antithetic OpenAI-ES (evosax Open_ES) on the BMA meta-loss.

One outer iteration (all randomness from fold_in(seed key, iteration)):
  task ~ distribution;  θ₀ ~ task init;  (φ ± σz) ~ ES.ask;
  every member runs the same inner chain (same θ₀, minibatches and Langevin noise: common random
  numbers), keeping only the thinned samples;  fitness = BMA NLL of its samples on held-out
  outer-validation examples;  ES.tell with identity fitness shaping → ĝ = z(L⁺ − L⁻)/(2σ), optax update.

Scale-out: the population axis is sharded over a 1-D mesh ("pop") of the devices (`population_mesh`): each
device runs population/n members' chains; data, keys and θ₀ are replicated; every member sees the same
keys whatever the device count. Measured on XLA:CPU with 1 vs 4 forced host devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4, tests/test_paper_scale.py): the sequential execution
(CPU default) gives bit-identical meta-parameters; vmap/shard_map agrees to float32 rounding (6e-7 after two
smoke iterations), since a vmapped batch of 4 members and one member per device may round differently.
Multi-host: `python -m meta_train --distributed ...` on every host calls meta_train.distributed before any
computation (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID where JAX cannot auto-detect the
cluster); jax.devices() is then global and only process 0 writes the run directory (meta_train.train).
"""
from __future__ import annotations

import functools
import math
import os
import time
from typing import NamedTuple

from evosax.algorithms import Open_ES
import jax
import jax.numpy as jnp
import optax
from evosax.core.fitness_shaping import identity_fitness_shaping_fn
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from l2e.chains import ChainSchedule, make_chunk, member_device, on_device, run_chain
from l2e.l2e import L2EConfig, build_kernel, init as l2e_init
from meta_train.config import ESConfig
from tasks.task import Task, TaskSpec, build_task


@functools.lru_cache(maxsize=None)
def population_mesh(population: int) -> Mesh:
    """A 1-D Mesh ("pop",) over the largest number of devices (≤ all of them) that divides `population`
    (all devices when population is a multiple of the device count). $L2E_NO_SHARDING=1: one device.

    Multi-host: the mesh takes the same number of devices from every process (so every process holds a
    share of the population and a replica of the fitness); the population must be a multiple of the number
    of processes."""
    devices = jax.devices()
    if os.environ.get("L2E_NO_SHARDING", "").lower() in ("1", "true", "yes") and jax.process_count() == 1:
        devices = devices[:1]
    procs = jax.process_count()
    if procs == 1:
        n = max(d for d in range(1, min(population, len(devices)) + 1) if population % d == 0)
        return Mesh(np.array(devices[:n]), ("pop",))
    if population % procs:
        raise ValueError(f"es.population ({population}) must be a multiple of the number of processes ({procs})")
    by_proc = [[d for d in devices if d.process_index == p] for p in range(procs)]
    per = max(d for d in range(1, min(len(ds) for ds in by_proc) + 1) if (population // procs) % d == 0)
    return Mesh(np.array([d for ds in by_proc for d in ds[:per]]), ("pop",))


def _put(tree, sharding: NamedSharding):
    """Place `tree` with `sharding`; multi-host safe (every process holds the same host values)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx], dtype=host.dtype)

    return jax.tree.map(one, tree)


def shard_population(tree, mesh: Mesh):
    """Shard axis 0 of every leaf over mesh axis "pop"."""
    return _put(tree, NamedSharding(mesh, PartitionSpec("pop")))


def replicate(tree, mesh: Mesh):
    """Replicate every leaf on all devices of `mesh`."""
    return _put(tree, NamedSharding(mesh, PartitionSpec()))


def per_member(fn, mesh: Mesh, member_args: tuple[bool, ...], out_replicated: bool = False):
    """jit(shard_map) of `fn` over the population: arguments flagged in `member_args` have the population on
    axis 0 (sharded over "pop"), the others are shared (replicated). Each device runs `fn` vmapped over its
    local members. (A per-member Python loop instead of vmap was tried: it was ~2× slower on one CPU device;
    on CPU the default execution is `_sequential_population` anyway.)
    """
    pop, rep = PartitionSpec("pop"), PartitionSpec()

    local = jax.vmap(fn, in_axes=tuple(0 if b else None for b in member_args))
    if mesh.size == 1:  # plain vmap: shard_map over one device measured ~15 % slower on XLA:CPU
        return jax.jit(local)

    mapped = jax.shard_map(local, mesh=mesh, in_specs=tuple(pop if b else rep for b in member_args),
                           out_specs=pop)
    if not out_replicated:
        return jax.jit(mapped)
    return jax.jit(mapped, out_shardings=NamedSharding(mesh, rep))


def outer_optimizer(es: ESConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(es.clip_norm), optax.adam(es.lr, b1=0.9, b2=0.999, eps=1e-8))


def make_strategy(es: ESConfig, meta_params) -> Open_ES:
    """Open_ES, antithetic, identity fitness shaping (centred ranks would make a pair a sign estimator)."""
    return Open_ES(
        population_size=es.population,
        solution=meta_params,
        use_antithetic_sampling=True,
        optimizer=outer_optimizer(es),
        std_schedule=optax.constant_schedule(es.sigma),
        fitness_shaping_fn=identity_fitness_shaping_fn,
    )


@functools.lru_cache(maxsize=None)
def population_chunk(spec: TaskSpec, sampler: L2EConfig, schedule: ChainSchedule, mesh: Mesh | None = None):
    """Jitted chunk over the population: states and meta-params have the population on axis 0 (sharded over
    `mesh`, default: population_mesh of one device), key, start and data are shared."""
    task = build_task(spec)
    kernel = build_kernel(task.posterior, sampler)
    chunk = make_chunk(kernel, Task.sample_batch, schedule.batch_size, schedule.chunk_length)
    mesh = mesh if mesh is not None else Mesh(np.array(jax.devices()[:1]), ("pop",))
    return per_member(chunk, mesh, (True, False, False, False, True))


def bma_nll_fn(task: Task):
    """BMA NLL of samples (leaves (K, ...)) on x (B, ...), y (B,): −mean_b log mean_k p_k(y_b | x_b)."""

    def bma_nll(samples, x, y):
        logp = jax.vmap(lambda p: jax.nn.log_softmax(task.logits(p, x)))(samples)  # (K, B, C)
        ll = jnp.take_along_axis(logp, y[None, :, None], axis=2)[..., 0]  # (K, B)
        k = ll.shape[0]
        return -jnp.mean(jax.nn.logsumexp(ll, axis=0) - math.log(k))

    return bma_nll


@functools.lru_cache(maxsize=None)
def population_meta_loss(spec: TaskSpec, mesh: Mesh | None = None):
    """Jitted BMA NLL per member: samples leaves (P, K, ...), x (B, ...), y (B,) → (P,), replicated over
    `mesh` (so every host can read it)."""
    mesh = mesh if mesh is not None else Mesh(np.array(jax.devices()[:1]), ("pop",))
    return per_member(bma_nll_fn(build_task(spec)), mesh, (True, False, False), out_replicated=True)


@functools.lru_cache(maxsize=8)
def _replicated_data(spec: TaskSpec, mesh: Mesh):
    task = build_task(spec)
    return replicate(task.train_data, mesh), replicate(task.splits.outer_valid, mesh)


class OuterKeys(NamedTuple):
    task: jax.Array
    init: jax.Array
    chain: jax.Array
    perturb: jax.Array
    loss: jax.Array


def outer_keys(seed: int, iteration: int) -> OuterKeys:
    return OuterKeys(*jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), iteration), 5))


def execution_mode(es_or_mode) -> str:
    """"vmap" or "sequential" for an ESConfig (or its `execution` string); "auto" → sequential on a
    single-process CPU backend, vmap otherwise."""
    mode = getattr(es_or_mode, "execution", es_or_mode)
    if mode == "auto":
        return "sequential" if jax.default_backend() == "cpu" and jax.process_count() == 1 else "vmap"
    return mode


@functools.lru_cache(maxsize=None)
def member_chunk(spec: TaskSpec, sampler: L2EConfig, schedule: ChainSchedule):
    """Jitted single-member chunk (state, key, start, data, meta_params) -> state; runs on its inputs' device."""
    task = build_task(spec)
    return jax.jit(make_chunk(build_kernel(task.posterior, sampler), Task.sample_batch, schedule.batch_size,
                              schedule.chunk_length))


@functools.lru_cache(maxsize=None)
def member_meta_loss(spec: TaskSpec):
    """Jitted BMA NLL of one member's samples (leaves (K, ...)) on (x, y)."""
    return jax.jit(bma_nll_fn(build_task(spec)))


def _sequential_population(spec, population, keys, sampler, schedule, meta_loss_examples, progress):
    """Members as ordinary single-chain programs, member m on local device m mod n_devices.

    Every member's chunks are dispatched asynchronously (a Python loop over chunks, members interleaved), so
    devices run concurrently; the computation of a member does not depend on the device count."""
    task = build_task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    chunk = member_chunk(spec, sampler, schedule)
    theta0 = task.init_params(keys.init)
    placed = [member_device(m) for m in range(p)]
    states = [jax.device_put(l2e_init(theta0), d) for d in placed]
    metas = [jax.device_put(jax.tree.map(lambda x, m=m: x[m], population), d) for m, d in enumerate(placed)]
    data = [(on_device(task.train_data, d), on_device(task.splits.outer_valid, d)) for d in placed]
    chain_keys = [jax.device_put(keys.chain, d) for d in placed]
    length = schedule.chunk_length
    wanted = set(schedule.sample_steps)
    samples = [[] for _ in range(p)]
    t0 = time.perf_counter()
    for start in range(0, schedule.num_steps, length):
        for m in range(p):
            states[m] = chunk(states[m], chain_keys[m], jnp.asarray(start, jnp.int32), data[m][0], metas[m])
            if start + length in wanted:
                samples[m].append(states[m].position)
        if progress is not None:
            progress(length)
    x, y = task.splits.outer_valid
    n = x.shape[0]
    idx = jax.random.choice(keys.loss, n, (min(meta_loss_examples, n),), replace=False)
    loss = member_meta_loss(spec)
    fitness = []
    for m in range(p):
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *samples[m])
        xv, yv = data[m][1]
        fitness.append(loss(stacked, jnp.take(xv, jax.device_put(idx, placed[m]), axis=0),
                            jnp.take(yv, jax.device_put(idx, placed[m]), axis=0)))
    fitness = jnp.asarray(np.asarray([np.asarray(jax.block_until_ready(f)) for f in fitness], np.float32))
    return fitness, time.perf_counter() - t0


def evaluate_population(spec: TaskSpec, population, keys: OuterKeys, sampler: L2EConfig,
                        schedule: ChainSchedule, meta_loss_examples: int, progress=None, execution: str = "vmap"):
    """Fitness (P,) of a batch of meta-parameters on one task, and seconds spent in the inner loop.

    execution "vmap": the population axis is sharded over `population_mesh(P)` (see the module docstring);
    "sequential" (or "auto", see `execution_mode`): `_sequential_population`.  The fitness comes back as an
    array on the default device.
    """
    if execution_mode(execution) == "sequential":
        return _sequential_population(spec, population, keys, sampler, schedule, meta_loss_examples, progress)
    task = build_task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    mesh = population_mesh(p)
    theta0 = task.init_params(keys.init)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), l2e_init(theta0))
    state, members = shard_population(state, mesh), shard_population(population, mesh)
    train_data, (x, y) = _replicated_data(spec, mesh)
    t0 = time.perf_counter()
    _, samples = run_chain(population_chunk(spec, sampler, schedule, mesh), state, replicate(keys.chain, mesh),
                           train_data, members, schedule, progress=progress)
    samples = jax.tree.map(lambda s: jnp.swapaxes(s, 0, 1), samples)  # (P, K, ...)
    n = x.shape[0]
    idx = jax.random.choice(keys.loss, n, (min(meta_loss_examples, n),), replace=False)
    batch = replicate((jnp.take(x, idx, axis=0), jnp.take(y, idx, axis=0)), mesh)
    fitness = population_meta_loss(spec, mesh)(samples, *batch)
    fitness = jax.block_until_ready(fitness)
    if not fitness.is_fully_addressable:  # multi-host: every process holds a full replica
        fitness = fitness.addressable_data(0)
    fitness = jnp.asarray(np.asarray(fitness))
    return fitness, time.perf_counter() - t0
