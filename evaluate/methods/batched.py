"""Chains in batches (evaluate.methods.batch says when): every chain of one or many runner calls — the M chains of a
chain allocation, seeds, grid points (registry.run_many), ensemble members — as vmapped programs.

A runner that declares Method.batch_chains returns what `driver.run_single_chain` returns; handed a `Deferred` key
(registry.run_many), run_single_chain records its `ChainCall` instead of running, and `run_calls` runs the calls that
share a compiled chunk together: chain c keeps the keys, start, minibatches and noise of the one-at-a-time path, and
each chain is finalised on its own as that path finalises it. Scalar args leaves (hyperparameters, update counts) get
a chain axis, the others (meta-parameters) stay shared (`arg_axes`): one compiled chunk per method, phase and batch
size. Memory and width: batch.batch_width. Devices: each batch's chains are sharded over the local devices that divide it
(l2e.devices.population_mesh; GSPMD partitions the vmapped chunk), the data and shared args replicated.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from evaluate.methods.batch import ChainBatch, batch_width
from evaluate.methods.chunks import (chunk_fn, finalise_chain, flops_of_chunk, kinetic_temperature, phase_chunks,
                                     run_chunks, slice_chain)
from evaluate.methods.outputs import MethodResult, finalise, merge_chains
from l2e.chains import ChainSchedule
from l2e.devices import population_mesh, replicate, shard_population
from l2e.types import tree_size

__all__ = ["ChainCall", "Deferred", "arg_axes", "init_params_of", "members_batched", "run_batched", "run_calls",
           "shared_fingerprint"]

class ChainCall(NamedTuple):
    """One runner's call of `run_single_chain` for the chains `keys` (a ChainBatch): what `run_calls` needs to run
    them with other calls' chains.

    start: None, or a batched start of the chains after init_fn, start(states, chain keys, args) -> (states, chain
    keys, seconds) on a batch's stacked states, keys and per-chain args (padding included): the control-variate
    rivals' anchor search (evaluate.methods.control_variates), its wall seconds (compilation excluded) added to the
    batch's; the calls of one run_calls share the first call's (one runner, one Run). grad_evals: the gradients one
    chain spends (None: one per update, schedule.num_steps)."""

    keys: ChainBatch
    hp: dict
    schedule: ChainSchedule
    cache_key: tuple
    make_kernel: Callable
    init_fn: Callable
    args: Any
    final_info: Callable | None
    phase_of: Callable | None
    start: Callable | None = None
    grad_evals: int | None = None


class Deferred(NamedTuple):
    """The key `registry.run_many` hands a runner: `run_single_chain` appends its ChainCall to `calls` and returns
    None instead of running (the runner returns what run_single_chain returns: Method.batch_chains)."""

    keys: ChainBatch
    calls: list


def run_batched(ctx, keys: ChainBatch, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel, init_fn,
                args, final_info: Callable | None = None, phase_of: Callable | None = None,
                start: Callable | None = None, grad_evals: int | None = None) -> MethodResult:
    """The M chains of `keys`, each of `schedule`, as vmapped programs (module doc); their pooled MethodResult."""
    call = ChainCall(keys, hp, schedule, cache_key, make_kernel, init_fn, args, final_info, phase_of, start,
                     grad_evals)
    return merge_chains(run_calls(ctx, [call])[0])


def arg_axes(args):
    """The batched programs' one pattern for a runner's args: 0 (a chain axis) for every scalar leaf — a
    hyperparameter, an update count — and None (shared) for the others (meta-parameters), whatever the calls: one
    compiled chunk per method and batch size, whichever hyperparameters differ."""
    return jax.tree.map(lambda leaf: 0 if np.ndim(leaf) == 0 else None, args)


def shared_fingerprint(args) -> tuple:
    """What must be equal for two calls' args to share a batch: the non-scalar leaves (`arg_axes`)."""
    return tuple((np.shape(x), hash(np.asarray(x).tobytes())) for x in jax.tree.leaves(args) if np.ndim(x) != 0)


def _chain_args(calls: list[ChainCall], axes, members: list[int], owner: list[int]):
    """The args of chains `members` (owner[c]: chain c's call): shared leaves as they are, the others stacked."""
    flat_axes = jax.tree.leaves(axes, is_leaf=lambda x: x is None)
    per_call = [jax.tree.leaves(c.args) for c in calls]
    leaves = [per_call[0][i] if a is None else np.stack([np.asarray(per_call[owner[c]][i]) for c in members])
              for i, a in enumerate(flat_axes)]
    return jax.tree.unflatten(jax.tree.structure(calls[0].args), leaves)


