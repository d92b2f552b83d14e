"""The hand-designed rivals of the budget-curve issue on known targets: BAOAB, preconditioned SGHMC (RMSprop and
Fisher-divergence diagonals adapted in burn-in and frozen), scale-adapted SGHMC (Springenberg et al. 2016, its
published defaults) and warm-started SGHMC (Adam, then SGHMC).

Targets (minibatch noise: the "minibatch" is B = 8 standard-normal vectors ξ_b and the NLL adds
GRAD_NOISE·mean_b ξ_b·θ/N, zero-mean gradient noise of standard deviation GRAD_NOISE/sqrt(B) per coordinate):
  * gauss: 10-D N(μ, diag σ²), μ = linspace(−2, 2), σ = linspace(0.5, 1.5);
  * banana: θ1 ~ N(0, 1), θ2 | θ1 ~ N(θ1² − 1, 0.5²): Var θ1 = 1, Var θ2 = 0.25 + 2 = 2.25, E[θ1²θ2] = 3 − 1 = 2.
Statistics pooled over CHAINS chains after BURN updates. SGHMC at the same ε and C, over 3 seeds, is the yardstick:
each rival's variance ratios (every coordinate) and, on the banana, E[θ1²θ2] must lie inside SGHMC's 3-seed range
widened by SLACK (seed noise and the splitting's own O(ε) bias: what a correct sampler may differ by at this step),
and its largest mean error (in σ) be at most SGHMC's largest + SLACK. The preconditioned samplers freeze at update
BURN; the warm start hands over to SGHMC at update BURN // 2.

Scale-adapted SGHMC runs at its published defaults (ε = 1e-2, m = 0.05: no "same step size" exists), 3× longer
(its step is ≈ 7× smaller than SGHMC's here), and its test documents the published method's bias with the measured
values: its averaging window stays at τ ≈ 1 (the mean gradient is as large as its spread over so short a window), so
the frozen v̂ is the last few squared gradients — a random per-chain mass; chains with a large M⁻¹ run hot.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import adaptive_sghmc as A, baoab as B, precond_sghmc as P, warm_sghmc as W
from l2e.types import Posterior

N, BATCH, GRAD_NOISE = 100, 8, 0.5
STEPS, BURN, CHAINS = 8000, 2000, 64
LR, FRICTION = 0.5, 3.0  # ε = sqrt(lr/N) ≈ 0.07
SLACK = 0.08
MU, SD = np.linspace(-2.0, 2.0, 10), np.linspace(0.5, 1.5, 10)


def gauss_logp(x):
    return -0.5 * jnp.sum((x - MU) ** 2 / SD**2)


def banana_logp(x):
    return -0.5 * x[0] ** 2 - 0.5 * (x[1] - x[0] ** 2 + 1.0) ** 2 / 0.25


TARGETS = {"gauss": (gauss_logp, 10, MU, SD**2), "banana": (banana_logp, 2, np.array([0.0, 0.0]),
                                                               np.array([1.0, 2.25]))}


def posterior(logp) -> Posterior:
    return Posterior(lambda th, b: (-logp(th) + GRAD_NOISE * jnp.dot(jnp.mean(b, axis=0), th)) / N,
                     lambda th: jnp.zeros(()), N)


def draws(sampler, dim, seed=0, steps=STEPS, burn=BURN) -> np.ndarray:
    """(CHAINS·(steps − burn), dim) positions after burn-in, chains from θ₀ = 0."""

    def chain(key):
        def body(state, k):
            kb, ks = jax.random.split(k)
            state, _ = sampler.step(ks, state, jax.random.normal(kb, (BATCH, dim)))
            return state, state.position

        return jax.lax.scan(body, sampler.init(jnp.zeros(dim)), jax.random.split(key, steps))[1][burn:]

    xs = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(seed), CHAINS))
    return np.asarray(xs, np.float64).reshape(-1, dim)


def stats(xs, target) -> dict:
    _, _, mean, var = TARGETS[target]
    out = {"var_ratio": xs.var(0) / var, "mean_error": np.abs(xs.mean(0) - mean) / np.sqrt(var)}
    if target == "banana":
        out["e_x1sq_x2"] = float(np.mean(xs[:, 0] ** 2 * xs[:, 1]))
    return out


RIVALS = {
    "baoab": lambda post: B.baoab(post, LR, FRICTION),
    "precond_rmsprop": lambda post: P.precond_sghmc(post, LR, FRICTION, preconditioner="rmsprop", freeze_step=BURN),
    "precond_fisher": lambda post: P.precond_sghmc(post, LR, FRICTION, preconditioner="fisher", freeze_step=BURN),
    "warm_sghmc": lambda post: W.warm_sghmc(post, LR, FRICTION, warm_steps=BURN // 2, warm_lr=1e-2),
}


@functools.lru_cache(maxsize=None)
def sghmc_band(target):
    logp, dim, _, _ = TARGETS[target]
    runs = [stats(draws(l2e.sghmc(posterior(logp), LR, FRICTION), dim, seed), target) for seed in range(3)]
    band = {"var_ratio": (np.min([r["var_ratio"] for r in runs], 0), np.max([r["var_ratio"] for r in runs], 0)),
            "mean_error": max(float(np.max(r["mean_error"])) for r in runs)}
    if target == "banana":
        values = [r["e_x1sq_x2"] for r in runs]
        band["e_x1sq_x2"] = (min(values), max(values))
    return band


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("rival", sorted(RIVALS))
def test_rival_lands_in_sghmc_band(rival, target):
    logp, dim, _, _ = TARGETS[target]
    got = stats(draws(RIVALS[rival](posterior(logp)), dim), target)
    band = sghmc_band(target)
    lo, hi = band["var_ratio"]
    assert np.all(got["var_ratio"] >= lo - SLACK) and np.all(got["var_ratio"] <= hi + SLACK), \
        (rival, target, got["var_ratio"], lo, hi)
    assert np.max(got["mean_error"]) <= band["mean_error"] + SLACK, (rival, target, got["mean_error"])
    if target == "banana":
        lo, hi = band["e_x1sq_x2"]
        assert lo - 2 * SLACK <= got["e_x1sq_x2"] <= hi + 2 * SLACK, (rival, got["e_x1sq_x2"], (lo, hi))


ADAPTIVE_MEASURED = {"gauss": (0.95, 1.25), "banana": (0.8, 2.5)}
"""Where scale-adapted SGHMC's variance ratios fall at its published defaults (CHAINS chains, 3·STEPS updates, burn-in
3·BURN; measured: Gaussian 1.02–1.16 per coordinate, banana 1.62 / 1.76 with E[θ1²θ2] 4.8 against 2): the published
method's bias, documented — a fix or a regression moves them out of these ranges."""


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_scale_adapted_sghmc_published_defaults(target):
    logp, dim, _, _ = TARGETS[target]
    xs = draws(A.adaptive_sghmc(posterior(logp), burn_in=3 * BURN), dim, steps=3 * STEPS, burn=3 * BURN)
    got = stats(xs, target)
    lo, hi = ADAPTIVE_MEASURED[target]
    assert np.all(np.isfinite(xs))
    assert np.all((got["var_ratio"] >= lo) & (got["var_ratio"] <= hi)), (target, got)
    if target == "banana":  # hot: the documented bias, not SGHMC's band
        assert got["e_x1sq_x2"] > 2.0 + 2 * SLACK, got


