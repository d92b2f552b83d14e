"""Diagnostics of a sampler's draws and steps: ESS, R̂, kinetic and configurational temperature, step cost.

Definitions: docs/evaluation.md ("ESS and R̂", "Temperature") and docs/sampling.md ("Measuring it: kinetic and
configurational temperature").  Shapes: single-chain draws (n, ...) with the sample axis first; multi-chain
draws (m, n, ...) with chains first; per-coordinate statistics come back with the trailing shape (...).

  * `ess_geyer`: single-chain Geyer ESS in jnp (jittable; MILE's phase III runs it in-graph);
    `ess_single_chain`: the same estimator on float64 draws of any trailing shape;
  * `ess_bulk`: rank-normalised split ("bulk") ESS (Vehtari et al. 2021), `blackjax.diagnostics.ess_bulk`;
  * R̂: `blackjax.diagnostics.potential_scale_reduction` (Gelman–Rubin) on the sub-chains each variant defines:
    `split_rhat` (halves of every chain), `chainwise_rhat` (k contiguous sub-chains of one chain, Sommer et al.
    2024), rank-normalised by default (`rank_normalize`); `rhat_fraction_per_leaf` per parameter tensor;
  * `kinetic_temperature`: T_kin = ⟨Σᵢ rᵢ·∇_rK(θ, r)ᵢ⟩ / d from the per-update `Info.kinetic` of a chain;
    `check_temperature`: a drop-in chain's T_kin against its target, with a TemperatureWarning when it is far;
  * `virial`, `configurational_temperature`: T_conf = ⟨θ·∇U(θ)⟩ / d with the exact energy gradient;
  * `time_per_step`: median wall time of one jitted step.
The float64 estimators run the jax code (ours and blackjax's) with 64-bit jax enabled.
"""
from __future__ import annotations

import math
import time
import warnings
from typing import Callable, NamedTuple

import blackjax.diagnostics as bjd
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["TEMPERATURE_TOLERANCE", "TemperatureCheck", "TemperatureWarning", "chainwise_rhat", "check_temperature",
           "configurational_temperature", "ess_bulk", "ess_geyer", "ess_single_chain", "kinetic_temperature",
           "kinetic_window", "rank_normalize", "rhat_fraction_per_leaf", "split_rhat", "time_per_step", "virial"]


def ess_geyer(x: jax.Array) -> jax.Array:
    """Single-chain effective sample size per column, Geyer's initial monotone sequence estimator (jnp, jittable).

    ρ_t = γ_t/γ_0 from the FFT autocovariance; τ = −1 + 2 Σ_{k≤k*} P_k with P_k = ρ_{2k} + ρ_{2k+1} truncated at
    the first negative pair and made monotone; ESS = n/τ with τ ≥ 1/log10(n) (Stan's cap).  Constant columns
    give ESS = n.  This is the definition of docs/evaluation.md ("ESS and R̂"), and MILE's phase III depends on
    its exact numbers.  `blackjax.diagnostics.effective_sample_size` on one chain computes Stan's variant
    instead (ρ_t = γ_t/γ_0 − 1/(n−1), truncation at the first non-positive pair with an extra even lag, ESS 0
    for a constant column): the two agree to a few per cent on mixing chains but not bit for bit.

    Args:
      x: (n, k) draws of one chain, the sample axis first (any float dtype; the result has its precision).

    Returns:
      (k,) ESS per column, in draws (between n/(n·log10 n) and n·log10 n).
    """
    n = x.shape[0]
    xc = x - x.mean(0)
    m = 2 * n
    spec = jnp.fft.rfft(xc, n=m, axis=0)
    acov = jnp.fft.irfft(spec * jnp.conj(spec), n=m, axis=0)[:n] / n
    var0 = acov[0]
    rho = acov / jnp.where(var0 > 0, var0, 1.0)
    rho = jnp.where(var0 > 0, rho, jnp.zeros_like(rho).at[0].set(1.0))
    k = n // 2
    pairs = rho[0:2 * k:2] + rho[1:2 * k:2]
    keep = jnp.cumprod(pairs >= 0, axis=0).astype(bool)
    pairs = jax.lax.cummin(jnp.where(keep, pairs, jnp.inf), axis=0)
    tau = -1.0 + 2.0 * jnp.sum(jnp.where(keep, pairs, 0.0), axis=0)
    tau = jnp.maximum(tau, 1.0 / math.log10(max(n, 2)))
    return n / tau


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _blackjax_f64(fn: Callable, x: np.ndarray) -> np.ndarray:
    """fn(x) of a blackjax diagnostic (chains on axis 0, draws on axis 1) in 64-bit jax, shaped x.shape[2:]."""
    with jax.enable_x64(True), np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(fn(x), dtype=np.float64)
    return out.reshape(x.shape[2:])


