"""Shared drivers of the minibatch methods: one chain, or K ensemble members, through `l2e.chains`.

Every chain (and every member) is `l2e.chains.make_chunk` + `jax.jit` + `l2e.chains.run_chain`: a Python loop
over a compiled chunk of a few unrolled updates (never a CNN gradient inside `lax.scan`; see l2e/chains.py).
Kernels have the chunk signature `kernel(key, state, minibatch, args) -> (state, info)` with the traced
hyperparameters in `args` (a dict), so a whole tuning grid compiles once per (task, method, schedule).

Besides the samples, each run reports the FLOPs of one update (evaluate.budget.step_flops, once per compiled
chunk) and, for kernels whose Info has `kinetic`, each chain's kinetic temperature (`kinetic_temperature`).
A probe run (Run.probe) only compiles, warms up and times the chunk (`_probe`) and returns `outputs.probe_result`.
The timed region of a run ("seconds") holds the chunk calls and the sample transfer; the per-step infos are
joined on the host after it (`_run_chain`, `_host_info`).

Devices: ensemble members run round robin on the local devices (`l2e.devices.member_device`), each the same
single-member program as on one device (identical numbers whatever the device count).
"""
from __future__ import annotations

import functools
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from evaluate.budget import step_flops
from evaluate.methods.batch import ChainBatch, batch_groups
from evaluate.methods.outputs import MethodResult, finalise, merge_chains, probe_result
from l2e import diagnostics
from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.devices import member_device
from l2e.types import tree_size

__all__ = ["PROBE_CALLS", "PROBE_REPEATS", "chain_keys", "chunk_fn", "kinetic_temperature", "lr_args", "run_members",
           "run_batched", "run_single_chain"]

PROBE_CALLS, PROBE_REPEATS, PROBE_SECONDS = 10, 3, 0.25
"""A probe run times PROBE_REPEATS runs of n chained chunk calls (after compilation and one warm-up call), n ≥
PROBE_CALLS and large enough for about PROBE_SECONDS per run (at most 20 × PROBE_CALLS)."""


def chain_keys(key) -> tuple[jax.Array, jax.Array]:
    """(init key, chain key): `key` itself when it is a pair, else split(key)."""
    if isinstance(key, (tuple, list)):
        return key[0], key[1]
    k1, k2 = jax.random.split(key)
    return k1, k2


def lr_args(hp: dict) -> dict:
    """{"lr": hp["learning_rate"] as a float32 scalar} (a traced chunk argument)."""
    return {"lr": jnp.asarray(hp["learning_rate"], jnp.float32)}


def chunk_fn(ctx, cache_key: tuple, make_kernel: Callable[[], Callable], schedule: ChainSchedule,
             batched: bool = False):
    """(key, the jitted chunk of `schedule.chunk_length` updates), cached per (cache_key, task, batch, length);
    batched: the chunk vmapped over a leading chain axis of the state and the key (data and args shared)."""
    key = ("chunk", cache_key, ctx.task.spec, schedule.batch_size, schedule.chunk_length) + (("batched",) * batched)

    def build():
        chunk = make_chunk(make_kernel(), ctx.task.sample_batch, schedule.batch_size, schedule.chunk_length)
        return jax.jit(jax.vmap(chunk, in_axes=(0, 0, None, None, None)) if batched else chunk)

    return key, ctx.cache.get(key, build)


def kinetic_temperature(info, schedule: ChainSchedule, num_params: int) -> float | None:
    """T_kin of one chain from its per-update Info (`l2e.diagnostics.kinetic_temperature`, window "kept":
    the updates from the first kept sample to the last; only the sampling-phase ones when the Info has
    `sampling`, cyclical SGHMC).

    Args:
      info: the chain's stacked Info, `kinetic` (num_steps,) when the kernel reports it.
      schedule: the chain's ChainSchedule; num_params: d.

    Returns:
      T_kin (float), or None if the Info has no `kinetic`, the window is empty or a value is not finite.
    """
    if not hasattr(info, "kinetic"):
        return None
    kinetic = np.asarray(info.kinetic, np.float64).reshape(-1)
    sampling = np.asarray(info.sampling, bool).reshape(-1) if hasattr(info, "sampling") else None
    t_kin = float(diagnostics.kinetic_temperature(kinetic, schedule, num_params, sampling))
    return None if np.isnan(t_kin) else t_kin


def _flops(ctx, ck, make_kernel, state, args, schedule: ChainSchedule) -> float | None:
    """FLOPs of one update (evaluate.budget.step_flops) on a minibatch of the task, once per chunk key."""
    def measure():
        batch = ctx.task.sample_batch(jax.random.PRNGKey(0), ctx.task.train_data, schedule.batch_size)
        return step_flops(make_kernel(), jax.random.PRNGKey(0), state, batch, args)

    return ctx.cache.get(("flops",) + ck, measure)


