"""MCLMC (Robnik et al.) and the MILE recipe (Sommer et al., ICLR 2025) — full-batch (docs/samplers.md § MCLMC
and the MILE recipe).

`l2e.mclmc` (`init`, `build_kernel`, the factory `mclmc`) is a `FullBatchAlgorithm`: MCLMC needs the *full-batch*
unnormalised log posterior ℓ(θ) = log p(θ | D) (not a mean minibatch NLL), `init(position, key)` needs a key (random
unit velocity), and `step(key, state) -> (state, info)` takes no minibatch.  Each step is blackjax's
`isokinetic_mclachlan` with Maruyama partial refreshes (2 gradient evaluations per step); blackjax reverts a step
whose position, logdensity or energy change is non-finite (`info.nonans` False).

MILE = deep-ensemble warm start θ₀ and ε₀ (= the DE learning rate), L₀ = max(√d, 15), then
  phase I  (n₁ steps): adapt ε so that EEVPD = ΔE²/d tracks target(t) = a − (a − b)·min(t/(n₁ + n₂ + 1), 1)
           (a, b = 0.5, 0.1), with the decaying-average estimator (N_eff = 100, trust 1.5) and the NaN guard
           (on a reverted step: ε_max = 0.8ε, ΔE = 0);
  phase II (n₂ steps): ε keeps adapting; ε-weighted running means of θ, θ² give L = sqrt(Σ_i Var θ_i);
  phase III(n₃ steps): fixed (ε, L); store ≤ `max_ess_coords` random coordinates, thinned to ≤ `max_ess_samples`
           draws; L = l_factor·ε·mean_i(n₃/ESS_i) with single-chain Geyer ESS;
then `num_samples·thinning` sampling steps keeping every `thinning`-th position.
Everything is one jittable function of (init_position, key, step_size0); vmap it over chains.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from blackjax.mcmc import integrators
from blackjax.mcmc import mclmc as bj_mclmc
from jax.flatten_util import ravel_pytree

from l2e.checks import check_positive, check_step_count
from l2e.diagnostics import ess_geyer
from l2e.types import FullBatchAlgorithm, PyTree


def init(position: PyTree, logdensity_fn: Callable, key: jax.Array):
    """The MCLMC state at `position` with a random unit velocity.

    Args:
      position: θ, a pytree of float arrays (d coordinates in all).
      logdensity_fn: params -> scalar ℓ(θ) = log p(θ | D) up to a constant (full batch).
      key: PRNG key of the initial velocity (uniform on the unit sphere).
    Returns:
      blackjax IntegratorState (position, momentum: unit velocity shaped like θ, logdensity: scalar,
      logdensity_grad: pytree like θ).
    """
    return bj_mclmc.init(position, logdensity_fn, key)


def build_kernel(logdensity_fn: Callable):
    """One unadjusted MCLMC step (blackjax): half a Maruyama partial velocity refresh, the isokinetic McLachlan step
    (2 gradient evaluations), the other half refresh; each half is u ← normalise(u + ν·z), ν = sqrt((e^{ε/L} − 1)/d),
    z ~ N(0, I) from the key (none for L = ∞). No preconditioning. A step whose position, velocity, log density or
    energy change is not finite is reverted to the previous position with a fresh random velocity (`info.nonans`
    False).

    Args:
      logdensity_fn: params -> scalar ℓ(θ) (full batch).
    Returns:
      kernel(key, state, L, step_size) -> (IntegratorState, blackjax MCLMCInfo): L the decoherence length and
      step_size ε, both in θ units (the velocity has unit norm), scalars, traceable; MCLMCInfo has logdensity,
      energy_change ΔE (nats) and kinetic_change.
    """
    kernel = bj_mclmc.build_kernel(integrator=integrators.isokinetic_mclachlan)

    def step(key: jax.Array, state, L, step_size):
        return kernel(key, state, logdensity_fn, 1.0, L, step_size)

    return step


def mclmc(logdensity_fn: Callable, L: float, step_size: float) -> FullBatchAlgorithm:
    """Unadjusted MCLMC at fixed (L, ε), no preconditioning.

    Args:
      logdensity_fn: params -> scalar ℓ(θ) = log p(θ | D) up to a constant (full batch).
      L: decoherence length (θ units).
      step_size: ε (θ units).
    Returns:
      FullBatchAlgorithm: init(position, key) -> IntegratorState (random unit velocity from the key),
      step(key, state) -> (IntegratorState, blackjax MCLMCInfo).
    """
    check_positive(L=L, step_size=step_size)
    kernel = build_kernel(logdensity_fn)

    def init_fn(position: PyTree, key: jax.Array):
        return init(position, logdensity_fn, key)

    def step(key: jax.Array, state):
        return kernel(key, state, L, step_size)

    return FullBatchAlgorithm(init_fn, step)


class MILEInfo(NamedTuple):
    """What a MILE run reports (scalars unless said; θ units for lengths and step sizes).

    L: the final decoherence length; step_size: the final ε; L_phase2: L after phase II (from the position
    variance); step_size_max: ε_max after the warm-up (inf if the NaN guard never fired); num_nan_warmup: int32,
    reverted (non-finite) steps in phases I–III; num_nan_sampling: int32, reverted steps in the sampling phase;
    eevpd_sampling: mean ΔE²/d over the sampling phase (nats² per dimension); num_grad_evals: 2 per step, warm-up +
    sampling; final_state: the blackjax IntegratorState after sampling.
    """

    L: jax.Array
    step_size: jax.Array
    L_phase2: jax.Array
    step_size_max: jax.Array
    num_nan_warmup: jax.Array
    num_nan_sampling: jax.Array
    eevpd_sampling: jax.Array
    num_grad_evals: jax.Array
    final_state: object


class _Adaptation(NamedTuple):
    """Static settings of MILE's ε adaptation (phases I + II)."""

    n1: int
    n2: int
    d: int
    target_eevpd: tuple[float, float]
    decay: float  # (N_eff − 1)/(N_eff + 1) of the decaying averages
    trust_in_estimate: float


