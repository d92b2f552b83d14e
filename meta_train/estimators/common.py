"""What every outer gradient estimator shares: the outer optimiser chain, the divergence cap, the log row, the
finiteness check and the result of one outer step (`OuterStep`).

- `outer_optimizer(es)`: global-norm clipping at es.clip_norm, then Adam(es.lr, β = (0.9, 0.999), eps 10⁻⁸) — the
  optimiser of every estimator (evosax's strategies get it as their `optimizer`; backprop applies it itself).
- `cap_fitness` / `divergence_penalty_shaping`: a member whose meta-loss is not finite gets es.divergence_penalty,
  every other member min(loss, penalty); as an evosax fitness-shaping function composed with identity shaping.
- `capture_gradient()`: an optax "optimiser" that leaves φ unchanged and keeps the gradient in its state, so that an
  evosax strategy's own estimate ĝ can be read without an update (the estimators' `gradient`).
- `log_row`: the JSON log row of one outer iteration (docs/meta_training.md § The run directory).
"""
from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from evosax.core.fitness_shaping import identity_fitness_shaping_fn


class OuterStep(NamedTuple):
    """The result of one outer iteration: the estimator's new state, the task it ran on (a TaskSpec or
    RegressionSpec) and its log row."""

    es_state: Any
    spec: Any
    row: dict


def outer_optimizer(es) -> optax.GradientTransformation:
    """The outer optimiser of every estimator, from an ESConfig: clip_by_global_norm(es.clip_norm), then
    Adam(es.lr, b1 0.9, b2 0.999, eps 1e-8); its state is kept across iterations unless es.reset_optimizer."""
    return optax.chain(optax.clip_by_global_norm(es.clip_norm), optax.adam(es.lr, b1=0.9, b2=0.999, eps=1e-8))


def cap_fitness(fitness, penalty: float):
    """The divergence cap: `penalty` where `fitness` (meta-losses, lower is better; any shape) is not finite, else
    min(fitness, penalty) (no member may look worse than a diverged one). Same shape and dtype as `fitness`."""
    return jnp.where(jnp.isfinite(fitness), jnp.minimum(fitness, penalty), penalty)


def divergence_penalty_shaping(penalty: float, shaping_fn: Callable = identity_fitness_shaping_fn) -> Callable:
    """An evosax fitness-shaping function (population, fitness (P,), state, params) -> shaped (P,): `cap_fitness`
    with `penalty`, then `shaping_fn` (identity by default: centred ranks would make one antithetic pair a sign
    estimator)."""

    def shaping(population, fitness, state, params):
        return shaping_fn(population, cap_fitness(fitness, penalty), state, params)

    return shaping


def capture_gradient() -> optax.GradientTransformation:
    """An optax transformation whose update is zero and whose state is {"grad": the last gradient}: an evosax
    strategy built with it leaves its mean unchanged by `tell` and keeps its estimate ĝ (flat (D,)) in
    `state.opt_state["grad"]`."""

    def init(params):
        return {"grad": jnp.zeros_like(params)}

    def update(grads, state, params=None):
        return jnp.zeros_like(grads), {"grad": grads}

    return optax.GradientTransformation(init, update)


def flat_mean(tree) -> np.ndarray:
    """The meta-parameters as one flat numpy vector (leaves in tree order, the order of evosax's ravel)."""
    return np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(tree)])


def check_finite(mean: np.ndarray, iteration: int) -> None:
    """FloatingPointError if the flat meta-parameters `mean` are not all finite after outer iteration `iteration`."""
    if not np.all(np.isfinite(mean)):
        raise FloatingPointError(f"meta-parameters became non-finite at iteration {iteration}")


def _floats(values) -> list:
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def log_row(iteration: int, spec, losses, fitness, mean: np.ndarray, inner_s: float, t0: float, pairs: bool = True,
            **extra) -> dict:
    """The JSON log row of one outer iteration.

    Args:
      iteration: the outer iteration.
      spec: its task (`spec.name` is logged).
      losses: the raw meta-losses (nats), (P,) for ES members (the + members first), (1,) for one chain.
      fitness: what the estimate used, (P,) or (1,): the capped fitnesses for ES, the loss for backprop.
      mean: the new meta-parameters, flat (D,).
      inner_s: seconds of the inner chains and meta-losses; t0: perf_counter at the iteration's start.
      pairs: whether `losses` are antithetic pairs (split into loss_plus / loss_minus; else both empty).
      extra: further keys (e.g. estimator, unroll, segment, t_kin).
    Returns:
      {iteration, task, meta_loss (mean of the finite losses, None if none), loss_plus, loss_minus, fitness (None
      where not finite), divergent_members, meta_param_norm, inner_seconds, seconds, **extra}.
    """
    raw = np.asarray(losses, dtype=np.float64)
    finite = np.isfinite(raw)
    half = raw.shape[0] // 2 if pairs else 0
    return {
        "iteration": iteration,
        "task": spec.name,
        "meta_loss": float(np.mean(raw[finite])) if finite.any() else None,
        "loss_plus": _floats(raw[:half]),
        "loss_minus": _floats(raw[half:2 * half]),
        "fitness": _floats(fitness),
        "divergent_members": int((~finite).sum()),
        "meta_param_norm": float(np.linalg.norm(mean)),
        "inner_seconds": round(inner_s, 4),
        "seconds": round(time.perf_counter() - t0, 4),
        **extra,
    }
