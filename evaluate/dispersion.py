"""Dispersion of a set of posterior samples, and its ratio to a reference posterior's (docs/sampling.md, Measuring whether a step samples).

A cold sampler's 10-sample BMA can match a reference's predictive while its samples sit in a much smaller
region; these statistics see that:
- weight_norm: mean over samples of ‖θ_k‖ (all parameters flattened);
- pairwise_distance: mean over pairs k < l of ‖θ_k − θ_l‖ (every pair of the set, across chains), over a fixed
  random subset of at most MAX_PAIRWISE_DRAWS samples (numpy default_rng(0), sorted) when there are more;
- pairwise_distance_within_chain: the same over the pairs of samples of one chain (all chains' pairs pooled,
  each chain's draws subsampled to at most MAX_PAIRWISE_DRAWS the same way); None when no chain holds two;
- predictive_variance: mean over test points (and classes) of the variance over samples of the predictive —
  the class probabilities softmax(f(x; θ_k)) (classification) or the predicted mean loc(x; θ_k) (regression).

A method's ratio to the reference's is flagged outside [FLAG_LOW, FLAG_HIGH] (`dispersion_entry`).  The pairwise
ratio that is flagged compares like with like: within-chain to within-chain for a method with at least two samples
per chain (one chain cannot be asked to span the several modes a multi-chain reference visits), pooled to pooled
for an ensemble (one sample per member).
"""
from __future__ import annotations

import math

import jax
import numpy as np

from tasks.likelihoods import likelihood_of

__all__ = ["FLAG_HIGH", "FLAG_LOW", "MAX_PAIRWISE_DRAWS", "STATS", "dispersion_entry", "dispersion_ratios",
           "dispersion_stats", "flat_samples", "mean_pairwise_distance", "predictive_variance"]

FLAG_LOW, FLAG_HIGH = 0.5, 2.0
STATS = ("weight_norm", "pairwise_distance", "pairwise_distance_within_chain", "predictive_variance")
MAX_PAIRWISE_DRAWS = 200
NOTE = ("ratios = method ÷ reference; flagged: statistics whose ratio lies outside [0.5, 2] among weight_norm, "
        "predictive_variance and the pairwise distance named in pairwise_compared (within-chain for ≥ 2 samples per "
        "chain, else pooled); definitions in evaluate.dispersion")


def flat_samples(samples) -> np.ndarray:
    """(K, P) float64: every leaf of a stacked parameter pytree (leaves (K, ...)) flattened and concatenated."""
    leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(samples)]
    k = leaves[0].shape[0]
    return np.concatenate([x.reshape(k, -1) for x in leaves], axis=1)


def _subset(k: int, max_draws: int = MAX_PAIRWISE_DRAWS) -> np.ndarray:
    """Indices of the rows used for pairwise distances: all when k ≤ max_draws, else a fixed random subset."""
    if k <= max_draws:
        return np.arange(k)
    return np.sort(np.random.default_rng(0).choice(k, max_draws, replace=False))


def _pair_distances(flat: np.ndarray) -> np.ndarray:
    """Euclidean distances of the pairs k < l of the rows of `flat` (K, P)."""
    sq = np.sum(flat**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * flat @ flat.T, 0.0)
    return np.sqrt(d2[np.triu_indices(flat.shape[0], 1)])


def mean_pairwise_distance(flat: np.ndarray, max_draws: int = MAX_PAIRWISE_DRAWS) -> float:
    """Mean Euclidean distance over the pairs k < l of the rows of `flat` (K, P) (a fixed subset of at most
    `max_draws` rows, see the module docstring); nan for K < 2."""
    if flat.shape[0] < 2:
        return math.nan
    return float(np.mean(_pair_distances(flat[_subset(flat.shape[0], max_draws)])))


def _within_chain(flat: np.ndarray, chain_ids) -> float | None:
    if chain_ids is None:
        return None
    ids = np.asarray(chain_ids)
    dists = [_pair_distances(flat[np.flatnonzero(ids == c)][_subset(int(np.sum(ids == c)))])
             for c in np.unique(ids) if np.sum(ids == c) >= 2]
    return float(np.mean(np.concatenate(dists))) if dists else None