def _probe(ctx, fn, state, data, args, length: int, hp: dict, flops) -> MethodResult:
    """Seconds per update of the compiled chunk (already warmed up): the median over PROBE_REPEATS of the wall time
    of n chained, asynchronously dispatched calls (as in a chain; n from one timed call, see PROBE_CALLS) /
    (n × `length`)."""
    key = jax.random.PRNGKey(0)

    def timed(calls: int) -> float:
        s, t0 = state, time.perf_counter()
        for i in range(calls):
            s, _ = fn(s, key, jnp.asarray(i * length, jnp.int32), data, args)
        jax.block_until_ready(s)
        return time.perf_counter() - t0

    one = timed(1)
    calls = int(min(20 * PROBE_CALLS, max(PROBE_CALLS, np.ceil(PROBE_SECONDS / max(one, 1e-9)))))
    times = [timed(calls) for _ in range(PROBE_REPEATS)]
    return probe_result(hp, float(np.median(times)) / (calls * length), flops)


def _phase_chunks(ctx, cache_key: tuple, make_kernel, schedule: ChainSchedule, phase_of, state, data, args,
                  batched: bool = False):
    """chunk_at(start) -> the compiled chunk of the phase `phase_of(start, chunk_length)` (None: the general kernel,
    make_kernel(None)), each phase's chunk cached and warmed up before the chain (its compilation is not timed)."""
    length = schedule.chunk_length
    fns = {}
    for start in range(0, schedule.num_steps, length):
        phase = phase_of(start, length)
        if phase not in fns:
            ck, fns[phase] = chunk_fn(ctx, cache_key if phase is None else cache_key + (phase,),
                                      lambda p=phase: make_kernel(p), schedule, batched)
            chains = jax.tree.leaves(state)[0].shape[0] if batched else None
            ctx.cache.warm_up(ck, fns[phase], state, data, args, chains=chains)
    return lambda start: fns[phase_of(start, length)]


def _run_chain(fn, state, key, data, args, schedule: ChainSchedule, chunk_at=None) -> tuple:
    """(ChainResult without info, the chunks' infos): `l2e.chains.run_chain` with the per-chunk infos kept aside,
    so that joining them (`_host_info`, after the timed region) costs no compilation per chunk count inside it
    (jnp.concatenate of n arrays compiles once per n: 2.7 s for 2,346 chunks, measured on CPU)."""
    kept = []

    def keep(f):
        def chunk(*call):
            new, info = f(*call)
            kept.append(info)
            return new, ()

        return chunk

    at = None if chunk_at is None else (lambda start: keep(chunk_at(start)))
    return run_chain(keep(fn), state, key, data, args, schedule, chunk_at=at), kept


def _host_info(kept: list):
    """Every step's Info as numpy arrays, the chunks' infos joined on axis 0 on the host."""
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *kept)


def run_single_chain(ctx, key, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel, init_fn,
                     args, final_info: Callable | None = None, phase_of: Callable | None = None) -> MethodResult:
    """One chain of `schedule` from init_fn(task.init_params(init key)); `final_info(final_state) -> dict` adds
    entries to the hyperparameter record; `phase_of(start, length)`: a sampler with phase kernels
    (l2e.types.LearnedSampler.phase_of), each chunk compiled for its phase, make_kernel(phase) building them (the
    probe times the first chunk's).  seconds: the chain after compilation.

    key: (init key, chain key), a key, or a `ChainBatch` of M key pairs: then the M chains run as one vmapped
    program (`run_batched`) and the result is their pooled MethodResult."""
    if isinstance(key, ChainBatch):
        return run_batched(ctx, key, hp, schedule, cache_key, make_kernel, init_fn, args, final_info, phase_of)
    task = ctx.task
    init_key, key_chain = chain_keys(key)
    state = init_fn(task.init_params(init_key))
    chunk_at = None
    if phase_of is not None:
        chunk_at = _phase_chunks(ctx, cache_key, make_kernel, schedule, phase_of, state, task.train_data, args)
        make_kernel = functools.partial(make_kernel, None)
    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule)
    ctx.cache.warm_up(ck, fn, state, task.train_data, args)
    flops = _flops(ctx, ck, make_kernel, state, args, schedule)
    if ctx.probe:
        return _probe(ctx, fn if chunk_at is None else chunk_at(0), state, task.train_data, args,
                      schedule.chunk_length, hp, flops)
    t0 = time.perf_counter()
    chain, kept = _run_chain(fn, state, key_chain, task.train_data, args, schedule, chunk_at)
    jax.block_until_ready(chain.samples)
    seconds = time.perf_counter() - t0
    if final_info is not None:
        hp = {**hp, **final_info(chain.state)}
    info = _host_info(kept)
    t_kin = kinetic_temperature(info, schedule, tree_size(state.position))
    return finalise(ctx, chain.samples, [0] * schedule.num_samples, schedule.num_steps, seconds, hp,
                    t_kin=None if not hasattr(info, "kinetic") else [t_kin], flops_per_step=flops)


