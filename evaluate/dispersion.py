"""Dispersion of a set of posterior samples, and its ratio to a reference posterior's (SAMPLING.md §3).

A cold sampler's 10-sample BMA can match a reference's predictive while its samples sit in a much smaller
region; these three statistics see that:
- weight_norm: mean over samples of ‖θ_k‖ (all parameters flattened);
- pairwise_distance: mean over pairs k < l of ‖θ_k − θ_l‖ (every pair of the set, across chains);
- predictive_variance: mean over test points (and classes) of the variance over samples of the predictive —
  the class probabilities softmax(f(x; θ_k)) (classification) or the predicted mean loc(x; θ_k) (regression).
A method's ratio to the reference's is flagged outside [FLAG_LOW, FLAG_HIGH].
"""
from __future__ import annotations

import math

import jax
import numpy as np

FLAG_LOW, FLAG_HIGH = 0.5, 2.0
STATS = ("weight_norm", "pairwise_distance", "predictive_variance")


def flat_samples(samples) -> np.ndarray:
    """(K, P) float64: every leaf of a stacked parameter pytree (leaves (K, ...)) flattened and concatenated."""
    leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(samples)]
    k = leaves[0].shape[0]
    return np.concatenate([x.reshape(k, -1) for x in leaves], axis=1)


def mean_pairwise_distance(flat: np.ndarray) -> float:
    """Mean Euclidean distance over the pairs k < l of the rows of `flat` (K, P); nan for K < 2."""
    k = flat.shape[0]
    if k < 2:
        return math.nan
    sq = np.sum(flat**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * flat @ flat.T, 0.0)
    iu = np.triu_indices(k, 1)
    return float(np.mean(np.sqrt(d2[iu])))


def predictive_variance(outputs: np.ndarray, kind: str) -> float:
    """Mean over points (and classes) of the across-sample variance of the predictive.

    outputs: (K, n, C) log-probabilities (classification) or (K, n, 2) [loc, scale] (regression)."""
    out = np.asarray(outputs, np.float64)
    values = np.exp(out) if kind == "classification" else out[..., 0]
    return float(np.mean(np.var(values, axis=0)))


def dispersion_stats(samples, outputs: np.ndarray, kind: str) -> dict:
    """{weight_norm, pairwise_distance, predictive_variance} of K samples (see the module docstring)."""
    flat = flat_samples(samples)
    return {"weight_norm": float(np.mean(np.linalg.norm(flat, axis=1))),
            "pairwise_distance": mean_pairwise_distance(flat),
            "predictive_variance": predictive_variance(outputs, kind)}


def dispersion_ratios(stats: dict, reference: dict) -> dict:
    """{stat: method ÷ reference} for every statistic both have (None where undefined), and "flagged": the
    statistics whose ratio lies outside [FLAG_LOW, FLAG_HIGH]."""
    ratios = {}
    for name in STATS:
        a, b = stats.get(name), reference.get(name)
        ok = a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b > 0
        ratios[name] = a / b if ok else None
    ratios["flagged"] = [n for n in STATS if ratios[n] is not None and not FLAG_LOW <= ratios[n] <= FLAG_HIGH]
    return ratios
