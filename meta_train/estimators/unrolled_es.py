"""The evosax strategy behind the truncated ES estimators ("truncated", "pes", "noise_reuse"): `UnrolledES`, one
outer update per segment of an unroll (meta_train.estimators.unroll), P = es.population members φ + ε_j (antithetic
pairs ±ε), each carrying its own chain through the unroll.

evosax's PersistentES and NoiseReuseES keep the perturbations that the estimate uses in their state — PES the
accumulated perturbations of the unroll so far (`pert_accum`), noise-reuse ES the unroll's one perturbation (`pert`) —
and reset them with `inner_step_counter` when it reaches the horizon T (evosax params T, K = es.truncation); truncated
ES is PersistentES with T = K (accumulators reset every segment). ĝ = Σ_j f_j ξ_j / (σ²P), f the capped
fitnesses (divergence cap, identity shaping), then the shared outer optimiser.

State (`UnrolledState`): the evosax state (flat mean (D,), Adam state, perturbations, inner_step_counter) and the
Unroll (member chain states (P, ...), chain key, unroll index, next segment): everything the next iteration needs, so
the run directory's checkpoint of it resumes mid-unroll bit-identically. A checkpoint written before the unroll was
checkpointed (`legacy_template`: φ and the Adam state as pytrees) resumes with a fresh chain from the unroll's θ₀ at
the current segment and fresh perturbations.
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from evosax.algorithms import PersistentES
from jax.flatten_util import ravel_pytree

from meta_train.es import ProgramCache, outer_keys
from meta_train.estimators.common import (OuterStep, capture_gradient, check_finite, divergence_penalty_shaping,
                                          log_row, outer_optimizer)
from meta_train.estimators.unroll import (Unroll, current_unroll, next_unroll, run_members, segments_per_unroll,
                                          start_unroll)


class UnrolledState(NamedTuple):
    """es: the evosax strategy's state; unroll: the current Unroll (None: restored from a checkpoint without it)."""

    es: Any
    unroll: Unroll | None


class LegacyState(NamedTuple):
    """The layout of truncated-estimator checkpoints before the unroll was checkpointed: φ and the optax state, as
    pytrees."""

    mean: Any
    opt_state: Any