def run_members(ctx, key, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel,
                init_state: Callable, args) -> MethodResult:
    """K = cfg.num_samples members of `schedule` (member m: init fold_in(init key, m), chain fold_in(chain key, m),
    on member_device(m)); the last state of each member is one sample."""
    task, k = ctx.task, ctx.cfg.num_samples
    init_key, key_chain = chain_keys(key)

    def init(m):
        return init_state(task.init_params(jax.random.fold_in(init_key, m)))

    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule)
    for m in range(min(k, len(jax.local_devices()))):
        ctx.cache.warm_up(ck, fn, init(0), task.train_data, args, member_device(m))
    flops = _flops(ctx, ck, make_kernel, init(0), args, schedule)
    if ctx.probe:
        return _probe(ctx, fn, init(0), task.train_data, args, schedule.chunk_length, hp, flops)
    t0 = time.perf_counter()
    members, infos = [], []
    for m in range(k):  # dispatch is asynchronous, so members on different devices overlap
        dev = member_device(m)
        state, member_key, member_args = jax.device_put((init(m), jax.random.fold_in(key_chain, m), args), dev)
        chain, kept = _run_chain(fn, state, member_key, ctx.cache.data.put(task.train_data, dev), member_args,
                                 schedule)
        members.append(chain.samples)
        infos.append(kept)
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.concatenate([jax.device_put(x, home) for x in xs]), *members)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    d = tree_size(init(0).position)
    infos = [_host_info(kept) for kept in infos]
    t_kin = [kinetic_temperature(i, schedule, d) for i in infos] if hasattr(infos[0], "kinetic") else None
    return finalise(ctx, samples, list(range(k)), schedule.num_steps * k, seconds, hp, num_chains=k, t_kin=t_kin,
                    flops_per_step=flops)


def _slice(tree, c: int):
    return jax.tree.map(lambda x: x[c], tree)


def run_batched(ctx, keys: ChainBatch, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel, init_fn,
                args, final_info: Callable | None = None, phase_of: Callable | None = None) -> MethodResult:
    """The M chains of `keys`, each of `schedule`, as vmapped programs (module doc); their pooled MethodResult."""
    m = int(keys.init_keys.shape[0])
    states = [init_fn(ctx.task.init_params(keys.init_keys[c])) for c in range(m)]
    state_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(states[0]))
    groups = batch_groups(m, state_bytes)
    size = m // groups
    flat_make = make_kernel if phase_of is None else (lambda: make_kernel(None))
    ck, fn = chunk_fn(ctx, cache_key, flat_make, schedule, batched=True)
    stacked0 = jax.tree.map(lambda *xs: jnp.stack(xs), *states[:size])
    chunk_at = None
    if phase_of is not None:
        chunk_at = _phase_chunks(ctx, cache_key, make_kernel, schedule, phase_of, stacked0, ctx.task.train_data,
                                 args, batched=True)
    ctx.cache.warm_up(ck, fn, stacked0, ctx.task.train_data, args, chains=size)
    flops = _flops(ctx, chunk_fn(ctx, cache_key, flat_make, schedule)[0], flat_make, states[0], args, schedule)
    runs = []
    for g in range(groups):
        members = range(g * size, (g + 1) * size)
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *[states[c] for c in members])
        t0 = time.perf_counter()
        chain, kept = _run_chain(fn, state, keys.chain_keys[g * size:(g + 1) * size], ctx.task.train_data,
                                        args, schedule, chunk_at)
        jax.block_until_ready(chain.samples)
        seconds = (time.perf_counter() - t0) / size
        info = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1), *kept)
        for i in range(size):
            runs.append(_finalise_chain(ctx, chain, info, i, hp, schedule, seconds, flops, final_info))
    return merge_chains(runs)


def _finalise_chain(ctx, chain, info, i: int, hp: dict, schedule: ChainSchedule, seconds: float, flops,
                    final_info) -> MethodResult:
    """Chain i of a batch as the one-at-a-time path finalises it (run_single_chain)."""
    samples = jax.tree.map(lambda x: x[:, i], chain.samples)
    hp_i = dict(hp) if final_info is None else {**hp, **final_info(_slice(chain.state, i))}
    info_i = _slice(info, i)
    t_kin = kinetic_temperature(info_i, schedule, tree_size(_slice(chain.state, i).position))
    return finalise(ctx, samples, [0] * schedule.num_samples, schedule.num_steps, seconds, hp_i,
                    t_kin=None if not hasattr(info_i, "kinetic") else [t_kin], flops_per_step=flops)