def ess_single_chain(x) -> np.ndarray:
    """`ess_geyer` per coordinate of one chain's draws, run in 64-bit jax on float64 draws.

    Not blackjax's `effective_sample_size` or ArviZ's `ess(method="identity")`: with one chain those use Stan's
    ρ̂_t = γ̂_t/γ̂_0 − 1/(n − 1) and add the next even-lag term to τ̂, which on the 10-draw chains of an evaluation
    changes the ESS by up to ~60 % (the estimators agree to ~0.4 % on long chains).

    Args:
      x: (n, ...) draws of one chain, the sample axis first.

    Returns:
      (...) float64 ESS per coordinate, in draws; constant coordinates give n.
    """
    x = _f64(x)
    n = x.shape[0]
    with jax.enable_x64(True):
        ess = np.asarray(ess_geyer(jnp.asarray(x.reshape(n, -1))), dtype=np.float64)
    return ess.reshape(x.shape[1:])


def rank_normalize(x) -> np.ndarray:
    """Normal scores of pooled ranks (Vehtari et al. 2021): z = Φ⁻¹((r − 3/8)/(S + 1/4)), r the average rank of a
    draw among all S = m·n draws of its coordinate.

    Args:
      x: (m, n, ...) draws, chains first.

    Returns:
      (m, n, ...) float64 normal scores.
    """
    from scipy.special import ndtri
    from scipy.stats import rankdata

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
    """Rank-normalised split ("bulk") ESS, `blackjax.diagnostics.ess_bulk` (agrees with ArviZ's
    `ess(method="bulk")`).

    Args:
      x: (m, n, ...) draws, chains first; m = 1 allowed (its two halves).

    Returns:
      (...) float64 ESS per coordinate, in draws (all chains together).
    """
    return _blackjax_f64(bjd.ess_bulk, _f64(x))


def _rhat(x: np.ndarray) -> np.ndarray:
    """R̂ over the chain axis of x (m ≥ 2, n, ...): sqrt(((n−1)/n·W + B/n)/W), W the mean within-chain variance,
    B/n the variance of the chain means (both ddof 1); NaN where W = 0."""
    return _blackjax_f64(bjd.potential_scale_reduction, x)


def split_rhat(x, rank: bool = True) -> np.ndarray:
    """Split R̂: halve every chain, optionally rank-normalise the pooled halves, apply Gelman–Rubin R̂.

    Args:
      x: (m, n, ...) draws, chains first (m = 1 allowed).
      rank: rank-normalise first (`rank_normalize`).

    Returns:
      (...) float64 R̂ per coordinate (dimensionless, 1 at convergence); NaN for a constant coordinate.
    """
    xs = _split(_f64(x), 2)
    return _rhat(rank_normalize(xs) if rank else xs)


def chainwise_rhat(x, num_splits: int = 4, rank: bool = True) -> np.ndarray:
    """Chainwise cR̂ (Sommer et al. 2024) of one chain: k contiguous sub-chains, rank-normalised, R̂ over them.
    MILE uses k = 4; L2E k = 2.

    Args:
      x: (n, ...) draws of one chain, the sample axis first.
      num_splits: k, the number of sub-chains (trailing n % k draws dropped).
      rank: rank-normalise first.

    Returns:
      (...) float64 cR̂ per coordinate; NaN for a constant coordinate.
    """
    xs = _split(_f64(x)[None], num_splits)
    return _rhat(rank_normalize(xs) if rank else xs)


def rhat_fraction_per_leaf(samples, threshold: float = 1.1, num_splits: int = 4, rank: bool = True):
    """Per parameter tensor, the fraction of its coordinates with cR̂ < threshold, averaged over chains; NaN cR̂
    (constant or non-finite coordinates) counts as not converged.

    Args:
      samples: pytree whose leaves are (m chains, n draws, ...).
      threshold, num_splits, rank: as `chainwise_rhat`.

    Returns:
      The same pytree with one float in [0, 1] per leaf (e.g. per layer's kernel and bias).
    """

    def leaf(x):
        x = _f64(x)
        fr = [np.mean(chainwise_rhat(c, num_splits, rank) < threshold) for c in x]
        return float(np.mean(fr))

    return jax.tree.map(leaf, samples)


