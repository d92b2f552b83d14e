"""Truncated outer gradient estimators (`es.estimator`): "truncated" ES, "pes" and "backprop" (truncated BPTT).

"antithetic" (the default) is meta_train.outer's full-length antithetic ES and does not come here. The others cut
each inner chain of `inner.num_steps` updates into K = num_steps / es.truncation segments and make one outer update
per segment (one outer iteration = one segment); the chain persists across the K iterations of an unroll, then a
new unroll starts on a new task. Iteration t is segment t mod K of unroll t // K, whose task, θ₀ and chain key come
from outer_keys(seed, (t // K)·K); the perturbations and meta-loss examples of iteration t from outer_keys(seed, t).
Each segment keeps inner.num_samples states, truncation / num_samples updates apart (the last after its final
update), and its meta-loss is the objective (meta_train.es.OBJECTIVE_FNS) of those samples.

- "truncated" (truncated ES): P/2 antithetic pairs φ ± σz_t, z_t drawn afresh each segment; each member carries its
  own chain state; ĝ = Σ_j σz_j (L⁺_j − L⁻_j) / (2σ²·P/2). Biased across truncations (ignores the effect of φ on the
  segment's start state).
- "pes" (persistent ES, Vicol et al. 2021): as "truncated", but ĝ uses the perturbations accumulated over the
  unroll's segments so far, ξ_j = Σ_{s ≤ t} σz_j,s, in place of σz_j: unbiased for the gradient of the sum of the
  segment losses (of the Gaussian-smoothed φ). The accumulators reset with the unroll.
- "backprop": the pathwise gradient of the segment's meta-loss through the segment's updates (jax.grad through a
  lax.scan of the kernel) from the carried state held constant (stop_gradient at truncation boundaries); the chain
  continues with φ. Works with every learned sampler whose step is differentiable (l2e, kinetic, meta_sgmcmc; the
  latter's own stop-gradients are those of META_SGMCMC.md §4). A non-finite gradient becomes 0 (no update).
  With a cross-chain objective ("stein_kl_cross") the unroll carries objective.chains = C chains (θ₀ of chain c from
  fold_in(init key, c), chain keys split(chain key, C)) run vmapped through each segment, and the meta-loss is the
  objective of their samples (C, num_samples, ...).
The meta-loss batch is meta_loss_examples outer-validation examples drawn per iteration, or for "fidelity" the
reference's test inputs and probabilities (meta_train.es.reference_batch).
Losses of ES members are capped as meta_train.outer.divergence_penalty_shaping does (non-finite → penalty).
The update: the same optax chain as the ES path (global-norm clip, Adam), state kept across iterations.

Checkpoints hold φ and the Adam state (EstimatorState); the chain states and PES accumulators live in the estimator
object, so a run resumed mid-unroll restarts that unroll's chain from its θ₀ at the current segment (not
bit-identical with an uninterrupted run; resuming at an unroll boundary is).
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from meta_train.es import OBJECTIVE_FNS, ProgramCache, _loss_indices, outer_keys, reference_batch, sampler_module
from meta_train.objectives import CROSS_CHAIN_OBJECTIVES, REFERENCE_OBJECTIVES
from tasks.task import Task

TRUNCATED_ESTIMATORS = ("truncated", "pes", "backprop")


class EstimatorState(NamedTuple):
    """What a checkpoint holds: the meta-parameters φ and the outer optimiser's state."""

    mean: Any
    opt_state: Any


class Unroll:
    """One unroll's chain (not checkpointed): task spec, states (members on axis 0 for ES, one chain for
    backprop), PES accumulators (pairs on axis 0), chain key, index and the next segment."""

    def __init__(self, index: int, spec, states, accum, key, segment: int):
        self.index, self.spec, self.states, self.accum, self.key, self.segment = index, spec, states, accum, key, segment


def segments_per_unroll(config) -> int:
    return config.inner.num_steps // config.es.truncation


