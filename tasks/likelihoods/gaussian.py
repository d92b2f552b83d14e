"""Gaussian location/scale regression likelihood: the training NLL and the predictive-mixture metrics of
docs/evaluation.md, Regression (float64 numpy; all on the standardised target scale).

Shapes: S pooled posterior samples (chains × draws, or ensemble members), n test points; mu / sigma (S, n).
The predictive scale σ = exp(raw log-scale) is clipped to [SCALE_MIN, SCALE_MAX] (MILE), in the model and again
before every metric.
"""
from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BAND_NOTE", "CALIBRATION_ESTIMATOR", "CALIBRATION_LEVELS", "GaussianRegression", "HALF_LOG_2PI",
           "SCALE_MAX", "SCALE_MIN", "calibration_error", "gaussian_nll", "loc_scale", "mixture_cdf", "mixture_interval",
           "regression_curve", "regression_lppd", "regression_metrics", "regression_rmse"]

SCALE_MIN, SCALE_MAX = 1e-6, 1e6
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def loc_scale(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(B, 2) raw outputs → (loc (B,), scale (B,)), scale = exp(raw log-scale) clipped to [SCALE_MIN, SCALE_MAX]."""
    log_scale = jnp.clip(out[:, 1], math.log(SCALE_MIN), math.log(SCALE_MAX))
    return out[:, 0], jnp.exp(log_scale)


def gaussian_nll(y, loc, scale):
    """Elementwise −log N(y | loc, scale²) = ½·log 2π + log scale + ½·((y − loc)/scale)² in nats (broadcasting).

    jax inputs (or tracers) give a jax array in their dtype (the training loss); numpy inputs a numpy array.
    """
    xp = jnp if any(isinstance(a, jax.Array) for a in (y, loc, scale)) else np
    return HALF_LOG_2PI + xp.log(scale) + 0.5 * xp.square((y - loc) / scale)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _clip_sigma(sigma) -> np.ndarray:
    return np.clip(_f64(sigma), SCALE_MIN, SCALE_MAX)


def regression_lppd(y, mu, sigma) -> float:
    """LPPD = (1/n) Σ_i log[(1/S) Σ_s N(y_i | μ_s(x_i), σ_s(x_i)²)]; y (n,), mu/sigma (S, n) pooled over
    chains and samples (σ clipped to [SCALE_MIN, SCALE_MAX]).  NLL = −LPPD."""
    y, mu, sigma = _f64(y), _f64(mu), _clip_sigma(sigma)
    lp = -gaussian_nll(y[None], mu, sigma)
    mx = lp.max(0)
    return float(np.mean(mx + np.log(np.mean(np.exp(lp - mx), axis=0))))


def regression_rmse(y, mu) -> float:
    """RMSE of the mixture mean ŷ_i = mean_s μ_s(x_i); y (n,), mu (S, n)."""
    y, mu = _f64(y), _f64(mu)
    return float(np.sqrt(np.mean((y - mu.mean(0)) ** 2)))


CALIBRATION_LEVELS = (0.5, 0.75, 0.9, 0.95)
"""Nominal levels 1 − α_l of the calibration error (docs/evaluation.md, Regression)."""
CALIBRATION_ESTIMATOR = ("exact: coverage of the central intervals [q_{α/2}, q_{1−α/2}] of the pooled Gaussian "
                         "predictive mixture, from the mixture CDF at each test target (PIT), levels 0.5/0.75/0.9/0.95")


def mixture_cdf(y, mu, sigma) -> np.ndarray:
    """F_i(y_i) = (1/S) Σ_s Φ((y_i − μ_s(x_i)) / σ_s(x_i)): the pooled mixture's CDF at each target (the PIT value);
    y (n,), mu/sigma (S, n) (σ clipped to [SCALE_MIN, SCALE_MAX]); float64 (n,)."""
    from scipy.special import ndtr

    y, mu, sigma = _f64(y), _f64(mu), _clip_sigma(sigma)
    return np.mean(ndtr((y[None] - mu) / sigma), axis=0)


def calibration_error(y, mu, sigma, key: int = 0, num_draws: int | None = None,
                      levels: Sequence[float] = CALIBRATION_LEVELS) -> tuple[float, np.ndarray]:
    """Kuleshov-style calibration error of the pooled predictive mixture: coverage ĉ_l of the central interval
    [q_{α/2}, q_{1−α/2}] per test point, CalE = sqrt(mean_l (ĉ_l − (1 − α_l))²).  Returns (CalE, coverages (L,));
    `levels` are 1 − α_l.

    num_draws None (default; every report): exact.  The mixture CDF F is continuous and strictly increasing, so
    y_i lies inside [q_{α/2}, q_{1−α/2}] iff α/2 ≤ F(y_i) ≤ 1 − α/2 (`mixture_cdf`): no draws, no Monte-Carlo floor.
    num_draws = m: docs/evaluation.md, Regression's Monte-Carlo form — m draws y ~ N(μ_s, σ_s²) per sample s, empirical quantiles of the
    pooled S·m draws (`key` seeds numpy's default_rng); m = 1 is MILE's estimator, whose floor for a perfectly
    calibrated predictive is ≈ 0.135 at S = 10 (kept for comparison only)."""
    y, mu, sigma = _f64(y), _f64(mu), _clip_sigma(sigma)
    lev = np.asarray(levels, np.float64)
    if num_draws is None:
        pit = mixture_cdf(y, mu, sigma)
        cov = np.asarray([np.mean((pit >= (1 - a) / 2) & (pit <= 1 - (1 - a) / 2)) for a in lev])
    else:
        rng = np.random.default_rng(key)
        draws = mu[None] + sigma[None] * rng.standard_normal((num_draws,) + mu.shape)
        draws = draws.reshape(-1, y.shape[0])
        cov = []
        for a in lev:
            lo, hi = np.quantile(draws, [(1 - a) / 2, 1 - (1 - a) / 2], axis=0)
            cov.append(np.mean((y >= lo) & (y <= hi)))
        cov = np.asarray(cov)
    return float(np.sqrt(np.mean((cov - lev) ** 2))), cov


def regression_metrics(y, mu, sigma, key: int = 0, num_draws: int | None = None) -> dict:
    """LPPD, NLL, RMSE, calibration error and coverage curve (list over the levels of `calibration_error`) of a
    Gaussian location/scale predictive mixture; y (n,), mu/sigma (S, n).  The calibration error is the exact one
    unless num_draws is given (see `calibration_error`)."""
    lppd = regression_lppd(y, mu, sigma)
    cal, cov = calibration_error(y, mu, sigma, key, num_draws)
    return {"lppd": lppd, "nll": -lppd, "rmse": regression_rmse(y, mu), "calibration_error": cal,
            "coverage": cov.tolist()}


def regression_curve(y, pred) -> dict:
    """LPPD and RMSE of the mixture of the first k samples, k = 1..K (collection order); y (n,), pred (K, n, 2)
    [loc, scale].  Returns dict(num_samples=[1..K], lppd=[..], rmse=[..]) of python lists."""
    out = {"num_samples": [], "lppd": [], "rmse": []}
    for k in range(1, pred.shape[0] + 1):
        out["num_samples"].append(k)
        out["lppd"].append(regression_lppd(y, pred[:k, :, 0], pred[:k, :, 1]))
        out["rmse"].append(regression_rmse(y, pred[:k, :, 0]))
    return out


BAND_NOTE = ("95 % central interval of the pooled Gaussian predictive mixture (equal weights over samples): "
             "exact quantiles by bisection on the mixture CDF; mean = mixture mean")


def mixture_interval(loc, scale, level: float = 0.95, iters: int = 60) -> tuple[np.ndarray, ...]:
    """The mean and exact central interval of an equal-weight Gaussian mixture (bisection on the mixture CDF).

    Args:
      loc, scale: (S, n) per-sample locations and scales (scale clipped to [1e-6, 1e6]); level: the interval's mass.

    Returns:
      (mean, lower, upper), each (n,) float64: the mixture mean and its (1 − level)/2 and (1 + level)/2 quantiles.
    """
    from scipy.special import ndtr

    loc = np.asarray(loc, np.float64)
    scale = np.clip(np.asarray(scale, np.float64), 1e-6, 1e6)

    def quantile(p):
        a, b = (loc - 12 * scale).min(0), (loc + 12 * scale).max(0)
        for _ in range(iters):
            mid = 0.5 * (a + b)
            below = ndtr((mid[None] - loc) / scale).mean(0) < p
            a, b = np.where(below, mid, a), np.where(below, b, mid)
        return 0.5 * (a + b)

    return loc.mean(0), quantile((1 - level) / 2), quantile((1 + level) / 2)


TV_GRID, TV_SPAN = 400, 6.0
"""Regression total variation: grid points per test point and the span of the grid in component scales."""


class GaussianRegression:
    """Gaussian likelihood p(y | x, θ) = N(y | μ(x; θ), σ(x; θ)²) of a location/scale network.

    Model outputs: (loc (B,), scale (B,)).  Per-sample predictions (`predictive`, stacked by `Task.predict`):
    (B, 2) [loc, scale].  Scores and metrics take those stacked predictions, outputs (K, n, 2), and targets
    y (n,) (standardised units); the K samples are pooled into one equal-weight mixture.
    """

    kind = "regression"
    metric_keys = ("lppd", "nll", "rmse", "calibration_error", "coverage")
    """The keys of `metrics`."""
    curve_keys = ("lppd", "rmse")
    """The metric lists of `curve` (besides "num_samples")."""
    score_name = "NLL (−LPPD)"
    has_class_probs = False
    """Whether the model's outputs are class logits (softmax = class probabilities)."""
    error_metric = "rmse"
    """What `error_and_nll`'s error is."""

    @staticmethod
    def mean_nll(out: tuple[jax.Array, jax.Array], y: jax.Array) -> jax.Array:
        """Mean Gaussian negative log-likelihood (nats per example, ½·log 2π included) of out = (loc (B,),
        scale (B,)) and y (B,)."""
        loc, scale = out
        return jnp.mean(gaussian_nll(y, loc, scale))

    @staticmethod
    def log_likelihood(out: tuple[jax.Array, jax.Array], y: jax.Array) -> jax.Array:
        """Per-example log N(y_b | loc_b, scale_b²) (nats), (B,), of out = (loc (B,), scale (B,)) and y (B,)."""
        loc, scale = out
        return -gaussian_nll(y, loc, scale)

    @staticmethod
    def predictive(out: tuple[jax.Array, jax.Array]) -> jax.Array:
        """One sample's prediction: (B, 2) [loc, scale]."""
        return jnp.stack(out, axis=-1)

    @staticmethod
    def score(outputs, y) -> float:
        """Tuning score: NLL = −LPPD of the pooled predictive mixture of outputs (K, n, 2) (may be inf or nan)."""
        return -regression_lppd(y, outputs[..., 0], outputs[..., 1])

    @staticmethod
    def metrics(outputs, y) -> dict:
        """`regression_metrics` (LPPD, NLL, RMSE, exact calibration error and coverage) of outputs (K, n, 2)."""
        return regression_metrics(y, outputs[..., 0], outputs[..., 1])

    @staticmethod
    def curve(outputs, y) -> dict:
        """`regression_curve`: mixture LPPD and RMSE over the first k = 1..K samples (collection order)."""
        return regression_curve(y, outputs)

    @staticmethod
    def error_and_nll(outputs, y) -> tuple[np.ndarray, np.ndarray]:
        """Per sample (each network alone, not the mixture) of outputs (K, n, 2): RMSE of its loc (K,) and mean
        Gaussian NLL (K,), float64."""
        out = _f64(outputs)
        y = np.asarray(y)
        loc, scale = out[..., 0], _clip_sigma(out[..., 1])
        err = np.sqrt(np.mean((y[None] - loc) ** 2, axis=1))
        return err, np.mean(gaussian_nll(y[None], loc, scale), axis=1)

    # --- what evaluate reads from the likelihood instead of testing the task's kind

    table_metrics = ("lppd", "nll", "rmse", "calibration_error")
    """The metric columns of the report's tables."""
    summary_columns = (("lppd", "lppd"), ("rmse", "rmse"), ("cal", "calibration_error"))
    """(header, metric key) of the plain-text summary's columns besides nll."""
    curve_plot = (("lppd", "LPPD"), ("rmse", "RMSE"))
    """(metric key, axis label) of the curve plots."""
    error_label = "RMSE"
    """The axis label of `error_and_nll`'s error."""
    band_note = BAND_NOTE
    """What `interval` gives (the 1-D band of a report)."""

    @staticmethod
    def score_from_metrics(metrics: dict) -> float | None:
        """The tuning score −LPPD (nats per test point) from `metrics`' "lppd"; None when absent."""
        return None if metrics.get("lppd") is None else -float(metrics["lppd"])

    @staticmethod
    def pointwise_function(outputs, y) -> np.ndarray:
        """Per sample and test point, the predicted mean loc(x_i; θ_k) (standardised units) of outputs (K, n, 2):
        (K, n) float64 (the function-space ESS's functions)."""
        return np.asarray(outputs, np.float64)[..., 0]

    @staticmethod
    def point_prediction(outputs) -> np.ndarray:
        """The predicted mean loc of outputs (..., n, 2), float64 (what the predictive variance is the spread of)."""
        return np.asarray(outputs[..., 0], np.float64)

    @staticmethod
    def prediction_scale(outputs) -> np.ndarray:
        """Per sample, the RMS of [loc, scale] over outputs (K, n, 2): (K,) float64, inf where not finite."""
        out = np.asarray(outputs, np.float64)
        with np.errstate(all="ignore"):
            scale = np.sqrt(np.mean(np.square(out), axis=(1, 2)))
        return np.where(np.isfinite(scale), scale, np.inf)

    @staticmethod
    def interval(outputs, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lower, upper), each (n,), of the pooled predictive mixture of outputs (K, n, 2): `mixture_interval`."""
        return mixture_interval(outputs[..., 0], outputs[..., 1], level)

    # --- fidelity to a reference's draws (the budget curves, evaluate.curve)

    @staticmethod
    def reference_outputs(draws: dict) -> np.ndarray:
        """A reference's per-draw test predictives (tasks.reference.load_draws: loc, scale (S, n)) as outputs
        (S, n, 2) [loc, scale], the format of `Task.predict`."""
        return np.stack([np.asarray(draws["loc"], np.float64), np.asarray(draws["scale"], np.float64)], axis=-1)

    @staticmethod
    def draw_vectors(outputs) -> np.ndarray:
        """Each draw's test predictive as one vector, for sample-level distances: its predicted means loc (n,)
        divided by sqrt(n), (K, n) float64 (standardised target units; a Euclidean distance between two rows is the
        root mean square over test points of the difference of the means)."""
        loc = np.asarray(outputs, np.float64)[..., 0]
        return loc / np.sqrt(loc.shape[1])

    @staticmethod
    def bma_total_variation(outputs, ref_outputs, grid: int = TV_GRID, block: int = 64) -> float:
        """Mean over test points of the total variation ½∫|p̄ − q̄| dy between the pooled predictive mixtures of
        outputs (K, n, 2) and ref_outputs (S, n, 2), in [0, 1]: per test point both densities on `grid` points
        spanning every component's ±TV_SPAN scales, trapezoidal rule."""
        a, b = np.asarray(outputs, np.float64), np.asarray(ref_outputs, np.float64)
        total = 0.0
        for lo in range(0, a.shape[1], block):
            pa, pb = a[:, lo:lo + block], b[:, lo:lo + block]
            both = np.concatenate([pa, pb])  # (K + S, m, 2)
            sd = _clip_sigma(both[..., 1])
            low = np.min(both[..., 0] - TV_SPAN * sd, axis=0)
            high = np.max(both[..., 0] + TV_SPAN * sd, axis=0)
            ys = low[:, None] + (high - low)[:, None] * np.linspace(0.0, 1.0, grid)[None]  # (m, grid)

            def density(p):
                z = (ys[None] - p[..., 0][..., None]) / _clip_sigma(p[..., 1])[..., None]
                return np.mean(np.exp(-0.5 * z * z) / (_clip_sigma(p[..., 1])[..., None] * np.sqrt(2 * np.pi)), axis=0)

            diff = np.abs(density(pa) - density(pb))
            total += float(np.sum(0.5 * np.trapezoid(diff, ys, axis=1)))
        return total / a.shape[1]

    @staticmethod
    def split_total_variations(outputs, subsets, grid: int = TV_GRID, block: int = 64) -> list[float]:
        """For each index set I of `subsets`: bma_total_variation(outputs[I], outputs[rest]), the draws of I against
        the other draws of outputs (S, n, 2) (the K-draw floor, evaluate.curve.fidelity). The grid spans every draw's
        components, as bma_total_variation's does for any split of the same draws, so each draw's density on it is
        computed once and a split's mixtures are sums of them."""
        a = np.asarray(outputs, np.float64)
        s, n = a.shape[:2]
        totals = np.zeros(len(subsets))
        for lo in range(0, n, block):
            pa = a[:, lo:lo + block]
            sd = _clip_sigma(pa[..., 1])
            low, high = np.min(pa[..., 0] - TV_SPAN * sd, axis=0), np.max(pa[..., 0] + TV_SPAN * sd, axis=0)
            ys = low[:, None] + (high - low)[:, None] * np.linspace(0.0, 1.0, grid)[None]  # (m, grid)
            z = (ys[None] - pa[..., 0][..., None]) / sd[..., None]
            dens = np.exp(-0.5 * z * z) / (sd[..., None] * np.sqrt(2 * np.pi))  # (S, m, grid)
            all_sum = dens.sum(0)
            for j, idx in enumerate(subsets):
                part = dens[idx].sum(0)
                diff = np.abs(part / len(idx) - (all_sum - part) / (s - len(idx)))
                totals[j] += float(np.sum(0.5 * np.trapezoid(diff, ys, axis=1)))
        return [float(t / n) for t in totals]

