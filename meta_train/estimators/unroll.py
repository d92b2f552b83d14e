"""The unrolls of the truncated estimators ("truncated", "pes", "noise_reuse", "backprop"): one inner chain of
inner.num_steps updates cut into K = num_steps / es.truncation segments, one outer iteration per segment
(docs/meta_training.md § Outer gradient estimators).

Iteration t is segment t mod K of unroll t // K, whose task, θ₀ and chain key come from outer_keys(seed, (t // K)·K);
the perturbations and meta-loss examples of iteration t from outer_keys(seed, t). Each segment keeps
inner.num_samples states, truncation / num_samples updates apart (the last after its final update), and its meta-loss
is the objective (meta_train.objectives) of those samples on the meta-loss batch (`loss_batch`).

`Unroll` is a pytree (chain states, chain key, unroll index, next segment; the task spec is static data), so it is
part of the estimator state the run directory checkpoints: `start_unroll(config, cache, t // K, t mod K)` rebuilds its
structure for any iteration t, which is the template a checkpoint of step t is restored into.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from meta_train.es import ProgramCache, _loss_indices, outer_keys, reference_batch, sampler_module
from meta_train.meta_loss import add_penalty
from meta_train.objectives import OBJECTIVES, Outcome
from tasks.task import Task


@struct.dataclass
class Unroll:
    """One unroll's chains.

    states: the sampler states — (P, ...) one per ES member, one chain, or (C, ...) the C chains of a cross-chain
      objective; key: the chain key (2,) uint32 ((C, 2) for C chains); index: the unroll index, int32 ();
    segment: the next segment, int32 () (K once the unroll is done); spec: the task (static, not a leaf).
    """

    states: Any
    key: jax.Array
    index: jax.Array
    segment: jax.Array
    spec: Any = struct.field(pytree_node=False)


def segments_per_unroll(config) -> int:
    """K = inner.num_steps / es.truncation."""
    return config.inner.num_steps // config.es.truncation


def start_unroll(config, cache: ProgramCache, index: int, segment: int, members: int | None = None,
                 spec=None) -> Unroll:
    """Unroll `index` positioned at `segment`, its chains at θ₀.

    Args:
      config: the MetaTrainConfig.
      cache: the run's ProgramCache (builds the task).
      index, segment: the unroll and its next segment.
      members: P, the ES members (each its own chain, all from the same θ₀), or None: one chain (or, for a
        cross-chain objective, objective.chains chains, θ₀ of chain c from fold_in(init key, c), keys split(chain
        key, C)).
      spec: the task instead of the distribution's draw from outer_keys(seed, index·K) (benches).
    Returns:
      the Unroll.
    """
    keys = outer_keys(config.seed, index * segments_per_unroll(config))
    spec = config.tasks.sample(keys.task) if spec is None else spec
    init, task = sampler_module(config.sampler_config).init, cache.task(spec)
    key = keys.chain
    if OBJECTIVES[config.objective.kind].cross_chain:
        if members is not None:
            raise ValueError("a cross-chain objective needs a pathwise estimator (es.estimator backprop)")
        c = config.objective.chains
        states = [init(task.init_params(jax.random.fold_in(keys.init, i))) for i in range(c)]
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        key = jax.random.split(keys.chain, c)
    else:
        state = init(task.init_params(keys.init))
        if members is not None:
            state = jax.tree.map(lambda x: jnp.broadcast_to(x, (members,) + x.shape), state)
    return Unroll(state, key, jnp.asarray(index, jnp.int32), jnp.asarray(segment, jnp.int32), spec)


def objective_refusal(config) -> str | None:
    """Why a truncated estimator cannot take config's objective settings, or None (the estimator protocol's
    `objective_refusal`): objective.budgets, since it runs one chain of inner.num_steps updates cut into segments,
    so there is no other chain length to average over."""
    if config.objective.budgets:
        return ("objective.budgets averages whole chains of several lengths, and a truncated estimator runs one chain "
                "of inner.num_steps updates cut into segments (use es.estimator antithetic)")
    return None


def current_unroll(config, cache: ProgramCache, unroll: Unroll | None, iteration: int,
                   members: int | None = None) -> tuple[Unroll, bool]:
    """(the unroll iteration `iteration` continues, whether it was started afresh): `unroll` itself when it is at
    that iteration's unroll and segment; otherwise (None: a checkpoint written before the unroll was checkpointed;
    or a state of another iteration) a new one from θ₀ positioned at the iteration's segment."""
    index, segment = divmod(iteration, segments_per_unroll(config))
    if unroll is not None and (int(unroll.index), int(unroll.segment)) == (index, segment):
        return unroll, False
    return start_unroll(config, cache, index, segment, members), True


