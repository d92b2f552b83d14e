"""The ES outer step: antithetic OpenAI-ES (evosax Open_ES) on the BMA meta-loss.

One outer iteration (all randomness from fold_in(seed key, iteration)):
  task ~ distribution;  θ₀ ~ task init;  (φ ± σz) ~ ES.ask;
  every member runs the same inner chain (same θ₀, minibatches and Langevin noise: common random
  numbers), keeping only the thinned samples;  fitness = BMA NLL of its samples on held-out
  outer-validation examples;  ES.tell with identity fitness shaping → ĝ = z(L⁺ − L⁻)/(2σ), optax update.
"""
from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

from evosax.algorithms import Open_ES
import jax
import jax.numpy as jnp
import optax
from evosax.core.fitness_shaping import identity_fitness_shaping_fn

from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.l2e import L2EConfig, build_kernel, init as l2e_init
from meta_train.config import ESConfig
from tasks.task import Task, TaskSpec, build_task


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
def population_chunk(spec: TaskSpec, sampler: L2EConfig, schedule: ChainSchedule):
    """Jitted chunk over the population: states and meta-params batched on axis 0, key and data shared."""
    task = build_task(spec)
    kernel = build_kernel(task.posterior, sampler)
    chunk = make_chunk(kernel, Task.sample_batch, schedule.batch_size, schedule.chunk_length)
    return jax.jit(jax.vmap(chunk, in_axes=(0, None, None, None, 0)))


@functools.lru_cache(maxsize=None)
def population_meta_loss(spec: TaskSpec):
    """Jitted BMA NLL per member: samples leaves (P, K, ...), x (B, ...), y (B,) → (P,)."""
    task = build_task(spec)

    def bma_nll(samples, x, y):
        logp = jax.vmap(lambda p: jax.nn.log_softmax(task.logits(p, x)))(samples)  # (K, B, C)
        ll = jnp.take_along_axis(logp, y[None, :, None], axis=2)[..., 0]  # (K, B)
        k = ll.shape[0]
        return -jnp.mean(jax.nn.logsumexp(ll, axis=0) - math.log(k))

    return jax.jit(jax.vmap(bma_nll, in_axes=(0, None, None)))


class OuterKeys(NamedTuple):
    task: jax.Array
    init: jax.Array
    chain: jax.Array
    perturb: jax.Array
    loss: jax.Array


def outer_keys(seed: int, iteration: int) -> OuterKeys:
    return OuterKeys(*jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), iteration), 5))


def evaluate_population(spec: TaskSpec, population, keys: OuterKeys, sampler: L2EConfig,
                        schedule: ChainSchedule, meta_loss_examples: int, progress=None):
    """Fitness (P,) of a batch of meta-parameters on one task, and seconds spent in the inner loop."""
    task = build_task(spec)
    p = jax.tree.leaves(population)[0].shape[0]
    theta0 = task.init_params(keys.init)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), l2e_init(theta0))
    t0 = time.perf_counter()
    _, samples = run_chain(population_chunk(spec, sampler, schedule), state, keys.chain, task.train_data,
                           population, schedule, progress=progress)
    samples = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), samples)  # (P, K, ...)
    x, y = task.splits.outer_valid
    n = x.shape[0]
    idx = jax.random.choice(keys.loss, n, (min(meta_loss_examples, n),), replace=False)
    fitness = population_meta_loss(spec)(samples, x[idx], y[idx])
    fitness = jax.block_until_ready(fitness)
    return fitness, time.perf_counter() - t0