def segment_loss_fn(kernel, objective, batch_size: int, num_samples: int, thin: int, cross_chain: bool = False):
    """loss(φ, state, key, start, data, x, y) -> (meta-loss, new state): num_samples·thin updates from update index
    `start` (keys as l2e.chains.make_chunk: fold_in(key, index) split into minibatch and noise keys), keeping the
    position after every `thin` updates; the meta-loss is objective(samples (num_samples, ...), x, y).
    cross_chain: state and key carry C parallel chains on axis 0 (each its own key), run vmapped; the objective
    gets samples (C, num_samples, ...)."""

    def run(phi, state, key, start, data):
        def one(st, i):
            k_batch, k_noise = jax.random.split(jax.random.fold_in(key, start + i))
            return kernel(k_noise, st, Task.sample_batch(k_batch, data, batch_size), phi)[0], None

        def block(st, j):
            st, _ = jax.lax.scan(one, st, j * thin + jnp.arange(thin))
            return st, st.position

        state, samples = jax.lax.scan(block, state, jnp.arange(num_samples))
        return samples, state

    if cross_chain:
        run = jax.vmap(run, in_axes=(None, 0, 0, None, None))

    def loss(phi, state, key, start, data, x, y):
        samples, state = run(phi, state, key, start, data)
        return objective(samples, x, y), state

    return loss


def _programs(cache: ProgramCache, spec, config):
    """(members program, backprop program) of `spec`, jitted once per run: members: (φs (P, ...), states (P, ...),
    key, start, data, x, y) -> (losses (P,), states); backprop: (φ, state, ...) -> ((loss, state), ∇φ) (a
    cross-chain objective: state and key with the C chains on axis 0)."""
    sampler, es, inner = config.sampler_config, config.es, config.inner
    cross = config.objective.kind in CROSS_CHAIN_OBJECTIVES

    def build():
        task = cache.task(spec)
        kernel = sampler_module(sampler).build_kernel(task.posterior, sampler)
        thin = es.truncation // inner.num_samples
        loss = segment_loss_fn(kernel, OBJECTIVE_FNS[config.objective.kind](task), inner.batch_size,
                               inner.num_samples, thin, cross_chain=cross)
        members = jax.jit(jax.vmap(loss, in_axes=(0, 0, None, None, None, None, None)))

        def detached(phi, state, *args):
            return loss(phi, jax.lax.stop_gradient(state), *args)

        return members, jax.jit(jax.value_and_grad(detached, has_aux=True))

    key = ("estimator_segment", spec, sampler, es.truncation, inner.num_samples, inner.batch_size,
           config.objective.kind) + ((config.objective.chains,) if cross else ())
    return cache.program(key, build)


def start_unroll(config, cache: ProgramCache, index: int, segment: int, mean, spec=None) -> Unroll:
    """Unroll `index` (task, θ₀, chain key from outer_keys(seed, index·K); `spec` given: that task instead),
    positioned at `segment`."""
    keys = outer_keys(config.seed, index * segments_per_unroll(config))
    spec = config.tasks.sample(keys.task) if spec is None else spec
    init = sampler_module(config.sampler_config).init
    pairs = config.es.population // 2
    if config.objective.kind in CROSS_CHAIN_OBJECTIVES:  # C chains: θ₀ from fold_in(init key, c), keys split
        c = config.objective.chains
        states = [init(cache.task(spec).init_params(jax.random.fold_in(keys.init, i))) for i in range(c)]
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        accum = jax.tree.map(lambda x: jnp.zeros((pairs,) + x.shape, x.dtype), mean)
        return Unroll(index, spec, state, accum, jax.random.split(keys.chain, c), segment)
    state = init(cache.task(spec).init_params(keys.init))
    if config.es.estimator != "backprop":
        p = 2 * pairs
        state = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), state)
    accum = jax.tree.map(lambda x: jnp.zeros((pairs,) + x.shape, x.dtype), mean)
    return Unroll(index, spec, state, accum, keys.chain, segment)


def _loss_batch(cache, spec, keys, config):
    """The meta-loss batch: meta_loss_examples outer-validation examples, or for "fidelity" the reference's test
    inputs and probabilities (all of them)."""
    if config.objective.kind in REFERENCE_OBJECTIVES:
        return reference_batch(cache, spec, config.objective.reference)
    task = cache.task(spec)
    xv, yv = task.splits.outer_valid
    idx = _loss_indices(keys, xv.shape[0], config.meta_loss_examples)
    return jnp.take(xv, idx, axis=0), jnp.take(yv, idx, axis=0)


