"""The outer gradient estimators, one module each, behind one interface; `ESTIMATORS` is the table name
(`es.estimator`) -> module (docs/meta_training.md § Outer gradient estimators).

Modules: antithetic (full-length antithetic ES, evosax Open_ES), truncated (truncated ES), pes (persistent ES,
evosax PersistentES), noise_reuse (noise-reuse ES, evosax NoiseReuseES), backprop (truncated backprop through the
chain). Shared: common (the outer optimiser chain, the divergence cap, the log row, OuterStep), unroll (the truncated
estimators' unrolls and segment programs), unrolled_es (the evosax strategy behind truncated / pes / noise_reuse).

An estimator module holds
  TRUNCATED: bool — one outer update per segment of es.truncation updates (meta_train.config checks the truncation);
  PATHWISE: bool — whether it takes the pathwise gradient (gradient-only objectives need it);
  objective_refusal(config) -> str | None — why it cannot take the config's objective settings (meta_train.config
  raises one ConfigError with it), None when it can: the objective is scored through the shared meta-loss
  (meta_train.meta_loss: budgets, seeds, the objective's penalty), so an estimator never reads its settings;
  Estimator: a class built as Estimator(config, phi0) (a MetaTrainConfig, φ₀) whose instances follow `Estimator`
  below.
Adding an estimator: its module and one line in `ESTIMATORS`.
"""
from __future__ import annotations

from typing import Any, Protocol

from meta_train.estimators import antithetic, backprop, noise_reuse, pes, truncated
from meta_train.estimators.common import OuterStep

ESTIMATORS = {  # es.estimator -> module, one line each
    "antithetic": antithetic,
    "truncated": truncated,
    "pes": pes,
    "noise_reuse": noise_reuse,
    "backprop": backprop,
}


class Estimator(Protocol):
    """One outer gradient estimator on one run (configuration and φ₀ fixed at construction).

    The state is a pytree holding everything the next outer iteration needs (φ, the optimiser's state, the
    estimator's own memory: perturbation accumulators, chain states mid-unroll); the run directory checkpoints it
    whole, so a resumed run continues bit-identically. Randomness of iteration t comes from outer_keys(seed, t)
    (meta_train.es), never from the state, so `step` is a pure function of (state, iteration).
    """

    name: str

    def init(self, key, cache, iteration: int = 0) -> Any:
        """The state at φ₀ shaped for outer iteration `iteration` (key: PRNGKey(seed); cache: the run's
        ProgramCache). With iteration > 0 it is the template a checkpoint of step `iteration` is restored into."""

    def step(self, state, iteration: int, cache, progress=None) -> OuterStep:
        """Outer iteration `iteration` from `state`: OuterStep(new state, task spec, log row (common.log_row)).
        progress(n) is called after every n inner steps. FloatingPointError if φ becomes non-finite."""

    def mean(self, state) -> Any:
        """φ (a pytree like φ₀) held by `state`."""

    def legacy_template(self) -> Any:
        """None, or the template of the state layout older checkpoints hold (restored when the current layout does
        not fit; then converted by `from_legacy(old, key, cache, iteration)`)."""


def get(name: str):
    """ESTIMATORS[name]; ValueError naming the known estimators otherwise."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r} (known: {', '.join(ESTIMATORS)})")
    return ESTIMATORS[name]


def make(config, phi0) -> Estimator:
    """The estimator config.es.estimator names, on `config` (a MetaTrainConfig) from φ₀ `phi0`."""
    return get(config.es.estimator).Estimator(config, phi0)


__all__ = ["ESTIMATORS", "Estimator", "OuterStep", "get", "make"]