def _place(mesh, state, args, axes):
    """On a mesh of more than one device: the states and the per-chain args leaves sharded on their chain axis
    (l2e.devices.shard_population), the shared args leaves replicated; as they are on one device."""
    if mesh.size == 1:
        return state, args
    flat_axes = jax.tree.leaves(axes, is_leaf=lambda x: x is None)
    leaves = [shard_population(x, mesh) if a == 0 else replicate(x, mesh)
              for x, a in zip(jax.tree.leaves(args), flat_axes)]
    return shard_population(state, mesh), jax.tree.unflatten(jax.tree.structure(args), leaves)


def _start(start, mesh, state, keys, args):
    """(states, keys, seconds) a batch's chains start from: ChainCall.start's, re-placed on `mesh` (as `_place`
    places them); the batch's own and 0.0 without one."""
    if start is None:
        return state, keys, 0.0
    state, keys, seconds = start(state, keys, args)
    if mesh.size > 1:
        state, keys = shard_population(state, mesh), shard_population(keys, mesh)
    return state, keys, seconds


def init_params_of(ctx, init_keys: np.ndarray):
    """task.init_params of every key (n, 2), as host arrays (n, …): one vmapped, compiled call per task (the same
    values as one call per key: the initialiser's random bits do not depend on the batch)."""
    fn = ctx.cache.get(("init_params", ctx.task.spec), lambda: jax.jit(jax.vmap(ctx.task.init_params)))
    return jax.tree.map(np.asarray, fn(init_keys))


