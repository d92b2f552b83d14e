"""The one-at-a-time drivers of the minibatch methods: one chain, or K ensemble members (their batched forms:
evaluate.methods.batched; the shared pieces: evaluate.methods.chunks).

Besides the samples, each run reports the FLOPs of one update (evaluate.budget.step_flops, once per compiled
chunk) and, for kernels whose Info has `kinetic`, each chain's kinetic temperature (`kinetic_temperature`).
A probe run (Run.probe) only compiles, warms up and times the chunk (`chunks.probe`) and returns
`outputs.probe_result`. The timed region of a run ("seconds") holds the chunk calls and the sample transfer; the
per-step infos are joined on the host after it (`chunks.run_chunks`, `chunks.host_info`).

Devices: ensemble members run round robin on the local devices (`l2e.devices.member_device`), each the same
single-member program as on one device (identical numbers whatever the device count); batched, a batch's chains are
sharded over them (evaluate.methods.batched).
"""
from __future__ import annotations

import functools
import time
from typing import Callable

import jax
import jax.numpy as jnp

from evaluate.methods.batch import ChainBatch, chain_batch, use_batches
from evaluate.methods.batched import ChainCall, Deferred, members_batched, run_batched
from evaluate.methods.chunks import (PROBE_CALLS, PROBE_REPEATS, chain_keys, chunk_fn, flops_of_chunk, host_info,
                                     kinetic_temperature, lr_args, phase_chunks, probe, run_chunks)
from evaluate.methods.outputs import MethodResult, finalise
from l2e.chains import ChainSchedule
from l2e.devices import member_device
from l2e.types import tree_size

__all__ = ["PROBE_CALLS", "PROBE_REPEATS", "chain_keys", "chunk_fn", "kinetic_temperature", "lr_args", "run_members",
           "run_single_chain"]

def run_single_chain(ctx, key, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel, init_fn,
                     args, final_info: Callable | None = None, phase_of: Callable | None = None,
                     start: Callable | None = None, grad_evals: int | None = None) -> MethodResult:
    """One chain of `schedule` from init_fn(task.init_params(init key)); `final_info(final_state) -> dict` adds
    entries to the hyperparameter record; `phase_of(start, length)`: a sampler with phase kernels
    (l2e.types.LearnedSampler.phase_of), each chunk compiled for its phase, make_kernel(phase) building them (the
    probe times the first chunk's).  seconds: the chain after compilation; grad_evals: the gradients the chain
    spends (None: one per update).

    key: (init key, chain key), a key, or a `ChainBatch` of M key pairs: then the M chains run as one vmapped
    program (`run_batched`) and the result is their pooled MethodResult. start: the batched paths' start of the
    chains after init_fn (batched.ChainCall.start); only with a ChainBatch or Deferred key."""
    if isinstance(key, Deferred):  # registry.run_many: recorded, run with the other jobs' chains
        key.calls.append(ChainCall(key.keys, hp, schedule, cache_key, make_kernel, init_fn, args, final_info,
                                   phase_of, start, grad_evals))
        return None
    if isinstance(key, ChainBatch):
        return run_batched(ctx, key, hp, schedule, cache_key, make_kernel, init_fn, args, final_info, phase_of,
                           start, grad_evals)
    if start is not None:
        raise ValueError("run_single_chain: start runs on a batch of chains (a ChainBatch or Deferred key)")
    task = ctx.task
    init_key, key_chain = chain_keys(key)
    state = init_fn(task.init_params(init_key))
    chunk_at = None
    if phase_of is not None:
        chunk_at = phase_chunks(ctx, cache_key, make_kernel, schedule, phase_of, state, task.train_data, args)
        make_kernel = functools.partial(make_kernel, None)
    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule)
    ctx.cache.warm_up(ck, fn, state, task.train_data, args)
    flops = flops_of_chunk(ctx, cache_key, make_kernel, state, args, schedule)
    if ctx.probe:
        return probe(ctx, fn if chunk_at is None else chunk_at(0), state, task.train_data, args,
                      schedule.chunk_length, hp, flops)
    t0 = time.perf_counter()
    chain, kept = run_chunks(fn, state, key_chain, task.train_data, args, schedule, chunk_at)
    jax.block_until_ready(chain.samples)
    seconds = time.perf_counter() - t0
    if final_info is not None:
        hp = {**hp, **final_info(chain.state)}
    info = host_info(kept)
    t_kin = kinetic_temperature(info, schedule, tree_size(state.position))
    return finalise(ctx, chain.samples, [0] * schedule.num_samples,
                    schedule.num_steps if grad_evals is None else grad_evals, seconds, hp,
                    t_kin=None if not hasattr(info, "kinetic") else [t_kin], flops_per_step=flops)


def run_members(ctx, key, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel,
                init_state: Callable, args) -> MethodResult:
    """K = cfg.num_samples members of `schedule` (member m: init fold_in(init key, m), chain fold_in(chain key, m),
    on member_device(m)); the last state of each member is one sample."""
    task, k = ctx.task, ctx.cfg.num_samples
    init_key, key_chain = chain_keys(key)

    def init(m):
        return init_state(task.init_params(jax.random.fold_in(init_key, m)))

    if k > 1 and not ctx.probe and use_batches(ctx.cfg, task):
        return members_batched(ctx, chain_batch(init_key, key_chain, k), hp, schedule, cache_key, make_kernel,
                                init_state, args)
    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule)
    for m in range(min(k, len(jax.local_devices()))):
        ctx.cache.warm_up(ck, fn, init(0), task.train_data, args, member_device(m))
    flops = flops_of_chunk(ctx, cache_key, make_kernel, init(0), args, schedule)
    if ctx.probe:
        return probe(ctx, fn, init(0), task.train_data, args, schedule.chunk_length, hp, flops)
    t0 = time.perf_counter()
    members, infos = [], []
    for m in range(k):  # dispatch is asynchronous, so members on different devices overlap
        dev = member_device(m)
        state, member_key, member_args = jax.device_put((init(m), jax.random.fold_in(key_chain, m), args), dev)
        chain, kept = run_chunks(fn, state, member_key, ctx.cache.data.put(task.train_data, dev), member_args,
                                 schedule)
        members.append(chain.samples)
        infos.append(kept)
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.concatenate([jax.device_put(x, home) for x in xs]), *members)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    d = tree_size(init(0).position)
    infos = [host_info(kept) for kept in infos]
    t_kin = [kinetic_temperature(i, schedule, d) for i in infos] if hasattr(infos[0], "kinetic") else None
    return finalise(ctx, samples, list(range(k)), schedule.num_steps * k, seconds, hp, num_chains=k, t_kin=t_kin,
                    flops_per_step=flops)
