"""Convergence diagnostics of parameter draws (METRICS §3), float64.

Shapes: single-chain draws (n, ...) with the sample axis first; multi-chain draws (m, n, ...) with chains first.
Per-coordinate statistics are returned with the trailing shape (...).

One ESS and one R̂ estimator of each kind the spec defines:
  * `ess_single_chain`: METRICS' single-chain Geyer ESS, our own `l2e.mclmc.ess_geyer` (its docstring says why
    no library's);
  * `ess_bulk`: rank-normalised split ESS (Vehtari et al. 2021), `blackjax.diagnostics.ess_bulk`;
  * R̂: `blackjax.diagnostics.potential_scale_reduction` (Gelman–Rubin, the spec's formula), applied to the
    sub-chains each variant defines: `split_rhat` (halves of every chain), `chainwise_rhat` (k contiguous
    sub-chains of one chain, Sommer et al. 2024), rank-normalised by default (`rank_normalize`).
The jax estimators (l2e's and blackjax's) run here with 64-bit jax enabled, on float64 inputs.
"""
from __future__ import annotations

import time
from typing import Callable

import blackjax.diagnostics as bjd
import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from l2e.mclmc import ess_geyer

__all__ = ["chainwise_rhat", "ess_bulk", "ess_single_chain", "rank_normalize",
           "rhat_fraction_per_leaf", "split_rhat", "time_per_step"]


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _blackjax_f64(fn: Callable, x: np.ndarray) -> np.ndarray:
    """fn(x) of a blackjax diagnostic (chains on axis 0, draws on axis 1) in 64-bit jax, shaped x.shape[2:]."""
    with jax.enable_x64(True), np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(fn(x), dtype=np.float64)
    return out.reshape(x.shape[2:])


def ess_single_chain(x) -> np.ndarray:
    """Single-chain ESS per coordinate of x (n, ...) = n/τ̂, exactly METRICS §3's definition: ρ̂_t = γ̂_t/γ̂_0
    (FFT autocovariance), Geyer's initial positive and monotone sequence τ̂ = −1 + 2 Σ_{k≤k*} P_k, capped at
    ESS ≤ n·log10(n); constant coordinates give n.  Returns shape (...).

    The project's one implementation is `l2e.mclmc.ess_geyer` (jax; MILE's phase III runs it in-graph); here it runs
    in 64-bit jax on float64 draws.  Not blackjax's `effective_sample_size` or ArviZ's `ess(method="identity")`:
    with one chain those use Stan's multi-chain ρ̂_t = 1 − (W − γ̂_t)/var⁺ = γ̂_t/γ̂_0 − 1/(n − 1) and add the
    next even-lag term to τ̂, which on the 10-draw chains evaluate reports changes the ESS by up to ~60 %
    (tests/test_diagnostics.py shows the numbers; the estimators agree to ~0.4 % on long chains)."""
    x = _f64(x)
    n = x.shape[0]
    with jax.enable_x64(True):
        ess = np.asarray(ess_geyer(jnp.asarray(x.reshape(n, -1))), dtype=np.float64)
    return ess.reshape(x.shape[1:])


def rank_normalize(x) -> np.ndarray:
    """z = Φ⁻¹((r − 3/8)/(S + 1/4)) with r the average ranks over all S pooled draws of x (m, n, ...),
    per coordinate (Vehtari et al. 2021)."""
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
    """Rank-normalised split ("bulk") ESS of x (m, n, ...), Vehtari et al. (2021), m = 1 allowed:
    `blackjax.diagnostics.ess_bulk` (agrees with ArviZ's `ess(method="bulk")`)."""
    return _blackjax_f64(bjd.ess_bulk, _f64(x))


def _rhat(x: np.ndarray) -> np.ndarray:
    """R̂ over the chain axis of x (m ≥ 2, n, ...): sqrt(((n−1)/n·W + B/n)/W), W the mean within-chain variance,
    B/n the variance of the chain means (both ddof 1); NaN where W = 0."""
    return _blackjax_f64(bjd.potential_scale_reduction, x)


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
