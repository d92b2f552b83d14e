"""Convergence and sample-quality diagnostics (see shared/spec/METRICS.md §2–§4), float64 numpy.

Shapes: single-chain draws (n, ...) with the sample axis first; multi-chain draws (m, n, ...) with chains first.
Per-coordinate statistics are returned with the trailing shape (...).  Predictive metrics on classifiers live in
`evaluate.metrics` (AUROC is reused from there).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import jax
import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from evaluate.metrics import auroc

__all__ = [
    "autocorrelation", "ess_single_chain", "ess_multi_chain", "ess_bulk", "ess_per_time", "rank_normalize",
    "split_rhat", "chainwise_rhat", "rhat_fraction_per_leaf", "ood_auroc_msp", "regression_lppd",
    "regression_rmse", "calibration_error", "regression_metrics", "loss_barrier", "divergent_chains",
    "time_per_step",
]


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def autocorrelation(x) -> np.ndarray:
    """ρ̂_t along axis 0 of x (n, ...): γ̂_t = (1/n) Σ_{i<n−t} (x_i − x̄)(x_{i+t} − x̄) by zero-padded FFT, / γ̂_0.
    Constant columns give ρ = (1, 0, 0, …)."""
    x = _f64(x)
    n = x.shape[0]
    xc = x - x.mean(0)
    m = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(xc, n=m, axis=0)
    acov = np.fft.irfft(f * np.conj(f), n=m, axis=0)[:n] / n
    g0 = acov[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(g0 > 0, acov / np.where(g0 > 0, g0, 1.0), 0.0)
    rho[0] = 1.0
    return rho


def _tau_from_rho(rho: np.ndarray) -> np.ndarray:
    """Geyer initial monotone sequence: τ̂ = −1 + 2 Σ_{k≤k*} P_k, P_k = ρ_{2k} + ρ_{2k+1}; rho (n, ...)."""
    n = rho.shape[0]
    k = n // 2
    pairs = rho[0:2 * k:2] + rho[1:2 * k:2]
    keep = np.cumprod(pairs >= 0, axis=0).astype(bool)  # truncate at the first negative pair
    pairs = np.minimum.accumulate(np.where(keep, pairs, np.inf), axis=0)  # monotone
    tau = -1.0 + 2.0 * np.sum(np.where(keep, pairs, 0.0), axis=0)
    return np.maximum(tau, 1.0 / math.log10(max(n, 2)))  # Stan's cap ESS ≤ n·log10(n)


def ess_single_chain(x) -> np.ndarray:
    """Single-chain ESS per coordinate of x (n, ...) = n/τ̂ (FFT autocovariance + Geyer initial monotone
    sequence; the estimator of MILE's phase III, matches `l2e.mclmc.ess_geyer`).  Returns shape (...)."""
    x = _f64(x)
    return x.shape[0] / _tau_from_rho(autocorrelation(x))


def ess_multi_chain(x) -> np.ndarray:
    """Multi-chain ESS (Stan / Vehtari et al. 2021, no rank transform, no split) of x (m, n, ...):
    ρ̂_t = 1 − (W − mean_j γ̂_{j,t})/var⁺ with W the mean within-chain variance (ddof 1), var⁺ = (n−1)/n·W + B/n;
    ESS = m·n/τ̂ (Geyer).  Agrees with `blackjax.diagnostics.effective_sample_size`."""
    x = _f64(x)
    m, n = x.shape[:2]
    acov = np.stack([autocorrelation(c) * np.var(c, axis=0) for c in x])  # (m, n, ...) biased γ̂_t
    w = np.mean(np.var(x, axis=1, ddof=1), axis=0)
    var_plus = (n - 1) / n * w + (np.var(x.mean(1), axis=0, ddof=1) if m > 1 else 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = 1.0 - (w - acov.mean(0)) / var_plus
    rho = np.where(np.isfinite(rho), rho, 0.0)
    rho[0] = 1.0
    return m * n / _tau_from_rho(rho)


def rank_normalize(x) -> np.ndarray:
    """z = Φ⁻¹((r − 3/8)/(S + 1/4)) with r the average ranks over all S pooled draws of x (m, n, ...),
    per coordinate."""
    x = _f64(x)
    m, n = x.shape[:2]
    flat = x.reshape(m * n, -1)
    r = rankdata(flat, axis=0, method="average")
    return ndtri((r - 0.375) / (m * n + 0.25)).reshape(x.shape)


def _split(x: np.ndarray, k: int) -> np.ndarray:
    """(m, n, ...) -> (m·k, n//k, ...) contiguous sub-chains (trailing draws dropped if n % k ≠ 0)."""
    m, n = x.shape[:2]
    n_k = n // k
    return x[:, : n_k * k].reshape((m * k, n_k) + x.shape[2:])


def ess_bulk(x) -> np.ndarray:
    """Rank-normalised split ("bulk") ESS of x (m, n, ...), Vehtari et al. (2021); m = 1 allowed."""
    return ess_multi_chain(rank_normalize(_split(_f64(x), 2)))


def ess_per_time(ess, seconds: float, grad_evals: int | None = None) -> dict:
    """Sum of per-coordinate ESS, per second of sampler wall time and per 1000 gradient evaluations."""
    total = float(np.sum(_f64(ess)))
    out = {"ess_sum": total, "ess_per_s": total / seconds}
    if grad_evals is not None:
        out["ess_per_1000_grads"] = 1000.0 * total / grad_evals
    return out


def _rhat(x: np.ndarray) -> np.ndarray:
    """R̂ over the chain axis of x (m, n, ...): sqrt(((n−1)/n·W + B/n)/W)."""
    n = x.shape[1]
    w = np.mean(np.var(x, axis=1, ddof=1), axis=0)
    b_over_n = np.var(np.mean(x, axis=1), axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(((n - 1) / n * w + b_over_n) / w)


def split_rhat(x, rank: bool = True) -> np.ndarray:
    """Split R̂ of x (m, n, ...): halve every chain, optionally rank-normalise the pooled halves, apply R̂."""
    xs = _split(_f64(x), 2)
    return _rhat(rank_normalize(xs) if rank else xs)


def chainwise_rhat(x, num_splits: int = 4, rank: bool = True) -> np.ndarray:
    """Chainwise cR̂ (Sommer et al., 2024) of one chain x (n, ...): k contiguous sub-chains, rank-normalised,
    R̂ over them.  MILE: k = 4; L2E: k = 2."""
    xs = _split(_f64(x)[None], num_splits)
    return _rhat(rank_normalize(xs) if rank else xs)


def rhat_fraction_per_leaf(samples, threshold: float = 1.1, num_splits: int = 4, rank: bool = True):
    """Per-leaf fraction of parameters with cR̂ < threshold, averaged over chains.

    samples: pytree whose leaves are (m chains, n draws, ...).  Returns the same pytree of floats (e.g. one
    number per layer's kernel and bias).  NaN cR̂ (constant or non-finite coordinates) counts as not converged.
    """

    def leaf(x):
        x = _f64(x)
        fr = [np.mean(chainwise_rhat(c, num_splits, rank) < threshold) for c in x]
        return float(np.mean(fr))

    return jax.tree.map(leaf, samples)


def ood_auroc_msp(probs_in, probs_out) -> float:
    """OOD AUROC with the max-softmax-probability score: in-distribution = positives.
    probs_in (n_in, C), probs_out (n_out, C): BMA predictive probabilities."""
    return auroc(_f64(probs_in).max(-1), _f64(probs_out).max(-1))


def _gauss_logpdf(y, mu, sigma):
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y - mu) / sigma) ** 2


def _clip_sigma(sigma):
    return np.clip(_f64(sigma), 1e-6, 1e6)


def regression_lppd(y, mu, sigma) -> float:
    """LPPD = (1/n) Σ_i log[(1/S) Σ_s N(y_i | μ_s(x_i), σ_s(x_i)²)]; y (n,), mu/sigma (S, n) pooled over
    chains and samples (σ clipped to [1e-6, 1e6]).  NLL = −LPPD."""
    y, mu, sigma = _f64(y), _f64(mu), _clip_sigma(sigma)
    lp = _gauss_logpdf(y[None], mu, sigma)
    mx = lp.max(0)
    return float(np.mean(mx + np.log(np.mean(np.exp(lp - mx), axis=0))))


def regression_rmse(y, mu) -> float:
    """RMSE of the mixture mean ŷ_i = mean_s μ_s(x_i); y (n,), mu (S, n)."""
    y, mu = _f64(y), _f64(mu)
    return float(np.sqrt(np.mean((y - mu.mean(0)) ** 2)))


def calibration_error(y, mu, sigma, key: int = 0, num_draws: int = 1,
                      levels: Sequence[float] = (0.5, 0.75, 0.9, 0.95)) -> tuple[float, np.ndarray]:
    """Kuleshov-style calibration error per MILE: draw `num_draws` y ~ N(μ_s, σ_s²) per sample s, take the
    central interval [q_{α/2}, q_{1−α/2}] of the pooled draws per test point, coverage ĉ_l = fraction of y inside;
    CalE = sqrt(mean_l (ĉ_l − (1 − α_l))²).  Returns (CalE, coverages (L,)); `levels` are 1 − α_l."""
    y, mu, sigma = _f64(y), _f64(mu), _clip_sigma(sigma)
    rng = np.random.default_rng(key)
    draws = mu[None] + sigma[None] * rng.standard_normal((num_draws,) + mu.shape)
    draws = draws.reshape(-1, y.shape[0])
    cov = []
    for lev in levels:
        lo, hi = np.quantile(draws, [(1 - lev) / 2, 1 - (1 - lev) / 2], axis=0)
        cov.append(np.mean((y >= lo) & (y <= hi)))
    cov = np.asarray(cov)
    return float(np.sqrt(np.mean((cov - np.asarray(levels)) ** 2))), cov


def regression_metrics(y, mu, sigma, key: int = 0, num_draws: int = 1) -> dict:
    """LPPD, NLL, RMSE, calibration error and coverage curve of a Gaussian location/scale predictive mixture."""
    lppd = regression_lppd(y, mu, sigma)
    cal, cov = calibration_error(y, mu, sigma, key, num_draws)
    return {"lppd": lppd, "nll": -lppd, "rmse": regression_rmse(y, mu), "calibration_error": cal,
            "coverage": cov.tolist()}


def loss_barrier(loss_fn: Callable, params_a, params_b, num_points: int = 21) -> tuple[float, np.ndarray, np.ndarray]:
    """Barrier along θ(λ) = (1 − λ)θ_a + λθ_b on λ ∈ linspace(0, 1, num_points):
    B = max_λ [loss(λ) − ((1 − λ)loss(0) + λ·loss(1))].  Returns (B, lambdas, losses).
    `loss_fn(params) -> scalar` (e.g. test error or NLL of one network, not a BMA)."""
    lams = np.linspace(0.0, 1.0, num_points)
    losses = np.asarray([float(loss_fn(jax.tree.map(lambda a, b: (1 - t) * a + t * b, params_a, params_b)))
                         for t in lams])
    barrier = float(np.max(losses - ((1 - lams) * losses[0] + lams * losses[-1])))
    return barrier, lams, losses


def divergent_chains(samples) -> tuple[int, np.ndarray]:
    """Chains with any non-finite value: samples is a pytree of leaves (m chains, ...).
    Returns (count, mask (m,) bool)."""
    leaves = jax.tree.leaves(samples)
    m = np.asarray(leaves[0]).shape[0]
    bad = np.zeros(m, bool)
    for x in leaves:
        bad |= ~np.all(np.isfinite(np.asarray(x).reshape(m, -1)), axis=1)
    return int(bad.sum()), bad


def time_per_step(step_fn: Callable, *args, num_repeats: int = 20) -> float:
    """Median wall seconds of one call of `jax.jit(step_fn)(*args)` after compilation and one warm-up.
    E.g. compare `fsghmc(...).step` with `sghmc(...).step` on the same model and minibatch to report
    fSGHMC's extra forward/kernel/Cholesky/VJP cost."""
    f = jax.jit(step_fn)
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(num_repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return float(np.median(times))
