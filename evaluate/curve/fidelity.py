"""Fidelity of K draws to a reference's draws, the K-draw floor, and the gradients at which a curve reaches it.

- TV: the likelihood's `bma_total_variation` between the BMA predictive of the K draws and the reference's (all its
  kept draws), mean over test points.
- Energy distance (sample level; under-dispersion cannot win it): between the K draws' test-predictive vectors X
  (the likelihood's `draw_vectors`) and the reference draws' Y, the V-statistic
      E² = 2·mean_{i,j}‖x_i − y_j‖ − mean_{i,i'}‖x_i − x_i'‖ − mean_{j,j'}‖y_j − y_j'‖
  (every pair, i = i' included): ≥ 0, and for K exact draws ≈ mean‖y − y'‖ / K > 0, so the floor is positive and a
  method is held to what K exact draws achieve. K copies of the BMA predictive score E² ≈ 2·mean‖ȳ − y‖ −
  mean‖y − y'‖, larger than that floor where the reference has spread: a collapsed sample set pays.
- The K-draw floor of each: K draws taken without replacement from the reference's own draws (chains pooled) against
  the reference — TV to the BMA of all its draws; energy distance to the other S − K draws — over FLOOR_RESAMPLES
  draws of the K indices (numpy default_rng(0)): the median and the 10 and 90 % quantiles.
- Gradients to reach 1.1 × the floor (`gradients_to_floor`): the first budget whose metric is ≤ 1.1 × the floor's
  median with every dispersion ratio in [DISPERSION_BAND]; the gradient count is interpolated linearly in log G
  between that budget and the one before it where the metric crosses the threshold there (else that budget itself:
  the first budget, or one whose predecessor was below the threshold but out of band); None when no budget qualifies
  ("not reached").
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["DISPERSION_BAND", "FLOOR_FACTOR", "FLOOR_RESAMPLES", "energy_distance", "floors",
           "gradients_to_floor", "pairwise_mean"]

FLOOR_RESAMPLES = 200
FLOOR_FACTOR = 1.1
DISPERSION_BAND = (0.8, 1.25)


def pairwise_mean(x: np.ndarray, y: np.ndarray | None = None) -> float:
    """mean‖x_i − y_j‖ over every pair (i, j) of rows of x and y (y None: of x with itself, i = j included)."""
    y = x if y is None else y
    sq = np.sum(x * x, 1)[:, None] + np.sum(y * y, 1)[None, :] - 2.0 * x @ y.T
    return float(np.sqrt(np.maximum(sq, 0.0)).mean())


def energy_distance(x: np.ndarray, y: np.ndarray, yy: float | None = None) -> float:
    """E² of the module docstring between row sets x (K, D) and y (S, D); yy: y's within-set mean if known."""
    yy = pairwise_mean(y) if yy is None else yy
    return 2.0 * pairwise_mean(x, y) - pairwise_mean(x) - yy


def floors(likelihood, ref_outputs: np.ndarray, k: int, resamples: int = FLOOR_RESAMPLES) -> dict:
    """{"tv": {"median", "q10", "q90"}, "energy": {...}, "k", "resamples", "draws"}: the K-draw floors (module
    docstring) of a reference's per-draw outputs (S, n, ·)."""
    s = ref_outputs.shape[0]
    if k >= s:
        raise ValueError(f"the K-draw floor needs more reference draws than K = {k} (the reference keeps {s})")
    vectors = likelihood.draw_vectors(ref_outputs)
    rng = np.random.default_rng(0)
    tv, energy = [], []
    for _ in range(resamples):
        idx = rng.choice(s, k, replace=False)
        rest = np.setdiff1d(np.arange(s), idx)
        tv.append(likelihood.bma_total_variation(ref_outputs[idx], ref_outputs))
        energy.append(energy_distance(vectors[idx], vectors[rest]))

    def summary(v):
        return {"median": float(np.median(v)), "q10": float(np.quantile(v, 0.1)), "q90": float(np.quantile(v, 0.9))}

    return {"tv": summary(tv), "energy": summary(energy), "k": int(k), "resamples": int(resamples), "draws": int(s)}


def _in_band(ratios: dict | None) -> bool:
    lo, hi = DISPERSION_BAND
    return bool(ratios) and all(r is not None and lo <= r <= hi for r in ratios.values())


def gradients_to_floor(points: list[dict], metric: str, floor: float, factor: float = FLOOR_FACTOR) -> float | None:
    """Gradients at which a curve first reaches factor × floor (module docstring).

    Args:
      points: the curve's points in increasing budget, each {"gradients": G, metric: value or None, "ratios":
        {name: dispersion ratio} or None}.
      metric: the key of the metric ("tv" or "energy").
      floor: the floor's median.
      factor: the threshold is factor × floor.
    Returns:
      The interpolated gradient count (float), or None when no point qualifies.
    """
    target = factor * floor
    previous = None
    for point in points:
        value = point.get(metric)
        ok = value is not None and math.isfinite(value) and value <= target and _in_band(point.get("ratios"))
        if ok:
            if previous is None or previous.get(metric) is None or not math.isfinite(previous[metric]) \
                    or previous[metric] <= target:  # no crossing of the threshold to interpolate
                return float(point["gradients"])
            g0, g1 = math.log(previous["gradients"]), math.log(point["gradients"])
            v0, v1 = previous[metric], value
            t = (v0 - target) / (v0 - v1)  # v0 > target ≥ v1
            return float(math.exp(g0 + t * (g1 - g0)))
        previous = point
    return None