def kinetic_window(schedule, num_steps: int | None = None, window: str = "kept") -> np.ndarray:
    """The updates a kinetic temperature averages over, as a mask.

    Args:
      schedule: the chain's `l2e.chains.ChainSchedule` (num_steps, num_samples, thinning, sample_steps).
      num_steps: length of the mask (default schedule.num_steps).
      window: "kept" — the updates from the first kept sample to the last, both included (update t's kinetic
        term is at the momentum after it; the evaluation's window, docs/evaluation.md "Temperature"); "tail" —
        the last num_samples·thinning updates.

    Returns:
      (num_steps,) bool.
    """
    num_steps = schedule.num_steps if num_steps is None else num_steps
    mask = np.zeros(num_steps, bool)
    if window == "kept":
        steps = schedule.sample_steps
        mask[steps[0] - 1:steps[-1]] = True
    elif window == "tail":
        mask[schedule.num_steps - schedule.num_samples * schedule.thinning:] = True
    else:
        raise ValueError(f"window must be 'kept' or 'tail', got {window!r}")
    return mask


def kinetic_temperature(kinetic, schedule, num_params: int, sampling=None, window: str = "kept") -> np.ndarray:
    """Kinetic temperature T_kin = ⟨Σᵢ rᵢ·∇_rK(θ, r)ᵢ⟩ / d over a sampling window (docs/sampling.md, "Measuring
    it"): 1 for a correct sampler at temperature 1.

    Args:
      kinetic: (..., num_steps) per-update kinetic sums Σᵢ r'ᵢ·∇_rK(θ, r')ᵢ at the post-update momentum
        (`Info.kinetic` of a momentum sampler; units of temperature × d), one row per chain or member.
      schedule: the chain's `l2e.chains.ChainSchedule`.
      num_params: d, the number of parameters.
      sampling: optional (..., num_steps) bool, the updates of a sampling phase (cyclical SGHMC's
        `Info.sampling`); the window is restricted to them.
      window: "kept" or "tail" (`kinetic_window`).

    Returns:
      (...) float64 T_kin per row (a 0-d array for one chain), in units of the target temperature; NaN where
      the window is empty or holds a non-finite value.
    """
    k = np.asarray(kinetic, np.float64)
    mask = np.broadcast_to(kinetic_window(schedule, k.shape[-1], window), k.shape)
    if sampling is not None:
        mask = mask & np.broadcast_to(np.asarray(sampling, bool).reshape(k.shape), k.shape)
    out = []
    for row, m in zip(k.reshape(-1, k.shape[-1]), mask.reshape(-1, k.shape[-1])):
        values = row[m]
        ok = values.size > 0 and np.all(np.isfinite(values))
        out.append(np.mean(values) / num_params if ok else np.nan)
    return np.asarray(out, np.float64).reshape(k.shape[:-1])


class TemperatureWarning(UserWarning):
    """A chain whose kinetic temperature is far from its target (`check_temperature`)."""


class TemperatureCheck(NamedTuple):
    """What `check_temperature` found: t_kin, the mean kinetic temperature over the sampling window's updates (NaN
    where one is not finite); se, its standard error (batch means); target, the temperature the chain should run at;
    updates, how many updates were read; ok, whether T_kin is near the target; message, what to do ('' when ok)."""

    t_kin: float
    se: float
    target: float
    updates: int
    ok: bool
    message: str


TEMPERATURE_TOLERANCE = 0.25
"""`check_temperature`'s default: T_kin may leave [1 − 0.25, 1 + 0.25]·T by no more than three standard errors (the
defaults audit's "within 25 % of T", bench.defaults_audit)."""


def _window_values(infos, num_params: int | None) -> list[np.ndarray]:
    """Per row (chain): the per-update kinetic temperatures of the sampling window's updates."""
    if isinstance(infos, (list, tuple)) and not hasattr(infos, "_fields"):
        infos = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs], axis=-1), *infos)
    if hasattr(infos, "t_kin"):
        t = np.asarray(infos.t_kin, np.float64)
    elif hasattr(infos, "kinetic") and num_params:
        t = np.asarray(infos.kinetic, np.float64) / num_params
    else:
        raise ValueError("check_temperature needs a sampler's infos with a t_kin field (Mass-L2E, Transient-L2E), or "
                         "with a kinetic field and num_params = d")
    t = np.atleast_1d(t)
    sampling = np.broadcast_to(np.asarray(getattr(infos, "sampling", True), bool), t.shape)
    return [row[m] for row, m in zip(t.reshape(-1, t.shape[-1]), sampling.reshape(-1, t.shape[-1]))]


