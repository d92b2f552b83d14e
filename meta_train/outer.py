"""One outer (ES) iteration as a function: keys → ask → fitnesses → fitness shaping → tell → log row.

The strategy is evosax's Open_ES, antithetic, with an optax outer optimiser (global-norm clip, Adam) and the
fitness shaping `divergence_penalty_shaping(penalty)` composed with identity shaping (centred ranks would make
one antithetic pair a sign estimator): ĝ = z(L⁺ − L⁻)/(2σ) from the shaped fitnesses.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax.numpy as jnp
import numpy as np
import optax
from evosax.algorithms import Open_ES
from evosax.core.fitness_shaping import identity_fitness_shaping_fn

from meta_train.config import ESConfig, MetaTrainConfig
from meta_train.es import ProgramCache, evaluate_population, outer_keys
from meta_train.estimators import TruncatedEstimator


def divergence_penalty_shaping(penalty: float, shaping_fn: Callable = identity_fitness_shaping_fn) -> Callable:
    """An evosax fitness-shaping function (population, fitness, state, params) -> fitness: a member whose
    fitness (meta-loss, lower is better) is not finite gets `penalty`, every other member min(fitness,
    penalty) (no member may look worse than a diverged one); the result then goes through `shaping_fn`."""

    def shaping(population, fitness, state, params):
        capped = jnp.where(jnp.isfinite(fitness), jnp.minimum(fitness, penalty), penalty)
        return shaping_fn(population, capped, state, params)

    return shaping


def outer_optimizer(es: ESConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(es.clip_norm), optax.adam(es.lr, b1=0.9, b2=0.999, eps=1e-8))


def make_strategy(es: ESConfig, meta_params) -> Open_ES | TruncatedEstimator:
    """Open_ES over pytrees shaped like `meta_params`: antithetic, σ constant, the divergence penalty then
    identity fitness shaping; for es.estimator "truncated", "pes" or "backprop" a meta_train.estimators
    TruncatedEstimator instead."""
    if es.estimator != "antithetic":
        return TruncatedEstimator(es, meta_params)
    return Open_ES(
        population_size=es.population,
        solution=meta_params,
        use_antithetic_sampling=True,
        optimizer=outer_optimizer(es),
        std_schedule=optax.constant_schedule(es.sigma),
        fitness_shaping_fn=divergence_penalty_shaping(es.divergence_penalty),
    )


class OuterStep(NamedTuple):
    """The result of one outer iteration: the new ES state, the task it ran on and its log row."""

    es_state: object
    spec: object
    row: dict


def log_row(iteration: int, spec, fitness, shaped, mean, inner_s: float, t0: float) -> dict:
    """The JSON log row: raw meta-losses of the + and − members (None where not finite), shaped fitnesses,
    their mean over finite members (None if none), the meta-parameter norm and timings (s)."""
    raw = np.asarray(fitness, dtype=np.float64)
    finite = np.isfinite(raw)
    half = raw.shape[0] // 2
    return {
        "iteration": iteration,
        "task": spec.name,
        "meta_loss": float(np.mean(raw[finite])) if finite.any() else None,
        "loss_plus": [float(v) if np.isfinite(v) else None for v in raw[:half]],
        "loss_minus": [float(v) if np.isfinite(v) else None for v in raw[half:]],
        "fitness": [float(v) for v in np.asarray(shaped, dtype=np.float64)],
        "divergent_members": int((~finite).sum()),
        "meta_param_norm": float(np.linalg.norm(mean)),
        "inner_seconds": round(inner_s, 4),
        "seconds": round(time.perf_counter() - t0, 4),
    }


def outer_step(strategy: Open_ES, es_params, es_state, config: MetaTrainConfig, iteration: int,
               cache: ProgramCache, progress: Callable[[int], None] | None = None) -> OuterStep:
    """Outer iteration `iteration` from `es_state`; all randomness from outer_keys(config.seed, iteration).

    progress(n) is called after every chunk of n inner steps. When no member's meta-loss is finite the ES state
    is left exactly as it was (the meta-parameters stay unchanged; the log row records the divergence).
    The log row holds "t_kin" (each member's kinetic
    temperature over the sampling window) when config.objective.log_temperature. FloatingPointError if the new
    meta-parameters are not finite."""
    if isinstance(strategy, TruncatedEstimator):  # truncated ES / PES / backprop: one segment per iteration
        return OuterStep(*strategy.outer_step(es_state, config, iteration, cache, progress))
    t0 = time.perf_counter()
    keys = outer_keys(config.seed, iteration)
    spec = config.tasks.sample(keys.task)
    if config.es.reset_optimizer:
        es_state = es_state.replace(opt_state=strategy.optimizer.init(es_state.mean))
    before = es_state
    population, es_state = strategy.ask(keys.perturb, es_state, es_params)
    result = evaluate_population(spec, population, keys, config.sampler_config, config.schedule,
                                 config.meta_loss_examples, progress=progress, execution=config.es.execution,
                                 cache=cache, objective=config.objective.kind,
                                 log_temperature=config.objective.log_temperature,
                                 reference=config.objective.reference)
    fitness = result.fitness
    shaped = strategy.fitness_shaping_fn(population, fitness, es_state, es_params)
    if np.isfinite(np.asarray(fitness)).any():
        es_state, _ = strategy.tell(keys.perturb, population, fitness, es_state, es_params)
    else:  # no member is finite: no information, so no update (evosax + Adam would still move φ on rounding residue)
        es_state = before
    mean = np.asarray(es_state.mean)
    if not np.all(np.isfinite(mean)):
        raise FloatingPointError(f"meta-parameters became non-finite at iteration {iteration}")
    row = log_row(iteration, spec, fitness, shaped, mean, result.inner_seconds, t0)
    if result.t_kin is not None:
        row["t_kin"] = [float(t) if np.isfinite(t) else None for t in result.t_kin]
    return OuterStep(es_state, spec, row)