def predictive_variance(outputs: np.ndarray, kind: str) -> float:
    """Mean over points (and classes) of the across-sample variance of the predictive's point prediction
    (`point_prediction` of the likelihood of `kind`: class probabilities, or the predicted mean), float64, two
    passes over the samples, so K × n × C float64 copies are never made.

    Args:
      outputs: (K, n, C) log-probabilities (classification) or (K, n, 2) [loc, scale] (regression).
      kind: the task's likelihood kind ("classification" or "regression").

    Returns:
      The mean variance (probability² or standardised target units²).
    """
    out = np.asarray(outputs)
    value = likelihood_of(kind).point_prediction
    mean = sum(value(o) for o in out) / out.shape[0]
    return float(np.mean(sum((value(o) - mean) ** 2 for o in out) / out.shape[0]))


def dispersion_stats(samples, outputs: np.ndarray, kind: str, chain_ids=None) -> dict:
    """{weight_norm, pairwise_distance, pairwise_distance_within_chain, predictive_variance, num_samples} of K
    samples (see the module docstring); chain_ids (K,): the chain of each sample (None: within-chain is None)."""
    flat = flat_samples(samples)
    pooled = mean_pairwise_distance(flat)
    return {"weight_norm": float(np.mean(np.linalg.norm(flat, axis=1))),
            "pairwise_distance": pooled if math.isfinite(pooled) else None,
            "pairwise_distance_within_chain": _within_chain(flat, chain_ids),
            "predictive_variance": predictive_variance(outputs, kind), "num_samples": int(flat.shape[0])}


def dispersion_ratios(stats: dict, reference: dict) -> dict:
    """{stat: method ÷ reference} for every statistic of STATS (None where either is missing, not finite, or the
    reference's is not positive), and "flagged": the statistics whose ratio lies outside [FLAG_LOW, FLAG_HIGH]."""
    ratios = {}
    for name in STATS:
        a, b = stats.get(name), reference.get(name)
        ok = a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b > 0
        ratios[name] = a / b if ok else None
    ratios["flagged"] = [n for n in STATS if ratios[n] is not None and not FLAG_LOW <= ratios[n] <= FLAG_HIGH]
    return ratios


def dispersion_entry(task, res, reference: dict | None) -> dict | None:
    """The dispersion block of one method's report entry: its statistics (`dispersion_stats` of res.samples,
    res.outputs, res.chain_ids), the reference's (reference["dispersion"], from its metadata), the ratios and
    "flagged" (see NOTE: weight_norm, predictive_variance and the pairwise distance of `pairwise_compared`).

    res: a MethodResult (samples, outputs on the reference's split — the test split — and chain_ids); reference:
    an entry of `evaluate.reference.load_references`.  None without a reference, without reference dispersion
    statistics (a text file, or a reference written before they were stored) or without a finite sample."""
    ref = (reference or {}).get("dispersion")
    if not ref or res.samples is None or res.num_finite == 0:
        return None
    stats = dispersion_stats(res.samples, res.outputs, task.kind, res.chain_ids)
    ratios = dispersion_ratios(stats, ref)
    per_chain = np.bincount(np.unique(np.asarray(res.chain_ids), return_inverse=True)[1]) \
        if res.chain_ids is not None else np.ones(res.num_finite, int)
    compared = "pairwise_distance_within_chain" if per_chain.max() >= 2 else "pairwise_distance"
    checked = ("weight_norm", compared, "predictive_variance")
    return {"method": stats, "reference": {k: ref.get(k) for k in (*STATS, "num_samples")},
            "ratios": {k: ratios[k] for k in STATS}, "pairwise_compared": compared,
            "flagged": [k for k in checked if k in ratios["flagged"]], "flag_range": [FLAG_LOW, FLAG_HIGH],
            "note": NOTE}