def segment_gradient(config, cache: ProgramCache, unroll: Unroll, mean, keys) -> tuple[Any, np.ndarray]:
    """(ĝ, losses) of the unroll's next segment at φ = mean (module doc); advances the unroll's states (and PES
    accumulators) by one segment. losses: (P,) members' meta-losses (ES) or (1,) the segment's (backprop)."""
    es = config.es
    members, backprop = _programs(cache, unroll.spec, config)
    data = cache.task(unroll.spec).train_data
    start = jnp.asarray(unroll.segment * es.truncation, jnp.int32)
    x, y = _loss_batch(cache, unroll.spec, keys, config)
    unroll.segment += 1
    if es.estimator == "backprop":
        (loss, state), grad = backprop(mean, unroll.states, unroll.key, start, data, x, y)
        ok = bool(jnp.isfinite(loss)) and all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grad))
        unroll.states = state
        return (grad if ok else jax.tree.map(jnp.zeros_like, grad)), np.asarray([loss], np.float64)
    pairs = es.population // 2
    leaves, treedef = jax.tree.flatten(mean)
    ks = jax.random.split(keys.perturb, len(leaves))
    eps = jax.tree.unflatten(treedef, [es.sigma * jax.random.normal(k, (pairs,) + x.shape, x.dtype)
                                       for k, x in zip(ks, leaves)])
    phis = jax.tree.map(lambda m, e: jnp.concatenate([m[None] + e, m[None] - e]), mean, eps)
    losses, unroll.states = members(phis, unroll.states, unroll.key, start, data, x, y)
    capped = jnp.where(jnp.isfinite(losses), jnp.minimum(losses, es.divergence_penalty), es.divergence_penalty)
    if es.estimator == "pes":
        unroll.accum = jax.tree.map(jnp.add, unroll.accum, eps)
        xi = unroll.accum
    else:
        xi = eps
    diff = capped[:pairs] - capped[pairs:]
    grad = jax.tree.map(lambda v: jnp.tensordot(diff, v, axes=1) / (2.0 * es.sigma**2 * pairs), xi)
    return grad, np.asarray(losses, np.float64)


class TruncatedEstimator:
    """The strategy meta_train.outer uses for es.estimator in TRUNCATED_ESTIMATORS (duck-typed like evosax's
    Open_ES where meta_train.train needs it: default_params, init, get_mean)."""

    default_params = None

    def __init__(self, es, meta_params):
        self.es = es
        self.optimizer = optax.chain(optax.clip_by_global_norm(es.clip_norm),
                                     optax.adam(es.lr, b1=0.9, b2=0.999, eps=1e-8))
        self.unroll: Unroll | None = None

    def init(self, key, meta_params, params=None) -> EstimatorState:
        return EstimatorState(meta_params, self.optimizer.init(meta_params))

    def get_mean(self, state: EstimatorState):
        return state.mean

    def outer_step(self, state: EstimatorState, config, iteration: int, cache: ProgramCache, progress=None):
        """(new EstimatorState, task spec, log row) of outer iteration `iteration` (one segment)."""
        t0 = time.perf_counter()
        k = segments_per_unroll(config)
        index, segment = divmod(iteration, k)
        if self.unroll is None or self.unroll.index != index or self.unroll.segment != segment:
            self.unroll = start_unroll(config, cache, index, segment, state.mean)
        spec = self.unroll.spec
        opt_state = self.optimizer.init(state.mean) if config.es.reset_optimizer else state.opt_state
        grad, losses = segment_gradient(config, cache, self.unroll, state.mean, outer_keys(config.seed, iteration))
        if progress is not None:
            progress(config.es.truncation)
        inner_s = time.perf_counter() - t0
        updates, opt_state = self.optimizer.update(grad, opt_state, state.mean)
        mean = optax.apply_updates(state.mean, updates)
        flat = np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(mean)])
        if not np.all(np.isfinite(flat)):
            raise FloatingPointError(f"meta-parameters became non-finite at iteration {iteration}")
        return EstimatorState(mean, opt_state), spec, _row(iteration, spec, losses, config, flat, inner_s, t0,
                                                            index, segment)


def _row(iteration, spec, losses, config, flat, inner_s, t0, index, segment) -> dict:
    finite = np.isfinite(losses)
    half = losses.shape[0] // 2 if config.es.estimator != "backprop" else 0
    return {
        "iteration": iteration, "task": spec.name,
        "meta_loss": float(np.mean(losses[finite])) if finite.any() else None,
        "loss_plus": [float(v) if np.isfinite(v) else None for v in losses[:half]],
        "loss_minus": [float(v) if np.isfinite(v) else None for v in losses[half:2 * half]],
        "fitness": [float(v) if np.isfinite(v) else None for v in losses],
        "divergent_members": int((~finite).sum()), "meta_param_norm": float(np.linalg.norm(flat)),
        "inner_seconds": round(inner_s, 4), "seconds": round(time.perf_counter() - t0, 4),
        "estimator": config.es.estimator, "unroll": index, "segment": segment,
    }