def next_unroll(config, cache: ProgramCache, unroll: Unroll, members: int | None = None) -> Unroll:
    """`unroll` after a segment, or the next unroll at its first segment once `unroll` is done (so the state after
    iteration t is the one iteration t + 1 needs)."""
    if int(unroll.segment) < segments_per_unroll(config):
        return unroll
    return start_unroll(config, cache, int(unroll.index) + 1, 0, members)


def segment_loss_fn(kernel, objective, batch_size: int, num_samples: int, thin: int, cross_chain: bool = False,
                    kinetic: bool = False):
    """loss(φ, state, key, start, data, x, y) -> (meta-loss, new state): num_samples·thin updates from update index
    `start` (keys as l2e.chains.make_chunk: fold_in(key, index) split into minibatch and noise keys), keeping the
    position after every `thin` updates; the meta-loss is objective(samples (num_samples, ...), x, y).
    cross_chain: state and key carry C parallel chains on axis 0 (each its own key), run vmapped; the objective
    gets samples (C, num_samples, ...). kinetic: the second output is (new state, the per-update kinetic sums
    (num_samples, thin)) instead."""

    def run(phi, state, key, start, data):
        def one(st, i):
            k_batch, k_noise = jax.random.split(jax.random.fold_in(key, start + i))
            st, info = kernel(k_noise, st, Task.sample_batch(k_batch, data, batch_size), phi)
            return st, (info.kinetic if kinetic else None)

        def block(st, j):
            st, kin = jax.lax.scan(one, st, j * thin + jnp.arange(thin))
            return st, (st.position, kin)

        state, (samples, kin) = jax.lax.scan(block, state, jnp.arange(num_samples))
        return samples, ((state, kin) if kinetic else state)

    if cross_chain:
        run = jax.vmap(run, in_axes=(None, 0, 0, None, None))

    def loss(phi, state, key, start, data, x, y):
        samples, out = run(phi, state, key, start, data)
        return objective(samples, x, y), out

    return loss


def _kinetic(config) -> bool:
    """Whether the members' segment programs keep the kinetic sums: the objective's T_kin penalty is on."""
    return bool(config.objective.temperature_weight)


def segment_programs(cache: ProgramCache, spec, config):
    """(members program, backprop program) of `spec`, jitted once per run and shared by the estimators: members:
    (φs (P, ...), states (P, ...), key, start, data, x, y) -> (losses (P,), states, or (states, kinetic sums
    (P, num_samples, thin)) when the objective's T_kin penalty is on); backprop: (φ, state, ...) ->
    ((loss, state), ∇φ) with the carried state held constant (a cross-chain objective: state and key with the C
    chains on axis 0). The loss is the objective's (meta_train.objectives.protocol) of the segment's Outcome."""
    sampler, es, inner = config.sampler_config, config.es, config.inner
    objective = OBJECTIVES[config.objective.kind]
    temperature = float(getattr(sampler, "temperature", 1.0))

    def build():
        task = cache.task(spec)
        kernel = sampler_module(sampler).build_kernel(task.posterior, sampler)
        thin = es.truncation // inner.num_samples
        score = objective.loss_fn(task, config.objective)
        at = dict(budget=inner.num_steps, temperature=temperature)
        if objective.reference:
            fn = lambda s, x, ref: score(Outcome(s, x, None, ref, **at))  # noqa: E731
        else:
            fn = lambda s, x, y: score(Outcome(s, x, y, **at))  # noqa: E731
        loss = segment_loss_fn(kernel, fn, inner.batch_size, inner.num_samples, thin,
                               cross_chain=objective.cross_chain)
        members = segment_loss_fn(kernel, fn, inner.batch_size, inner.num_samples, thin, kinetic=_kinetic(config))
        members = jax.jit(jax.vmap(members, in_axes=(0, 0, None, None, None, None, None)))

        def detached(phi, state, *args):
            return loss(phi, jax.lax.stop_gradient(state), *args)

        return members, jax.jit(jax.value_and_grad(detached, has_aux=True))

    key = ("estimator_segment", spec, sampler, es.truncation, inner.num_samples, inner.batch_size,
           config.objective, inner.num_steps) + ((config.objective.chains,) if objective.cross_chain else ())
    return cache.program(key, build)


