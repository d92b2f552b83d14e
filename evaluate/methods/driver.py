"""Shared drivers of the minibatch methods: one chain, or K ensemble members, through `l2e.chains`.

Every chain (and every member) is `l2e.chains.make_chunk` + `jax.jit` + `l2e.chains.run_chain`: a Python loop
over a compiled chunk of a few unrolled updates (never a CNN gradient inside `lax.scan`; see l2e/chains.py).
Kernels have the chunk signature `kernel(key, state, minibatch, args) -> (state, info)` with the traced
hyperparameters in `args` (a dict), so a whole tuning grid compiles once per (task, method, schedule).

Devices: ensemble members run round robin on the local devices (`l2e.devices.member_device`), each the same
single-member program as on one device (identical numbers whatever the device count).
"""
from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp

from evaluate.methods.outputs import MethodResult, finalise
from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.devices import member_device

__all__ = ["chain_keys", "chunk_fn", "lr_args", "run_members", "run_single_chain"]


def chain_keys(key) -> tuple[jax.Array, jax.Array]:
    """(init key, chain key): `key` itself when it is a pair, else split(key)."""
    if isinstance(key, (tuple, list)):
        return key[0], key[1]
    k1, k2 = jax.random.split(key)
    return k1, k2


def lr_args(hp: dict) -> dict:
    """{"lr": hp["learning_rate"] as a float32 scalar} (a traced chunk argument)."""
    return {"lr": jnp.asarray(hp["learning_rate"], jnp.float32)}


def chunk_fn(ctx, cache_key: tuple, make_kernel: Callable[[], Callable], schedule: ChainSchedule):
    """(key, the jitted chunk of `schedule.chunk_length` updates), cached per (cache_key, task, batch, length)."""
    key = ("chunk", cache_key, ctx.task.spec, schedule.batch_size, schedule.chunk_length)
    fn = ctx.cache.get(key, lambda: jax.jit(make_chunk(make_kernel(), ctx.task.sample_batch, schedule.batch_size,
                                                         schedule.chunk_length)))
    return key, fn


def run_single_chain(ctx, key, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel, init_fn,
                     args, final_info: Callable | None = None) -> MethodResult:
    """One chain of `schedule` from init_fn(task.init_params(init key)); `final_info(final_state) -> dict` adds
    entries to the hyperparameter record.  seconds: the chain after compilation."""
    task = ctx.task
    init_key, key_chain = chain_keys(key)
    state = init_fn(task.init_params(init_key))
    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule)
    ctx.cache.warm_up(ck, fn, state, task.train_data, args)
    t0 = time.perf_counter()
    chain = run_chain(fn, state, key_chain, task.train_data, args, schedule)
    jax.block_until_ready(chain.samples)
    seconds = time.perf_counter() - t0
    if final_info is not None:
        hp = {**hp, **final_info(chain.state)}
    return finalise(ctx, chain.samples, [0] * schedule.num_samples, schedule.num_steps, seconds, hp)


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
    t0 = time.perf_counter()
    members = []
    for m in range(k):  # dispatch is asynchronous, so members on different devices overlap
        dev = member_device(m)
        state, member_key, member_args = jax.device_put((init(m), jax.random.fold_in(key_chain, m), args), dev)
        chain = run_chain(fn, state, member_key, ctx.cache.data.put(task.train_data, dev), member_args, schedule)
        members.append(chain.samples)
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.concatenate([jax.device_put(x, home) for x in xs]), *members)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    return finalise(ctx, samples, list(range(k)), schedule.num_steps * k, seconds, hp, num_chains=k)
