"""Truncated ES ("truncated"): truncated unrolls, fresh antithetic perturbations ε_j each segment, each member carrying
its own chain; ĝ = Σ_j f_j ε_j / (σ²P). Biased: it ignores φ's effect on the segment's starting state. evosax's
PersistentES with horizon T = es.truncation, whose accumulators then reset after every segment (so its first segment of
an unroll is PES's exactly). See meta_train.estimators.unrolled_es.
"""
from __future__ import annotations

from evosax.algorithms import PersistentES

from meta_train.estimators.unroll import objective_refusal  # noqa: F401  (the estimator protocol)
from meta_train.estimators.unrolled_es import UnrolledES

TRUNCATED = True
"""One outer update per segment of es.truncation updates."""
PATHWISE = False
"""A zeroth-order estimate: gradient-only objectives are refused."""


class Estimator(UnrolledES):
    """Truncated ES (module doc)."""

    name = "truncated"
    strategy_class = PersistentES
    accumulator = "pert_accum"

    def horizon(self, config) -> int:
        """evosax's T = es.truncation: the perturbations reset after every segment."""
        return config.es.truncation