def _adapt_step_size(kernel, state, key, step_size0, L0, cfg: _Adaptation):
    """Phases I + II: ε tracks the EEVPD target (with the NaN guard); phase II accumulates ε-weighted
    moments of θ. Returns (state, ε, ε_max, L, reverted steps); L = sqrt(Σ Var θ_i) when n₂ > 0, else L0."""
    n1, n2, d = cfg.n1, cfg.n2, cfg.d
    t_hi, t_lo = cfg.target_eevpd
    dtype = ravel_pytree(state.position)[0].dtype

    def adapt_step(carry, inp):
        state, eps, eps_max, x_avg, w_sum, L, mom, nans = carry
        t, k, in_phase2 = inp
        new, info = kernel(k, state, L, eps)
        ok = info.nonans
        eps_max = jnp.where(ok, eps_max, 0.8 * eps)
        de = jnp.where(ok, info.energy_change, 0.0)
        target = t_hi - (t_hi - t_lo) * jnp.minimum(t / (n1 + n2 + 1.0), 1.0)
        xi = de**2 / (d * target) + 1e-8
        w = jnp.exp(-0.5 * (jnp.log(xi) / (6.0 * cfg.trust_in_estimate)) ** 2)
        x_avg = cfg.decay * x_avg + w * xi / eps**6
        w_sum = cfg.decay * w_sum + w
        eps_new = jnp.minimum((x_avg / w_sum) ** (-1.0 / 6.0), eps_max)
        # phase II moments, weight ε (of the step just taken) · success
        wt = jnp.where(in_phase2 & ok, eps, 0.0)
        x = ravel_pytree(new.position)[0]
        mw, m1, m2 = mom
        mw_n = mw + wt
        frac = jnp.where(mw_n > 0, wt / jnp.where(mw_n > 0, mw_n, 1.0), 0.0)
        mom = (mw_n, m1 + frac * (x - m1), m2 + frac * (x * x - m2))
        return (new, eps_new, eps_max, x_avg, w_sum, L, mom, nans + (~ok)), None

    zeros = jnp.zeros((d,), dtype)
    carry = (state, jnp.asarray(step_size0, dtype), jnp.asarray(jnp.inf, dtype), jnp.zeros((), dtype),
             jnp.zeros((), dtype), jnp.asarray(L0, dtype), (jnp.zeros((), dtype), zeros, zeros),
             jnp.zeros((), jnp.int32))
    ts = jnp.arange(n1 + n2, dtype=dtype)
    carry, _ = jax.lax.scan(adapt_step, carry, (ts, jax.random.split(key, n1 + n2), jnp.arange(n1 + n2) >= n1))
    state, eps, eps_max, _, _, L, (_, m1, m2), nans = carry
    if n2 > 0:
        L = jnp.sqrt(jnp.sum(jnp.maximum(m2 - m1**2, 0.0)))
    return state, eps, eps_max, L, nans


def _tune_L(kernel, state, key, key_coords, L, eps, nans, n3: int, l_factor: float, max_ess_coords: int,
            max_ess_samples: int):
    """Phase III: n₃ steps at fixed (ε, L); Geyer ESS of ≤ max_ess_coords random coordinates over
    ≤ max_ess_samples draws; L = l_factor·ε·mean_i(n₃/ESS_i). Returns (state, L, reverted steps)."""
    d = ravel_pytree(state.position)[0].shape[0]
    n_coords = min(d, max_ess_coords)
    coords = jnp.arange(d) if n_coords == d else jax.random.choice(key_coords, d, (n_coords,), replace=False)
    thin3 = max(1, math.ceil(n3 / max_ess_samples))

    def run3(carry, k):
        st, nans = carry
        st, info = kernel(k, st, L, eps)
        return (st, nans + (~info.nonans)), ravel_pytree(st.position)[0][coords]

    (state, nans), xs = jax.lax.scan(run3, (state, nans), jax.random.split(key, n3))
    xs = xs[thin3 - 1::thin3]
    ess = ess_geyer(xs)
    return state, l_factor * eps * jnp.mean(n3 / ess), nans