class UnrolledES:
    """A truncated ES estimator (the meta_train.estimators protocol) over an evosax strategy class with
    perturbation accumulators (`strategy_class`, its state field `accumulator`) and horizon T (`horizon`)."""

    name = "pes"
    strategy_class = PersistentES
    accumulator = "pert_accum"

    def horizon(self, config) -> int:
        """evosax's T: the updates after which the perturbations reset (the unroll's inner.num_steps)."""
        return config.inner.num_steps

    def __init__(self, config, phi0):
        self.config, self.phi0 = config, phi0
        self.k = segments_per_unroll(config)
        self.members = config.es.population
        self.strategy = self._strategy(outer_optimizer(config.es))
        self.params = self.strategy.default_params.replace(T=self.horizon(config), K=config.es.truncation)
        self._unravel = ravel_pytree(phi0)[1]

    def _strategy(self, optimizer):
        es = self.config.es
        return self.strategy_class(population_size=es.population, solution=self.phi0, optimizer=optimizer,
                                   std_schedule=optax.constant_schedule(es.sigma),
                                   fitness_shaping_fn=divergence_penalty_shaping(es.divergence_penalty))

    def _counter(self, segment: int) -> jax.Array:
        return jnp.asarray(segment * self.config.es.truncation % self.params.T, jnp.int32)

    def init(self, key, cache: ProgramCache, iteration: int = 0, spec=None) -> UnrolledState:
        """The state at φ₀ ready for outer iteration `iteration`: its unroll's chains at θ₀ (the template a
        checkpoint of step `iteration` is restored into); spec: the task instead of the distribution's (benches)."""
        index, segment = divmod(iteration, self.k)
        es_state = self.strategy.init(key, self.phi0, self.params).replace(inner_step_counter=self._counter(segment))
        return UnrolledState(es_state, start_unroll(self.config, cache, index, segment, self.members, spec))

    def mean(self, state: UnrolledState):
        """φ, a pytree like φ₀."""
        return self._unravel(state.es.mean)

    def _segment(self, state: UnrolledState, iteration: int, cache: ProgramCache, strategy, progress=None):
        """Ask, run the members through the unroll's next segment, tell: (evosax state, advanced unroll, losses
        (P,), capped fitnesses (P,))."""
        es_state, (unroll, fresh) = state.es, current_unroll(self.config, cache, state.unroll, iteration, self.members)
        if fresh:  # a new chain mid-unroll: fresh perturbations (ask resamples at counter 0)
            zeros = jnp.zeros_like(getattr(es_state, self.accumulator))
            es_state = es_state.replace(inner_step_counter=self._counter(0), **{self.accumulator: zeros})
        keys = outer_keys(self.config.seed, iteration)
        population, es_state = strategy.ask(keys.perturb, es_state, self.params)
        if fresh:
            es_state = es_state.replace(inner_step_counter=self._counter(iteration % self.k))
        losses, unroll = run_members(self.config, cache, unroll, population, keys)
        if progress is not None:
            progress(self.config.es.truncation)
        shaped = strategy.fitness_shaping_fn(population, losses, es_state, self.params)
        es_state, _ = strategy.tell(keys.perturb, population, losses, es_state, self.params)
        return es_state, unroll, losses, shaped

    def step(self, state: UnrolledState, iteration: int, cache: ProgramCache, progress=None) -> OuterStep:
        """Outer iteration `iteration` (one segment) from `state`; the row adds estimator, unroll, segment.
        FloatingPointError if the new meta-parameters are not finite."""
        t0 = time.perf_counter()
        if self.config.es.reset_optimizer:
            state = state._replace(es=state.es.replace(opt_state=self.strategy.optimizer.init(state.es.mean)))
        es_state, unroll, losses, shaped = self._segment(state, iteration, cache, self.strategy, progress)
        inner_s = time.perf_counter() - t0
        mean = np.asarray(es_state.mean)
        check_finite(mean, iteration)
        index, segment = divmod(iteration, self.k)
        row = log_row(iteration, unroll.spec, losses, shaped, mean, inner_s, t0, estimator=self.name, unroll=index,
                      segment=segment)
        new = UnrolledState(es_state, next_unroll(self.config, cache, unroll, self.members))
        return OuterStep(new, unroll.spec, row)

    def gradient(self, state: UnrolledState, iteration: int, cache: ProgramCache):
        """The estimate of iteration `iteration` without an update: (ĝ (a pytree like φ), meta-losses (P,) float64,
        the state with the unroll advanced by one segment and φ and the optimiser state unchanged)."""
        capture = self._strategy(capture_gradient())
        probe = state._replace(es=state.es.replace(opt_state=capture.optimizer.init(state.es.mean)))
        es_state, unroll, losses, _ = self._segment(probe, iteration, cache, capture)
        grad = self._unravel(es_state.opt_state["grad"])
        return grad, np.asarray(losses, np.float64), UnrolledState(es_state.replace(opt_state=state.es.opt_state),
                                                                    unroll)

    def legacy_template(self) -> UnrolledState:
        """The layout of checkpoints written before the unroll was checkpointed (φ and the Adam state as pytrees)."""
        return UnrolledState(LegacyState(self.phi0, outer_optimizer(self.config.es).init(self.phi0)), None)

    def from_legacy(self, old: UnrolledState, key, cache: ProgramCache, iteration: int) -> UnrolledState:
        """The state of a legacy checkpoint: φ and the Adam moments flattened into the evosax state, no unroll (the
        next step starts the unroll's chain from θ₀ at its segment, with fresh perturbations)."""
        phi_def = jax.tree.structure(self.phi0)
        is_phi = lambda t: jax.tree.structure(t) == phi_def  # noqa: E731
        opt = jax.tree.map(lambda t: ravel_pytree(t)[0] if is_phi(t) else t, old.es.opt_state, is_leaf=is_phi)
        es_state = self.strategy.init(key, self.phi0, self.params)
        return UnrolledState(es_state.replace(mean=ravel_pytree(old.es.mean)[0], opt_state=opt), None)
