"""Full-length antithetic ES ("antithetic", the default): evosax's Open_ES with es.population members φ ± σz, each
running the whole inner chain of inner.num_steps updates on the iteration's task; identity fitness shaping composed
with the divergence cap, ĝ = z(L⁺ − L⁻)/(2σ) averaged over pairs, then the shared outer optimiser (docs/meta_training.md
§ Outer gradient estimators). When no member's meta-loss is finite the state is left exactly as it was.

The state is evosax's Open_ES state (flat mean (D,), Adam state, …), unchanged from the checkpoints of earlier
versions. Randomness of iteration t: outer_keys(seed, t) (meta_train.es).
"""
from __future__ import annotations

import time

import numpy as np
import optax
from evosax.algorithms import Open_ES

from meta_train.es import PopulationFitness, ProgramCache, evaluate_population, outer_keys
from meta_train.estimators.common import OuterStep, check_finite, divergence_penalty_shaping, log_row, outer_optimizer
from meta_train.meta_loss import population_meta_loss

TRUNCATED = False
"""One outer update per whole inner chain."""
PATHWISE = False
"""A zeroth-order estimate: gradient-only objectives are refused."""


def make_strategy(es, meta_params) -> Open_ES:
    """Open_ES over pytrees shaped like `meta_params`: antithetic, σ = es.sigma constant, the divergence cap then
    identity fitness shaping, the shared outer optimiser of `es` (an ESConfig)."""
    return Open_ES(
        population_size=es.population,
        solution=meta_params,
        use_antithetic_sampling=True,
        optimizer=outer_optimizer(es),
        std_schedule=optax.constant_schedule(es.sigma),
        fitness_shaping_fn=divergence_penalty_shaping(es.divergence_penalty),
    )


def population_fitness(config, spec, population, keys, cache: ProgramCache, progress=None) -> PopulationFitness:
    """Every member's meta-loss on one task: the shared meta-loss (meta_train.meta_loss.population_meta_loss — the
    objective over every budget, its penalty, the mean) through this module's `evaluate_population`."""
    return population_meta_loss(config, spec, population, keys, cache, progress, evaluate=evaluate_population)


def objective_refusal(config) -> str | None:
    """None: full chains at every budget, the objective's loss and penalty on each (meta_train.meta_loss)."""
    return None


class Estimator:
    """Antithetic ES on a MetaTrainConfig (the meta_train.estimators protocol)."""

    name = "antithetic"

    def __init__(self, config, phi0):
        self.config = config
        self.phi0 = phi0
        self.strategy = make_strategy(config.es, phi0)
        self.params = self.strategy.default_params

    def init(self, key, cache: ProgramCache, iteration: int = 0):
        """The Open_ES state at φ₀ (the same for every iteration)."""
        return self.strategy.init(key, self.phi0, self.params)

    def mean(self, state):
        """φ, a pytree like φ₀."""
        return self.strategy.get_mean(state)

    def step(self, state, iteration: int, cache: ProgramCache, progress=None) -> OuterStep:
        """Outer iteration `iteration` from `state` (the protocol's `step`); the row holds "t_kin" when
        config.objective.log_temperature. FloatingPointError if the new meta-parameters are not finite."""
        t0 = time.perf_counter()
        config, strategy, params = self.config, self.strategy, self.params
        keys = outer_keys(config.seed, iteration)
        spec = config.tasks.sample(keys.task)
        if config.es.reset_optimizer:
            state = state.replace(opt_state=strategy.optimizer.init(state.mean))
        before = state
        population, state = strategy.ask(keys.perturb, state, params)
        result = population_fitness(config, spec, population, keys, cache, progress)
        fitness = result.fitness
        shaped = strategy.fitness_shaping_fn(population, fitness, state, params)
        if np.isfinite(np.asarray(fitness)).any():
            state, _ = strategy.tell(keys.perturb, population, fitness, state, params)
        else:  # no member is finite: no information, so no update (Adam would still move φ on rounding residue)
            state = before
        mean = np.asarray(state.mean)
        check_finite(mean, iteration)
        row = log_row(iteration, spec, fitness, shaped, mean, result.inner_seconds, t0)
        if result.t_kin is not None:
            row["t_kin"] = [float(t) if np.isfinite(t) else None for t in result.t_kin]
        return OuterStep(state, spec, row)

    def legacy_template(self):
        """None: the state's layout has not changed."""
        return None

