"""The pieces every minibatch driver shares: a chain's keys, its compiled chunk (cached per task, method and
schedule; vmapped over a chain axis for a batch), phase kernels, FLOPs of one update, a probe of its cost, running the
chunks with their infos kept aside, and finalising one chain of a batch.

Every chain is `l2e.chains.make_chunk` + `jax.jit` + `l2e.chains.run_chain`: a Python loop over a compiled chunk of a
few unrolled updates (never a CNN gradient inside `lax.scan`; see l2e/chains.py). Kernels have the chunk signature
`kernel(key, state, minibatch, args) -> (state, info)` with the traced hyperparameters in `args` (a dict), so a whole
tuning grid compiles once per (task, method, schedule). The one-at-a-time drivers are `evaluate.methods.driver`, the
batched ones `evaluate.methods.batched`.
"""
from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from evaluate.budget import step_flops
from evaluate.methods.outputs import MethodResult, finalise, probe_result
from l2e import diagnostics
from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.types import tree_size

__all__ = ["PROBE_CALLS", "PROBE_REPEATS", "chain_keys", "chunk_fn", "finalise_chain", "flops_of_chunk", "host_info",
           "kinetic_temperature", "lr_args", "phase_chunks", "probe", "run_chunks", "slice_chain"]

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
             batched: bool = False, arg_axes=None, sample_batch=None, donate: bool = False):
    """(key, the jitted chunk of `schedule.chunk_length` updates), cached per (cache_key, task, batch, length);
    batched: the chunk vmapped over a leading chain axis of the state and the key (data shared; args shared, or
    `arg_axes`: a pytree prefix of args, 0 for a leaf with a chain axis (a grid point's hyperparameter per chain),
    None for a shared one); sample_batch: the minibatch sampler (default the task's; cache_key must name another);
    donate: the chunk consumes its state (jax.jit's donate_argnums: fields an update leaves unchanged are not copied
    at every call; keep copies of what you read from a state after passing it on)."""
    axes_key = () if arg_axes is None else (tuple(jax.tree.leaves(arg_axes, is_leaf=lambda x: x is None)),
                                             jax.tree.structure(arg_axes, is_leaf=lambda x: x is None))
    key = ("chunk", cache_key, ctx.task.spec, schedule.batch_size, schedule.chunk_length) + (
        ("batched",) * batched) + ("donate",) * donate + axes_key

    def build():
        chunk = make_chunk(make_kernel(), sample_batch or ctx.task.sample_batch, schedule.batch_size,
                           schedule.chunk_length)
        return jax.jit(jax.vmap(chunk, in_axes=(0, 0, None, None, arg_axes)) if batched else chunk,
                       donate_argnums=(0,) if donate else ())

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


def flops_of_chunk(ctx, cache_key: tuple, make_kernel, state, args,
                   schedule: ChainSchedule) -> float | None:
    """FLOPs of one update (evaluate.budget.step_flops) on a minibatch of the task, once per (kernel cache_key, task,
    batch size): one update's program does not depend on how many a chunk unrolls, nor on a batch of chains."""
    def measure():
        batch = ctx.task.sample_batch(jax.random.PRNGKey(0), ctx.task.train_data, schedule.batch_size)
        return step_flops(make_kernel(), jax.random.PRNGKey(0), state, batch, args)

    return ctx.cache.get(("flops", cache_key, ctx.task.spec, schedule.batch_size), measure)


def probe(ctx, fn, state, data, args, length: int, hp: dict, flops) -> MethodResult:
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


def phase_chunks(ctx, cache_key: tuple, make_kernel, schedule: ChainSchedule, phase_of, state, data, args,
                  batched: bool = False, arg_axes=None, sample_batch=None, donate: bool = False):
    """chunk_at(start) -> the compiled chunk of the phase `phase_of(start, chunk_length)` (None: the general kernel,
    make_kernel(None)), each phase's chunk cached and warmed up before the chain (its compilation is not timed; with
    `donate`, on a copy of `state`); sample_batch, donate: as `chunk_fn`'s."""
    length = schedule.chunk_length
    fns = {}
    for start in range(0, schedule.num_steps, length):
        phase = phase_of(start, length)
        if phase not in fns:
            ck, fns[phase] = chunk_fn(ctx, cache_key if phase is None else cache_key + (phase,),
                                      lambda p=phase: make_kernel(p), schedule, batched, arg_axes, sample_batch, donate)
            chains = jax.tree.leaves(state)[0].shape[0] if batched else None
            ctx.cache.warm_up(ck, fns[phase], jax.tree.map(jnp.copy, state) if donate else state, data, args,
                              chains=chains)
    return lambda start: fns[phase_of(start, length)]


def run_chunks(fn, state, key, data, args, schedule: ChainSchedule, chunk_at=None,
               position_fn=lambda s: s.position) -> tuple:
    """(ChainResult without info, the chunks' infos): `l2e.chains.run_chain` with the per-chunk infos kept aside,
    so that joining them (`host_info`, after the timed region) costs no compilation per chunk count inside it
    (jnp.concatenate of n arrays compiles once per n: 2.7 s for 2,346 chunks, measured on CPU). position_fn: what
    to keep at a sample step (a copy where the chunks donate their state)."""
    kept = []

    def keep(f):
        def chunk(*call):
            new, info = f(*call)
            kept.append(info)
            return new, ()

        return chunk

    at = None if chunk_at is None else (lambda start: keep(chunk_at(start)))
    return run_chain(keep(fn), state, key, data, args, schedule, position_fn=position_fn, chunk_at=at), kept


def host_info(kept: list):
    """Every step's Info as numpy arrays, the chunks' infos joined on axis 0 on the host."""
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *kept)


def slice_chain(tree, c: int):
    return jax.tree.map(lambda x: x[c], tree)


def finalise_chain(ctx, chain, info, i: int, hp: dict, schedule: ChainSchedule, seconds: float, flops,
                    final_info) -> MethodResult:
    """Chain i of a batch as the one-at-a-time path finalises it (run_single_chain)."""
    samples = jax.tree.map(lambda x: np.asarray(x)[:, i], chain.samples)
    hp_i = dict(hp) if final_info is None else {**hp, **final_info(slice_chain(chain.state, i))}
    info_i = slice_chain(info, i)
    t_kin = kinetic_temperature(info_i, schedule, tree_size(slice_chain(chain.state, i).position))
    return finalise(ctx, samples, [0] * schedule.num_samples, schedule.num_steps, seconds, hp_i,
                    t_kin=None if not hasattr(info_i, "kinetic") else [t_kin], flops_per_step=flops)
