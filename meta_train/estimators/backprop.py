"""Truncated backpropagation through the chain ("backprop"): one chain per unroll (objective.chains chains for a
cross-chain objective), one outer update per segment; ĝ = the pathwise gradient of the segment's meta-loss through the
segment's updates (jax.grad through a lax.scan of the kernel) from the carried state held constant (stop_gradient at
segment boundaries); the chain continues with φ. Works with every learned sampler whose step is differentiable. A
non-finite gradient or loss becomes ĝ = 0. Then the shared outer optimiser (docs/meta_training.md § Outer gradient
estimators).

State (`BackpropState`): the optimiser's (φ, Adam state) as pytrees — the layout of earlier checkpoints — and the
Unroll (meta_train.estimators.unroll); a checkpoint without the unroll resumes with a fresh chain from the unroll's θ₀
at the current segment.
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from meta_train.es import ProgramCache, outer_keys
from meta_train.estimators.common import OuterStep, check_finite, flat_mean, log_row, outer_optimizer
from meta_train.estimators.unroll import (Unroll, current_unroll, next_unroll, run_backprop, segments_per_unroll,
                                          start_unroll)
from meta_train.estimators.unroll import objective_refusal as unroll_refusal
from meta_train.objectives import OBJECTIVES

TRUNCATED = True
"""One outer update per segment of es.truncation updates."""
PATHWISE = True
"""The pathwise gradient: gradient-only objectives are allowed."""


def objective_refusal(config) -> str | None:
    """Why truncated backprop cannot take config's objective settings, or None: a truncated estimator's reason
    (unroll.objective_refusal), or the objective's host-side penalty, which has no pathwise gradient."""
    return unroll_refusal(config) or OBJECTIVES[config.objective.kind].pathwise_refusal(config.objective)


class OptState(NamedTuple):
    """φ and the outer optimiser's state, as pytrees."""

    mean: Any
    opt_state: Any


class BackpropState(NamedTuple):
    """outer: φ and the Adam state; unroll: the current Unroll (None: restored from a checkpoint without it)."""

    outer: OptState
    unroll: Unroll | None


class Estimator:
    """Truncated backprop (module doc; the meta_train.estimators protocol)."""

    name = "backprop"

    def __init__(self, config, phi0):
        self.config, self.phi0 = config, phi0
        self.k = segments_per_unroll(config)
        self.optimizer = outer_optimizer(config.es)

    def init(self, key, cache: ProgramCache, iteration: int = 0, spec=None) -> BackpropState:
        """The state at φ₀ ready for outer iteration `iteration` (its unroll's chain at θ₀); spec: the task instead
        of the distribution's (benches)."""
        index, segment = divmod(iteration, self.k)
        return BackpropState(OptState(self.phi0, self.optimizer.init(self.phi0)),
                             start_unroll(self.config, cache, index, segment, None, spec))

    def mean(self, state: BackpropState):
        """φ."""
        return state.outer.mean

    def gradient(self, state: BackpropState, iteration: int, cache: ProgramCache):
        """The estimate of iteration `iteration` without an update: (ĝ (a pytree like φ; 0 if not finite), the
        segment's meta-loss (1,) float64, the state with the unroll advanced by one segment)."""
        unroll, _ = current_unroll(self.config, cache, state.unroll, iteration)
        loss, grad, unroll = run_backprop(self.config, cache, unroll, state.outer.mean,
                                          outer_keys(self.config.seed, iteration))
        ok = bool(jnp.isfinite(loss)) and all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grad))
        grad = grad if ok else jax.tree.map(jnp.zeros_like, grad)
        return grad, np.asarray([loss], np.float64), BackpropState(state.outer, unroll)

    def step(self, state: BackpropState, iteration: int, cache: ProgramCache, progress=None) -> OuterStep:
        """Outer iteration `iteration` (one segment) from `state`; the row adds estimator, unroll, segment.
        FloatingPointError if the new meta-parameters are not finite."""
        t0 = time.perf_counter()
        mean, opt_state = state.outer
        if self.config.es.reset_optimizer:
            opt_state = self.optimizer.init(mean)
        grad, losses, (_, unroll) = self.gradient(state, iteration, cache)
        if progress is not None:
            progress(self.config.es.truncation)
        inner_s = time.perf_counter() - t0
        updates, opt_state = self.optimizer.update(grad, opt_state, mean)
        mean = optax.apply_updates(mean, updates)
        flat = flat_mean(mean)
        check_finite(flat, iteration)
        index, segment = divmod(iteration, self.k)
        row = log_row(iteration, unroll.spec, losses, losses, flat, inner_s, t0, pairs=False, estimator=self.name,
                      unroll=index, segment=segment)
        new = BackpropState(OptState(mean, opt_state), next_unroll(self.config, cache, unroll))
        return OuterStep(new, unroll.spec, row)

    def legacy_template(self) -> BackpropState:
        """The layout of checkpoints written before the unroll was checkpointed: (φ, Adam state), no unroll."""
        return BackpropState(OptState(self.phi0, self.optimizer.init(self.phi0)), None)

    def from_legacy(self, old: BackpropState, key, cache: ProgramCache, iteration: int) -> BackpropState:
        """A legacy checkpoint's state as it is (the next step starts the unroll's chain from θ₀ at its segment)."""
        return old
