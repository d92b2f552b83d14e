"""Persistent ES ("pes"; Vicol, Metz & Sohl-Dickstein, 2021): truncated unrolls whose estimate uses the perturbations
accumulated over the unroll's segments so far, ξ_j = Σ_{s ≤ t} ε_j,s, in place of this segment's ε_j: unbiased for the
gradient of the sum of the segment losses (of the Gaussian-smoothed φ). evosax's PersistentES with horizon T =
inner.num_steps (its `pert_accum` are the accumulators; they reset with the unroll). See
meta_train.estimators.unrolled_es.
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
    """PES (module doc)."""

    name = "pes"
    strategy_class = PersistentES
    accumulator = "pert_accum"