def loss_batch(cache: ProgramCache, spec, keys, config):
    """The meta-loss batch of an iteration with keys `keys`: meta_loss_examples outer-validation examples
    (x (B, ...), y (B,)), or for a reference objective the reference's test inputs and target (all)."""
    if OBJECTIVES[config.objective.kind].reference:
        return reference_batch(cache, spec, config.objective)
    xv, yv = cache.task(spec).splits.outer_valid
    idx = _loss_indices(keys, xv.shape[0], config.meta_loss_examples)
    return jnp.take(xv, idx, axis=0), jnp.take(yv, idx, axis=0)


def _segment_inputs(config, cache: ProgramCache, unroll: Unroll, keys):
    """(train data, first update index (int32), x, y) of the unroll's next segment."""
    start = jnp.asarray(unroll.segment * config.es.truncation, jnp.int32)
    return (cache.task(unroll.spec).train_data, start) + tuple(loss_batch(cache, unroll.spec, keys, config))


def run_members(config, cache: ProgramCache, unroll: Unroll, population, keys) -> tuple[jax.Array, Unroll]:
    """The unroll's next segment for each ES member, scored by the objective (its loss, plus its host-side penalty
    on the segment's outcome when that is on: T_kin over the segment's updates).

    Args:
      population: the members' meta-parameters, leaves (P, ...); keys: the iteration's OuterKeys.
    Returns:
      (meta-losses (P,) float32 nats, the unroll advanced by one segment).
    """
    members, _ = segment_programs(cache, unroll.spec, config)
    data, start, x, y = _segment_inputs(config, cache, unroll, keys)
    losses, states = members(population, unroll.states, unroll.key, start, data, x, y)
    t_kin = None
    if _kinetic(config):  # T_kin over the segment's updates, for the objective's penalty
        states, kin = states
        kin = np.asarray(kin, np.float64)
        dim = sum(int(np.prod(leaf.shape[1:])) for leaf in jax.tree.leaves(states.position))
        t_kin = kin.reshape(kin.shape[0], -1).mean(axis=1) / dim
    temperature = float(getattr(config.sampler_config, "temperature", 1.0))
    outcome = Outcome(t_kin=t_kin, budget=config.inner.num_steps, temperature=temperature)
    losses = jnp.asarray(add_penalty(config, losses, outcome), jnp.float32)  # float32 → 64 → 32: exact if no penalty
    return losses, unroll.replace(states=states, segment=unroll.segment + 1)


def run_backprop(config, cache: ProgramCache, unroll: Unroll, phi, keys) -> tuple[jax.Array, Any, Unroll]:
    """The unroll's next segment at φ = `phi` and the pathwise gradient of its meta-loss.

    Returns:
      (meta-loss () float32 nats, ∇φ (a pytree like `phi`), the unroll advanced by one segment).
    """
    _, backprop = segment_programs(cache, unroll.spec, config)
    data, start, x, y = _segment_inputs(config, cache, unroll, keys)
    (loss, states), grad = backprop(phi, unroll.states, unroll.key, start, data, x, y)
    return loss, grad, unroll.replace(states=states, segment=unroll.segment + 1)