def _sample(kernel, state, key, L, eps, num_samples: int, thinning: int):
    """num_samples draws `thinning` steps apart at fixed (ε, L). Returns (state, samples, reverted steps,
    Σ ΔE²/d over the steps)."""
    flat = ravel_pytree(state.position)[0]
    d, dtype = flat.shape[0], flat.dtype

    def sample_chunk(carry, k):
        def one(c, kk):
            st, nans, e2 = c
            st, info = kernel(kk, st, L, eps)
            return (st, nans + (~info.nonans), e2 + info.energy_change**2 / d), None

        carry, _ = jax.lax.scan(one, carry, jax.random.split(k, thinning))
        return carry, carry[0].position

    (state, nans, e2), samples = jax.lax.scan(
        sample_chunk, (state, jnp.zeros((), jnp.int32), jnp.zeros((), dtype)), jax.random.split(key, num_samples))
    return state, samples, nans, e2


def _check_mile(step_size0, num_steps, num_samples, thinning, L0, num_effective_samples, trust_in_estimate, l_factor,
                max_ess_coords, max_ess_samples) -> None:
    """`mile`'s arguments by meaning (l2e.checks): positive scales, update counts that are integers."""
    check_positive(step_size0=step_size0, num_effective_samples=num_effective_samples,
                   trust_in_estimate=trust_in_estimate, l_factor=l_factor)
    if L0 is not None:
        check_positive(L0=L0)
    if not isinstance(num_steps, (tuple, list)) or len(num_steps) != 3:
        raise ValueError(f"num_steps must be the three warm-up phases (n1, n2, n3), got {num_steps!r}")
    for name, n, least in zip(("n1", "n2", "n3"), num_steps, (1, 0, 0)):
        check_step_count(f"num_steps ({name})", n, least)
    for name, n in (("num_samples", num_samples), ("thinning", thinning), ("max_ess_coords", max_ess_coords),
                    ("max_ess_samples", max_ess_samples)):
        check_step_count(name, n, 1)


def mile(
    logdensity_fn: Callable,
    init_position: PyTree,
    key: jax.Array,
    step_size0: float,
    num_steps: tuple[int, int, int] = (40_000, 5_000, 5_000),
    num_samples: int = 1000,
    thinning: int = 10,
    L0: float | None = None,
    target_eevpd: tuple[float, float] = (0.5, 0.1),
    num_effective_samples: float = 100.0,
    trust_in_estimate: float = 1.5,
    l_factor: float = 0.4,
    max_ess_coords: int = 2000,
    max_ess_samples: int = 10_000,
) -> tuple[PyTree, MILEInfo]:
    """MILE warm-up from (init_position, step_size0) then sampling (module doc), one jittable function; vmap it
    over chains.

    Args:
      logdensity_fn: params -> scalar ℓ(θ) = log p(θ | D) up to a constant (full batch).
      init_position: θ₀, a pytree (a deep-ensemble member in the recipe).
      key: PRNG key of the whole run.
      step_size0: ε₀ (θ units; the ensemble's learning rate in the recipe).
      num_steps: (n₁, n₂, n₃), Python ints (static): the three warm-up phases.
      num_samples: draws kept.
      thinning: steps between kept draws.
      L0: the initial decoherence length (None: max(√d, 15)).
      target_eevpd: (a, b): the EEVPD target falls linearly from a to b over phases I + II.
      num_effective_samples: N_eff of the decaying-average ε estimator.
      trust_in_estimate: its outlier tolerance.
      l_factor: L = l_factor·ε·mean_i(n₃/ESS_i) after phase III.
      max_ess_coords: coordinates used for phase III's ESS.
      max_ess_samples: draws used for phase III's ESS.
    Returns:
      (samples: the structure of init_position with a leading axis of num_samples; MILEInfo).
    """
    _check_mile(step_size0, num_steps, num_samples, thinning, L0, num_effective_samples, trust_in_estimate, l_factor,
                max_ess_coords, max_ess_samples)
    n1, n2, n3 = (int(s) for s in num_steps)
    d = ravel_pytree(init_position)[0].shape[0]
    if L0 is None:
        L0 = max(math.sqrt(d), 15.0)
    kernel = build_kernel(logdensity_fn)
    decay = (num_effective_samples - 1.0) / (num_effective_samples + 1.0)
    k_init, k1, k3, k_sub, k_s = jax.random.split(key, 5)
    state = init(init_position, logdensity_fn, k_init)
    cfg = _Adaptation(n1, n2, d, tuple(target_eevpd), decay, trust_in_estimate)
    state, eps, eps_max, L, nans = _adapt_step_size(kernel, state, k1, step_size0, L0, cfg)
    L2 = L
    if n3 > 1:
        state, L, nans = _tune_L(kernel, state, k3, k_sub, L, eps, nans, n3, l_factor, max_ess_coords,
                                 max_ess_samples)
    state, samples, nans_s, e2 = _sample(kernel, state, k_s, L, eps, num_samples, thinning)
    info = MILEInfo(L, eps, L2, eps_max, nans, nans_s, e2 / (num_samples * thinning),
                    jnp.asarray(2 * (n1 + n2 + n3 + num_samples * thinning)), state)
    return samples, info
