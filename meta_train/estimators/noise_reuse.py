"""Noise-reuse ES ("noise_reuse"; Li et al., 2023): truncated unrolls in which every member keeps one perturbation
ε_j for the whole unroll (drawn at its first segment), each segment's estimate ĝ = Σ_j f_j ε_j / (σ²P) of that
segment's losses: unbiased for the gradient of the sum of the segment losses, like PES, with lower variance when the
segments are many. evosax's NoiseReuseES with horizon T = inner.num_steps (its `pert` is the unroll's perturbation).
See meta_train.estimators.unrolled_es.
"""
from __future__ import annotations

from evosax.algorithms import NoiseReuseES

from meta_train.estimators.unroll import objective_refusal  # noqa: F401  (the estimator protocol)
from meta_train.estimators.unrolled_es import UnrolledES

TRUNCATED = True
"""One outer update per segment of es.truncation updates."""
PATHWISE = False
"""A zeroth-order estimate: gradient-only objectives are refused."""


class Estimator(UnrolledES):
    """Noise-reuse ES (module doc)."""

    name = "noise_reuse"
    strategy_class = NoiseReuseES
    accumulator = "pert"