def _quadratic(d=6):
    return Posterior(lambda p, b: 0.5 * jnp.sum((p - jnp.mean(b, 0)) ** 2 * jnp.arange(1, d + 1)) / N,
                     lambda p: jnp.zeros(()), N)


def test_preconditioners_freeze_and_window_is_mass_sghmc():
    """Before the freeze M⁻¹ = 1 (SGHMC); at it M⁻¹ is set once (largest value 1) and never changes after; the window
    update is θ' − θ = ε·M⁻¹r'."""
    post = _quadratic()
    for rule in P.PRECONDITIONERS:
        alg = P.precond_sghmc(post, 0.3, 2.0, preconditioner=rule, freeze_step=40)
        step = jax.jit(alg.step)
        state = alg.init(jnp.linspace(-1.0, 1.0, 6))
        eps = np.sqrt(0.3 / N)
        for t in range(60):
            new, info = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(100 + t), (4, 6)))
            if t < 40:
                np.testing.assert_array_equal(new.inv_mass, np.ones(6))
            elif t == 40:
                frozen = np.asarray(new.inv_mass)
                assert abs(np.max(np.log(frozen))) < 1e-6 and np.ptp(np.log(frozen)) > 0.1, (rule, frozen)
            else:
                np.testing.assert_array_equal(new.inv_mass, frozen)
            if t >= 40:  # float32, |Δθ| ≤ 0.1: a few roundings of relative 6e-8 each
                np.testing.assert_allclose(new.position - state.position, eps * frozen * new.momentum, rtol=1e-4,
                                           atol=1e-7)
            state = new