def _stack(trees: list):
    """The trees stacked on a new leading axis, on the host (no compilation per batch size, as jnp.stack has)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def run_calls(ctx, calls: list[ChainCall], width: int | None = None) -> list[list[MethodResult]]:
    """Every chain of every call (one runner call each: the same cache_key, schedule and phases; their own keys,
    hyperparameters and args) as vmapped programs; per call, its chains' finalised results in chain order (the
    one-at-a-time path's, up to a vmapped program's rounding).

    Batches: `batch.batch_width` chains each (`width`, or all the chains, at most MAX_BATCH_BYTES of states); the
    last one padded with copies of its first chain, whose results are dropped — one compiled program per width,
    however many chains a call brings. Scalar args leaves get a chain axis (each call's own learning rate, update
    counts), the others stay shared (`arg_axes`; the calls' shared leaves must be equal: registry.run_many groups by
    them). Each chain's seconds: its batch's wall time / the batch's real chains. Several local devices: each
    batch's chains are sharded over the largest number of them that divides the batch (l2e.devices.population_mesh;
    GSPMD partitions the vmapped chunk), the data and shared args replicated; one device (or $L2E_NO_SHARDING=1):
    as is."""
    first = calls[0]
    schedule, cache_key, make_kernel, phase_of = first.schedule, first.cache_key, first.make_kernel, first.phase_of
    owner = [i for i, c in enumerate(calls) for _ in range(int(c.keys.init_keys.shape[0]))]
    n = len(owner)
    init_keys = np.concatenate([np.asarray(c.keys.init_keys) for c in calls])
    chain_keys_ = np.concatenate([np.asarray(c.keys.chain_keys) for c in calls])
    params = init_params_of(ctx, init_keys)
    states = [calls[owner[c]].init_fn(jax.tree.map(lambda x, c=c: x[c], params)) for c in range(n)]
    size = batch_width(n, sum(np.asarray(x).nbytes for x in jax.tree.leaves(states[0])), width)
    batches = [list(range(b, min(b + size, n))) for b in range(0, n, size)]
    batches = [b + [b[0]] * (size - len(b)) for b in batches]  # the padding: copies of the batch's first chain
    axes = arg_axes(first.args)
    flat_make = make_kernel if phase_of is None else (lambda: make_kernel(None))
    ck, fn = chunk_fn(ctx, cache_key, flat_make, schedule, batched=True, arg_axes=axes)
    mesh = population_mesh(size)  # the chain axis sharded over the local devices that divide the batch
    stacked0, args0 = _place(mesh, _stack([states[c] for c in batches[0]]),
                             _chain_args(calls, axes, batches[0], owner), axes)
    chunk_at = None
    if phase_of is not None:
        chunk_at = phase_chunks(ctx, cache_key, make_kernel, schedule, phase_of, stacked0, ctx.task.train_data,
                                args0, batched=True, arg_axes=axes)
    ctx.cache.warm_up(ck, fn, stacked0, ctx.task.train_data, args0, chains=size)
    flops = flops_of_chunk(ctx, cache_key, flat_make, states[0], first.args, schedule)
    out: list[list[MethodResult]] = [[] for _ in calls]
    for b, members in enumerate(batches):
        real = min(size, n - b * size)
        state, args = _place(mesh, _stack([states[c] for c in members]), _chain_args(calls, axes, members, owner),
                             axes)
        keys = chain_keys_[members] if mesh.size == 1 else shard_population(chain_keys_[members], mesh)
        state, keys, started = _start(first.start, mesh, state, keys, args)
        t0 = time.perf_counter()
        chain, kept = run_chunks(fn, state, keys, ctx.task.train_data, args, schedule, chunk_at)
        jax.block_until_ready(chain.samples)
        seconds = (time.perf_counter() - t0 + started) / real
        host = chain._replace(state=jax.tree.map(np.asarray, chain.state),
                              samples=jax.tree.map(np.asarray, chain.samples))
        info = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1), *kept)
        for i, c in enumerate(members[:real]):
            call = calls[owner[c]]
            res = finalise_chain(ctx, host, info, i, call.hp, schedule, seconds, flops, call.final_info)
            out[owner[c]].append(res if call.grad_evals is None else dataclasses.replace(res,
                                                                                         grad_evals=call.grad_evals))
    return out


def members_batched(ctx, keys: ChainBatch, hp: dict, schedule: ChainSchedule, cache_key: tuple, make_kernel,
                     init_state: Callable, args) -> MethodResult:
    """run_members' K members (member m with its keys) as vmapped programs (equal batches of at most batch_width,
    sharded like run_calls' batches), finalised together as run_members finalises them (each member judged against
    the others)."""
    task, k = ctx.task, int(keys.init_keys.shape[0])
    params = init_params_of(ctx, np.asarray(keys.init_keys))
    states = [init_state(jax.tree.map(lambda x, m=m: x[m], params)) for m in range(k)]
    size = batch_width(k, sum(np.asarray(x).nbytes for x in jax.tree.leaves(states[0])))
    while k % size:  # members split into equal batches (no padding: every member is a sample)
        size -= 1
    axes = arg_axes(args)
    ck, fn = chunk_fn(ctx, cache_key, make_kernel, schedule, batched=True, arg_axes=axes)
    mesh = population_mesh(size)
    call = ChainCall(keys, hp, schedule, cache_key, make_kernel, init_state, args, None, None)
    per_chain = _chain_args([call], axes, [0] * size, [0])
    flops = flops_of_chunk(ctx, cache_key, make_kernel, states[0], args, schedule)
    samples, infos, seconds = [], [], 0.0
    for g in range(k // size):
        members = range(g * size, (g + 1) * size)
        state, batch_args = _place(mesh, _stack([states[m] for m in members]), per_chain, axes)
        ctx.cache.warm_up(ck, fn, state, task.train_data, batch_args, chains=size)
        chain_keys_ = np.asarray(keys.chain_keys)[g * size:(g + 1) * size]
        t0 = time.perf_counter()
        chain, kept = run_chunks(fn, state, chain_keys_ if mesh.size == 1 else shard_population(chain_keys_, mesh),
                                 task.train_data, batch_args, schedule)
        jax.block_until_ready(chain.samples)
        seconds += time.perf_counter() - t0
        samples.append(jax.tree.map(lambda x: np.asarray(x)[-1], chain.samples))  # each member's last state
        infos.append(jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1), *kept))
    samples = jax.tree.map(lambda *xs: np.concatenate(xs), *samples)
    info = jax.tree.map(lambda *xs: np.concatenate(xs), *infos)
    d = tree_size(states[0].position)
    t_kin = ([kinetic_temperature(slice_chain(info, m), schedule, d) for m in range(k)] if hasattr(info, "kinetic")
             else None)
    return finalise(ctx, samples, list(range(k)), schedule.num_steps * k, seconds, hp, num_chains=k, t_kin=t_kin,
                    flops_per_step=flops)