def check_temperature(infos, target: float = 1.0, tolerance: float = TEMPERATURE_TOLERANCE,
                      num_params: int | None = None, warn: bool = True) -> TemperatureCheck:
    """Whether a chain ran at its target temperature: its kinetic temperature T_kin (the mean of Info.t_kin over
    the updates of its sampling window, Info.sampling) against T. A correct sampler at equilibrium has T_kin ≈ T; a
    chain far above it does not sample at T — step-size error or gradient noise dominates, its draws typically too
    wide (far below: too narrow, e.g. the paper-form L2E step). Far means outside [1 − tolerance, 1 + tolerance]·T by more than three
    standard errors (batch means: a short window of a small model is noisy); a window holding a non-finite value
    (a divergent chain) is far.

    Args:
      infos: the step infos of a chain — a list of the Infos `step` returned, or one Info of stacked arrays (the
        update axis last; leading axes are chains).
      target: T, the temperature the chain targets (its config's temperature; 1 for the posterior).
      tolerance: the relative band.
      num_params: d, for infos without t_kin (any momentum sampler's Info.kinetic: T_kin = kinetic / d).
      warn: issue a TemperatureWarning with the message when the chain is not near T.
    Returns:
      TemperatureCheck.
    Raises:
      ValueError: no update of the sampling window among `infos`, or infos without a kinetic temperature.
    """
    rows = _window_values(infos, num_params)
    n = sum(len(r) for r in rows)
    if n == 0:
        raise ValueError("check_temperature: no update of the sampling window among the infos (run past freeze_step)")
    values = np.concatenate(rows)
    t_kin = float(np.mean(values)) if np.all(np.isfinite(values)) else float("nan")
    means = [b.mean() for r in rows for b in np.array_split(r, min(10, len(r))) if len(b)]
    se = float(np.std(means, ddof=1) / np.sqrt(len(means))) if len(means) > 1 and math.isfinite(t_kin) else 0.0
    off = abs(t_kin - target) - tolerance * target
    ok = math.isfinite(t_kin) and off <= 3.0 * se
    message = "" if ok else _temperature_message(t_kin, se, target, n)
    if message and warn:
        warnings.warn(message, TemperatureWarning, stacklevel=2)
    return TemperatureCheck(t_kin, se, float(target), int(n), bool(ok), message)


def _temperature_message(t_kin: float, se: float, target: float, n: int) -> str:
    if not math.isfinite(t_kin):
        return ("the chain diverged: its kinetic energy is not finite in the sampling window; lower the step size "
                "(learning_rate=…, where the sampler has one) or use larger minibatches")
    hot = t_kin > target
    return (f"the chain runs {'hot' if hot else 'cold'}: T_kin = {t_kin:.3g} ± {se:.2g}, {t_kin / target:.3g} × its "
            f"target T = {target:g}, over {n} updates of its sampling window, so it does not sample the target at T ("
            + ("step-size error or minibatch gradient noise dominates; its draws are typically too wide); "
               if hot else "its draws are typically too narrow, or it is not at equilibrium yet); ")
            + ("lower the step size (learning_rate=…, ε²·N units, where the sampler has one: the tuning-free default "
               "l2e.load_sampler(posterior=…) has none), use larger minibatches (less gradient noise) or a later "
               "freeze_step (a longer burn-in)" if hot else
               "run a longer burn-in (a later freeze_step), or use a correct sampler (not the paper-form L2E step)"))


def virial(theta: jax.Array, grad_energy: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """The virial θ·∇U(θ) of one position (jnp, jittable): its mean over draws ÷ d is T_conf.

    Args:
      theta: (d,) flat position.
      grad_energy: θ (d,) -> ∇U(θ) (d,), the exact gradient of the energy U = −log density (T = 1).

    Returns:
      () scalar, in units of temperature × d.
    """
    return jnp.dot(theta, grad_energy(theta))


def configurational_temperature(positions, grad_energy: Callable[[jax.Array], jax.Array],
                                weights=None) -> float:
    """Configurational temperature T_conf = ⟨θ·∇U(θ)⟩ / d over draws (docs/sampling.md, "Measuring it"): T for
    any correct sampler of exp(−U/T) with a centred Gaussian target (more generally under mild tail conditions).
    It needs the exact ∇U, so it is measured on known targets (the sampler card).

    Args:
      positions: (n, d) flat draws.
      grad_energy: θ (d,) -> ∇U(θ) (d,).
      weights: optional (n,) non-negative weights of the draws (default: equal).

    Returns:
      T_conf, in units of the target temperature (float).
    """
    x = jnp.asarray(positions)
    v = np.asarray(jax.vmap(lambda t: virial(t, grad_energy))(x), np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, np.float64)
    return float(np.sum(w * v) / np.sum(w) / x.shape[1])


def time_per_step(step_fn: Callable, *args, num_repeats: int = 20) -> float:
    """Median wall time of one call of `jax.jit(step_fn)(*args)` after compilation and one warm-up, e.g.
    `fsghmc(...).step` against `sghmc(...).step` on the same model and minibatch.

    Args:
      step_fn: the function to time; args: its arguments; num_repeats: timed calls.

    Returns:
      Seconds per call (float).
    """
    f = jax.jit(step_fn)
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(num_repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return float(np.median(times))