def test_fisher_diagonal_recovers_gaussian_scales():
    """On N(0, diag s²) with gradient noise, the Fisher rule's M⁻¹ ∝ s² (the minibatch noise subtracted): its log
    correlates with log s² to > 0.95 and its spread is within 25 % of log s²'s."""
    s = np.geomspace(0.3, 3.0, 8)
    post = Posterior(lambda th, b: (0.5 * jnp.sum(th**2 / s**2) + 2.0 * jnp.dot(jnp.mean(b, 0), th)) / N,
                     lambda th: jnp.zeros(()), N)
    alg = P.precond_sghmc(post, 0.5, 3.0, preconditioner="fisher", freeze_step=3000, adapt_fraction=0.8)

    def chain(key):
        def body(state, k):
            kb, ks = jax.random.split(k)
            return alg.step(ks, state, jax.random.normal(kb, (8, 8)))[0], None

        return jax.lax.scan(body, alg.init(jnp.zeros(8)), jax.random.split(key, 3001))[0].inv_mass

    inv_mass = np.asarray(jax.jit(chain)(jax.random.PRNGKey(0)))
    target = np.log(s**2)
    got = np.log(inv_mass)
    assert np.corrcoef(got, target)[0, 1] > 0.95, got
    assert abs(np.ptp(got) / np.ptp(target) - 1.0) < 0.25, (np.ptp(got), np.ptp(target))


def test_baoab_first_kick_is_half_and_positions_are_baoab():
    """Update 0 kicks by ε/2, later updates by ε (the two half kicks merged); with C = 0+ the O step is the identity
    and the chain is velocity Verlet (leapfrog) on the minibatch potential."""
    post = _quadratic()
    alg = B.baoab(post, 0.3, friction=1e-8)
    eps = np.sqrt(0.3 / N)
    batch = jnp.zeros((4, 6))
    state = alg.init(jnp.ones(6))
    x, r = np.ones(6, np.float64), np.zeros(6)
    grad = lambda p: np.arange(1, 7) * p  # noqa: E731  (∇Ũ = N·∇mean NLL)
    for t in range(5):
        state, _ = alg.step(jax.random.PRNGKey(t), state, batch)
        r = r - (0.5 if t == 0 else 1.0) * eps * grad(x)
        x = x + eps * r
    np.testing.assert_allclose(state.position, x, rtol=1e-5)


def test_adaptive_sghmc_estimates_freeze_after_burn_in():
    post = _quadratic()
    alg = A.adaptive_sghmc(post, burn_in=10)
    step = jax.jit(alg.step)
    state = alg.init(jnp.ones(6))
    for t in range(15):
        new, info = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(50 + t), (4, 6)))
        if t >= 10:
            np.testing.assert_array_equal(new.sq_grad, state.sq_grad)
        else:
            assert not np.array_equal(new.sq_grad, state.sq_grad)
        assert bool(info.is_finite)
        state = new


def test_warm_start_optimises_then_samples():
    """The optimiser phase descends (r stays 0, θ moves towards the minimum); from warm_steps on the step is SGHMC."""
    post = _quadratic()
    alg = W.warm_sghmc(post, 0.3, 2.0, warm_steps=200, warm_lr=0.05)
    step = jax.jit(alg.step)
    state = alg.init(jnp.full(6, 3.0))
    for t in range(200):
        state, info = step(jax.random.PRNGKey(t), state, jnp.zeros((4, 6)))
        assert float(info.kinetic) == 0.0
    assert float(jnp.max(jnp.abs(state.position))) < 0.3
    ref = l2e.sghmc(post, 0.3, 2.0)
    sg = ref.init(state.position)
    for t in range(200, 210):
        state, _ = step(jax.random.PRNGKey(t), state, jnp.zeros((4, 6)))
        sg, _ = ref.step(jax.random.PRNGKey(t), sg, jnp.zeros((4, 6)))
    np.testing.assert_allclose(state.position, sg.position, rtol=1e-6, atol=1e-7)
