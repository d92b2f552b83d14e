"""The shared meta-loss of a population (docs/meta_training.md § Objectives): every member's chain at each budget
(objective.budgets, or inner.num_steps alone) and each seed, scored by the objective (meta_train.objectives: its
traced `loss` on the chain's samples, then its host-side `penalty` on the chain's outcome — per-chain T_kin,
divergent flags, the budget, the sampler's temperature), averaged. The estimators call this and never read an
objective's settings.

`population_meta_loss(config, spec, population, keys, cache)`: the antithetic estimator's fitness (and the bench's);
`add_penalty(config, losses, outcome)`: the objective's penalty on one budget's losses (the truncated ES estimators,
whose chains are segments of one unroll, call it on a segment's losses).
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from meta_train.es import OuterKeys, PopulationFitness, ProgramCache, evaluate_population
from meta_train.objectives import OBJECTIVES, Outcome


def add_penalty(config, losses, outcome: Outcome) -> np.ndarray:
    """losses (P,) as float64 plus the objective's host-side penalty on `outcome` (config.objective's kind and
    settings; the divergent flags are filled in from the losses when not given). Unchanged where the penalty is
    off."""
    loss = np.asarray(losses, np.float64)
    if outcome.divergent is None:
        outcome = outcome._replace(divergent=~np.isfinite(loss))
    penalty = OBJECTIVES[config.objective.kind].penalty(outcome, config.objective)
    return loss if penalty is None else loss + penalty


def population_meta_loss(config, spec, population, keys: OuterKeys | Sequence[OuterKeys], cache: ProgramCache,
                         progress=None, evaluate: Callable = evaluate_population) -> PopulationFitness:
    """Every member's meta-loss on one task: for each chain length of `config.schedules` (objective.budgets) and
    each of `keys` (one OuterKeys, or several: seeds), the population's chains (meta_train.es.evaluate_population;
    the same keys for every budget) scored by the objective's loss plus its penalty; the mean over budgets and
    seeds (float64, then float32). t_kin is the members' mean T_kin over them (None when not logged).

    Args:
      config: the MetaTrainConfig; spec: the task; population: meta-parameters with leaves (P, ...).
      keys: the iteration's OuterKeys (or a sequence of them); cache: the run's ProgramCache.
      progress: called with n after every n inner steps; evaluate: evaluate_population's stand-in (tests).
    """
    obj, seeds = config.objective, [keys] if isinstance(keys, OuterKeys) else list(keys)
    fitness, seconds, t_kin = [], 0.0, []
    for schedule in config.schedules:
        sampler = config.sampler_config_at(schedule)
        temperature = float(getattr(sampler, "temperature", 1.0))
        for k in seeds:
            result = evaluate(spec, population, k, sampler, schedule, config.meta_loss_examples, progress=progress,
                              execution=config.es.execution, cache=cache, objective=obj)
            outcome = Outcome(t_kin=result.t_kin, budget=schedule.num_steps, temperature=temperature)
            fitness.append(add_penalty(config, result.fitness, outcome))
            seconds += result.inner_seconds
            if result.t_kin is not None:
                t_kin.append(np.asarray(result.t_kin, np.float64))
    mean = jnp.asarray(np.mean(fitness, axis=0), jnp.float32)
    return PopulationFitness(mean, seconds, np.mean(t_kin, axis=0) if t_kin else None)


__all__ = ["add_penalty", "population_meta_loss"]
