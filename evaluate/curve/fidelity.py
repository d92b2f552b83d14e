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
  the other S − K draws — TV to their BMA, energy distance to them — over FLOOR_RESAMPLES draws of the K indices
  (numpy default_rng(0)): the median and the 10 and 90 % quantiles. (Against all S draws, the K would sit inside the
  BMA they are compared with: the K-mean's deviation from the S-mean has variance ∝ 1/K − 1/S, a method's ∝ 1/K +
  1/S, so that floor reads low by sqrt((S − K)/(S + K)) — measured 2.6 % with S = 400, 11 % with S = 100 — and
  exact draws would miss 1.1 × it half the time; against the rest, ∝ 1/K + 1/(S − K), within 0.5 % of a method's.)
- The K-draw spread of the predictive variance (floors "predictive_variance"): over the same resamples, the
  predictive variance of K exact draws (evaluate.dispersion: the 1/K variance over draws) ÷ that of all S draws.
  K exact draws do not read 1: the 1/K variance's mean is (K − 1)/K of the posterior's (0.9 at K = 10), and where
  the predictive varies along few directions (a 10-parameter linear model) ten draws spread it wide — measured with
  K = 10, exact draws lie in [0.8, 1.25] in 69 % of resamples on power plant, 76 % on breast cancer, 98 % on digits.
  So a curve reads a run's predictive-variance ratio relative to that spread (`dispersion_band`): divided by the
  exact draws' median ratio, in band where it lies in [min(0.8, q05), max(1.25, q95)] of the exact draws' ratios so
  divided. The weight-norm and pairwise-distance ratios are means, unbiased for K draws (their band is
  DISPERSION_BAND; a reference keeps no weights to resample them).
- Gradients to reach 1.1 × the floor (`gradients_to_floor`): the first budget whose metric is ≤ 1.1 × the floor's
  median with every dispersion ratio in band (`dispersion_band`); the gradient count is interpolated linearly in log G
  between that budget and the one before it where the metric crosses the threshold there (else that budget itself:
  the first budget, or one whose predecessor was below the threshold but out of band); None when no budget qualifies
  ("not reached").
"""
from __future__ import annotations

import math

import numpy as np

from evaluate.dispersion import predictive_variance

__all__ = ["DISPERSION_BAND", "FLOOR_FACTOR", "FLOOR_RESAMPLES", "dispersion_band", "energy_distance", "floors",
           "gradients_to_floor", "pairwise_mean", "predictive_variance_spread", "to_floor"]

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


def _resamples(s: int, k: int, resamples: int):
    """The K-index draws of the floors (numpy default_rng(0)): the same sequence for every statistic."""
    rng = np.random.default_rng(0)
    return [rng.choice(s, k, replace=False) for _ in range(resamples)]


def _summary(v, tails=(0.1, 0.9)) -> dict:
    return {"median": float(np.median(v)), **{f"q{round(100 * q):02d}": float(np.quantile(v, q)) for q in tails}}


def predictive_variance_spread(likelihood, ref_outputs: np.ndarray, k: int, resamples: int = FLOOR_RESAMPLES,
                               subsets: list | None = None) -> dict:
    """{"median", "q05", "q10", "q90", "q95"} of the predictive variance of K exact draws ÷ that of all S draws (module
    docstring), over the floors' resamples (`subsets`: those index sets when already drawn)."""
    full = max(predictive_variance(ref_outputs, likelihood.kind), 1e-300)
    subsets = _resamples(ref_outputs.shape[0], k, resamples) if subsets is None else subsets
    return _summary([predictive_variance(ref_outputs[idx], likelihood.kind) / full for idx in subsets],
                    (0.05, 0.1, 0.9, 0.95))


def floors(likelihood, ref_outputs: np.ndarray, k: int, resamples: int = FLOOR_RESAMPLES) -> dict:
    """{"tv": {"median", "q10", "q90"}, "energy": {...}, "predictive_variance": {"median", "q05", "q95", ...}, "k",
    "resamples", "draws"}: the K-draw floors and the K-draw spread of the predictive variance (module docstring) of a
    reference's per-draw outputs (S, n, ·)."""
    s = ref_outputs.shape[0]
    if k >= s:
        raise ValueError(f"the K-draw floor needs more reference draws than K = {k} (the reference keeps {s})")
    vectors = likelihood.draw_vectors(ref_outputs)
    subsets = _resamples(s, k, resamples)
    tv = likelihood.split_total_variations(ref_outputs, subsets)  # each against the rest's BMA
    energy = [energy_distance(vectors[idx], vectors[np.setdiff1d(np.arange(s), idx)]) for idx in subsets]
    return {"tv": _summary(tv), "energy": _summary(energy),
            "predictive_variance": predictive_variance_spread(likelihood, ref_outputs, k, resamples, subsets),
            "k": int(k), "resamples": int(resamples), "draws": int(s)}


def dispersion_band(floors: dict | None = None) -> dict[str, tuple[float, float, float]]:
    """{ratio name: (divisor, low, high)}: a ratio r is in band where low ≤ r / divisor ≤ high (module docstring).
    "predictive_variance" from the floors' K-draw spread (DISPERSION_BAND without one, as in curves run before it);
    "default" for every other ratio: (1, DISPERSION_BAND)."""
    lo, hi = DISPERSION_BAND
    out = {"default": (1.0, lo, hi)}
    spread = (floors or {}).get("predictive_variance")
    if spread:
        m = spread["median"]
        out["predictive_variance"] = (m, min(lo, spread["q05"] / m), max(hi, spread["q95"] / m))
    return out


def _in_band(ratios: dict | None, band: dict) -> bool:
    def ok(name, r):
        div, lo, hi = band.get(name, band["default"])
        return r is not None and lo <= r / div <= hi

    return bool(ratios) and all(ok(name, r) for name, r in ratios.items())


def gradients_to_floor(points: list[dict], metric: str, floor: float, factor: float = FLOOR_FACTOR,
                       band: dict | None = None) -> float | None:
    """Gradients at which a curve first reaches factor × floor (module docstring).

    Args:
      points: the curve's points in increasing budget, each {"gradients": G, metric: value or None, "ratios":
        {name: dispersion ratio} or None}.
      metric: the key of the metric ("tv" or "energy").
      floor: the floor's median.
      factor: the threshold is factor × floor.
      band: `dispersion_band` of the task's floors (None: DISPERSION_BAND for every ratio).
    Returns:
      The interpolated gradient count (float), or None when no point qualifies.
    """
    target = factor * floor
    band = band or dispersion_band()
    previous = None
    for point in points:
        value = point.get(metric)
        ok = value is not None and math.isfinite(value) and value <= target and _in_band(point.get("ratios"), band)
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


def _reached(values: list) -> dict:
    reached = [v for v in values if v is not None]
    mean = float(np.mean(reached)) if reached else None
    se = float(np.std(reached, ddof=1) / math.sqrt(len(reached))) if len(reached) > 1 else None
    return {"per_seed": values, "reached": len(reached), "seeds": len(values), "mean": mean, "se": se}


def to_floor(seeds: dict, floors: dict) -> dict:
    """{"tv": summary, "energy": summary} of one curve choice: per seed (in `seeds`' order: {seed: [points]}) the
    gradients to floor (`gradients_to_floor`, the band from these floors) and their mean ± s.e. over the seeds that
    reach it ("per_seed", "reached", "seeds", "mean", "se")."""
    band = dispersion_band(floors)
    return {metric: _reached([gradients_to_floor(points, metric, floors[metric]["median"], band=band)
                              for points in seeds.values()]) for metric in ("tv", "energy")}
