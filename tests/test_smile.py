"""SMILE / pSMILE (l2e.smile) on known targets, its guardrail and tuner, and the `smile` / `psmile` evaluation
methods (warm start, shared minibatch budget with 2 gradients per step)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e.smile import SMILEState, build_kernel, init, psmile, smile
from l2e.types import Posterior, SamplingAlgorithm

from conftest import iris_mlp, tiny_eval_config

D = 10


def gaussian_posterior(sigmas, n: int = 1000) -> Posterior:
    """U(x) = ½Σ(x/σ)², minibatch = an additive gradient-noise vector ξ: N·∇nll = ∇U + ξ, flat prior."""
    s = jnp.asarray(sigmas, jnp.float32)
    return Posterior(lambda p, xi: (0.5 * jnp.sum((p["x"] / s) ** 2) + jnp.dot(p["x"], xi)) / n,
                     lambda p: jnp.zeros(()), n)


def run(alg, x0, noise_std, steps: int, key, burn_in: int = 0):
    """(final state, mean x² over kept steps, step sizes, resets) of one chain under noise ξ ~ N(0, ν²) drawn from
    fold_in(key, t); the step key of update t is fold_in(fold_in(key, 1), t) (used only by a partial refresh)."""
    noise_std = jnp.asarray(noise_std, jnp.float32)
    step_key = jax.random.fold_in(key, 1)

    def body(carry, t):
        state, m2, n = carry
        xi = noise_std * jax.random.normal(jax.random.fold_in(key, t), (D,))
        state, info = alg.step(jax.random.fold_in(step_key, t), state, xi)
        keep = t >= burn_in
        x = state.position["x"]
        return (state, m2 + jnp.where(keep, x * x, 0.0), n + keep), (info.step_size, info.reset)

    (state, m2, n), (eps, resets) = jax.lax.scan(body, (alg.init({"x": x0}), jnp.zeros(D), 0), jnp.arange(steps))
    return state, m2 / n, eps, resets


def test_one_step_matches_blackjax_isokinetic_mclachlan():
    """From a unit velocity and the stored exact gradient, one naive SMILE step on a full-batch target equals
    blackjax's isokinetic McLachlan step (position, velocity, gradient to 1e-5; ΔE = kinetic change − Δℓ)."""
    from blackjax.mcmc.integrators import IntegratorState, isokinetic_mclachlan

    sig = jnp.linspace(0.5, 2.0, D)
    post = gaussian_posterior(sig)
    logdensity = lambda x: -post.data_size * post.nll({"x": x}, jnp.zeros(D))  # noqa: E731
    x0 = jax.random.normal(jax.random.PRNGKey(0), (D,))
    u0 = jax.random.normal(jax.random.PRNGKey(1), (D,))
    u0 = u0 / jnp.linalg.norm(u0)
    l0, g0 = jax.value_and_grad(logdensity)(x0)
    bj, dk = isokinetic_mclachlan(logdensity)(IntegratorState(x0, u0, l0, g0), 0.3)
    state = init({"x": x0}, 0.3)._replace(velocity={"x": u0}, grad={"x": g0}, logdensity=l0)
    new, info = build_kernel(post, tuner=False)(jax.random.PRNGKey(2), state, jnp.zeros(D))
    np.testing.assert_allclose(new.position["x"], bj.position, atol=1e-5)
    np.testing.assert_allclose(new.velocity["x"], bj.momentum, atol=1e-5)
    np.testing.assert_allclose(new.grad["x"], bj.logdensity_grad, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(info.energy_change, dk - (bj.logdensity - l0), rtol=1e-4, atol=1e-4)


def test_first_step_turns_the_zero_velocity_to_the_gradient():
    """Velocity starts at 0: the first step moves θ by exactly ε/2 along ∇ℓ(θ₀)/|∇ℓ(θ₀)| (then a unit velocity)."""
    post = gaussian_posterior(jnp.ones(D))
    x0 = jnp.arange(1.0, D + 1.0)
    alg = smile(post, 0.2)
    state, _ = alg.step(jax.random.PRNGKey(0), alg.init({"x": x0}), jnp.zeros(D))
    np.testing.assert_allclose(state.position["x"], x0 - 0.1 * x0 / jnp.linalg.norm(x0), rtol=1e-6)
    assert abs(float(jnp.linalg.norm(state.velocity["x"])) - 1.0) < 1e-6


def _moment_error(eps: float, tuner: bool, decoherence_length: float | None = None) -> float:
    """SMILE's normalised second-moment error (E x² = 1, Var x² = 2) on N(0, I₁₀) with gradient noise ν = 1,
    4 chains × 40,000 steps from exact draws (first 4,000 dropped)."""
    post = gaussian_posterior(jnp.ones(D))
    alg = smile(post, eps, tuner=tuner, decoherence_length=decoherence_length)
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    x0 = jax.random.normal(jax.random.PRNGKey(8), (4, D))
    _, m2, _, _ = jax.jit(jax.vmap(lambda k, x: run(alg, x, jnp.ones(D), 40_000, k, 4_000)))(keys, x0)
    return float(np.mean((np.mean(np.asarray(m2), 0) - 1.0) ** 2 / 2.0))


@pytest.mark.slow
def test_naive_smile_moments_approach_the_target_as_the_step_shrinks():
    """Fixed-step SMILE on a 10-D standard Gaussian under gradient noise ν = 1, in the discretisation-bias regime:
    the second-moment error falls by more than 3× at each halving of ε from 4 to 1 and is < 1e-3 at ε = 1.
    (Below ε ≈ 1 the error of a 40,000-step run grows again: with L = ∞ the gradient noise is the only source of
    randomness and mixes the velocity ever more slowly as ε shrinks.)"""
    e4, e2, e1 = (_moment_error(eps, False) for eps in (4.0, 2.0, 1.0))
    assert e2 < e4 / 3 and e1 < e2 / 3 and e1 < 1e-3, (e4, e2, e1)


def test_the_key_drives_only_the_partial_refresh():
    """As published (no decoherence length) SMILE is deterministic given its minibatches: two keys give the same
    chain bit for bit, and so does L = ∞.  With a finite L the key drives the partial velocity refresh: other keys,
    other velocities, still of unit norm.  The Info has no kinetic term (T_kin is not defined for a unit velocity)."""
    from l2e.smile import SMILEInfo

    post = gaussian_posterior(jnp.linspace(0.5, 2.0, D))
    x0 = jax.random.normal(jax.random.PRNGKey(0), (D,))
    xis = jax.random.normal(jax.random.PRNGKey(1), (30, D))

    def chain(key, **kw):
        alg = smile(post, 0.3, **kw)
        step = jax.jit(alg.step)
        state = alg.init({"x": x0})
        for t in range(30):
            state, _ = step(jax.random.fold_in(key, t), state, xis[t])
        return state

    a, b = chain(jax.random.PRNGKey(2)), chain(jax.random.PRNGKey(3))
    for leaf_a, leaf_b in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(leaf_a, leaf_b)
    inf = chain(jax.random.PRNGKey(3), decoherence_length=float("inf"))
    np.testing.assert_array_equal(inf.velocity["x"], b.velocity["x"])
    r2, r3 = (chain(jax.random.PRNGKey(k), decoherence_length=3.0) for k in (2, 3))
    assert not np.allclose(r2.velocity["x"], r3.velocity["x"]) and not np.allclose(r2.velocity["x"], b.velocity["x"])
    for r in (r2, r3):
        assert abs(float(jnp.linalg.norm(r.velocity["x"])) - 1.0) < 1e-5 or float(jnp.linalg.norm(r.velocity["x"])) == 0
    assert "kinetic" not in SMILEInfo._fields
    with pytest.raises(ValueError, match="decoherence_length"):
        smile(post, 0.3, decoherence_length=0.0)


def test_a_partial_refresh_restores_mixing_at_small_steps():
    """Below ε ≈ 1 fixed-step SMILE without a refresh mixes its velocity ever more slowly (the gradient noise is its
    only randomness); a partial refresh with L = 3 ≈ √d, drawn from the step keys, cuts the second-moment error at
    ε = 0.25 more than 5× (measured: 1.6e-3 → 8.2e-5) — the key's use when a decoherence length is given."""
    e_none, e_refresh = _moment_error(0.25, False), _moment_error(0.25, False, decoherence_length=3.0)
    assert e_refresh < e_none / 5 and e_refresh < 3e-4, (e_none, e_refresh)


def test_tuner_on_a_stationary_target_band_and_downward_drift():
    """SMILE's tuner on N(0, I₁₀) with gradient noise ν = 1, ε₀ = 0.5, 4 chains × 20,000 steps from exact draws:
    ε stays within [1e-4, 2.5] throughout (no runaway, no collapse to the 1e-8 floor), but drifts down (the rule's
    quirk): median ε over the last 2,000 steps < ε₀/10; per step it shrinks in 5–10 % and grows in 3.5–8 % of
    steps (shrinks more often), and the guardrail resets 1–3 % of steps (1 − reset_prob = 2 %)."""
    post = gaussian_posterior(jnp.ones(D))
    alg = smile(post, 0.5)
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    x0 = jax.random.normal(jax.random.PRNGKey(4), (4, D))
    _, _, eps, resets = jax.jit(jax.vmap(lambda k, x: run(alg, x, jnp.ones(D), 20_000, k)))(keys, x0)
    eps, resets = np.asarray(eps), np.asarray(resets)
    assert eps.min() > 1e-4 and eps.max() < 2.5, (eps.min(), eps.max())
    assert np.median(eps[:, -2_000:]) < 0.05
    ratio = eps[:, 11:] / eps[:, 10:-1]
    shrink, grow = float(np.mean(ratio < 0.999)), float(np.mean(ratio > 1.001))
    assert 0.05 < shrink < 0.10 and 0.035 < grow < 0.08 and shrink > grow, (shrink, grow)
    assert 0.01 < resets.mean() < 0.03, resets.mean()


def test_tuner_collapses_the_step_with_exact_gradients():
    """The k ≲ 0.55 quirk: with exact gradients |ΔE| ≈ 1e-6, the Gamma fit's lower quantile is negative, the first
    reset (step 10) sets off a cascade and ε can only shrink: it reaches the 1e-8 floor within 2,000 steps."""
    post = gaussian_posterior(jnp.ones(D))
    _, _, eps, _ = jax.jit(lambda k: run(smile(post, 0.5), jnp.ones(D), jnp.zeros(D), 2_000, k))(
        jax.random.PRNGKey(0))
    assert float(np.asarray(eps)[-1]) == pytest.approx(1e-8)


# --- The published configuration on Gaussians against SGHMC ------------------------------------------------------
# The shipped configuration as the evaluation runs it (the authors' protocol, evaluate.methods.smile): tuner on with
# the SHIPPED constants, 5,000 warm-up + 10,000 sampling steps (their lengths; warm-up 1/3), the public code's
# hand-over at the end of warm-up, 4 chains.  The chains start from exact posterior draws (a stationary start: any
# departure from variance ratio 1 is the sampler's, not burn-in; from the mode itself an exact-gradient chain has a
# zero gradient and a zero velocity and never moves).  Variance ratio: each chain's sample variance over the
# sampling phase ÷ the true variance, averaged over coordinates and chains.  Initial ε: σ_min × {0.01, 0.1, 1, 10}
# (the authors' grids span 10⁻⁴ … 10⁻¹ in θ units for BNNs; on a Gaussian the natural unit is the posterior scale).
# SGHMC, the reference band: the same gradient budget (30,000 gradients, first 1/3 dropped), 3 seeds, from exact
# draws; its step matches SMILE's distance per gradient at ε₀ = σ_min (SMILE moves ε per step of 2 gradients,
# SGHMC ε_s·|r| ≈ ε_s·√d per gradient at T = 1, so ε_s = σ_min / (2√d)); friction C = max(1/σ_max, ε_s·V/0.1) with V
# the mean gradient-noise variance per coordinate at the posterior mean (its noise heating ε_s·V/(2C) ≤ 5 %).
# Targets: a 10-D N(0, diag σ²), σ log-spaced in [10^-0.5, 10^0.5], exact gradients or additive gradient noise
# ν = 1 per coordinate (V = 1); a 12-D Bayesian linear regression (N = 512, features scaled 10^-0.5 … 10^0.5,
# prior N(0, I), unit noise), full batch or minibatches of 32 drawn with replacement (V ≈ 1.8e4 at the mean).

SMILE_STEPS, SMILE_WARMUP, SMILE_CHAINS = 15_000, 5_000, 4
EPS_MULTIPLES = (0.01, 0.1, 1.0, 10.0)


def _diag_target(noise: float):
    """(posterior, batch(key), mean, covariance, V) of the 10-D N(0, diag σ²) with additive gradient noise ν."""
    sig = np.logspace(-0.5, 0.5, 10)
    post = gaussian_posterior(sig)
    return post, (lambda k: noise * jax.random.normal(k, (10,))), np.zeros(10), np.diag(sig**2), noise**2


def _linreg_target(minibatch: bool):
    """(posterior, batch(key), mean, covariance, V) of the 12-D Bayesian linear regression (full batch or B = 32)."""
    rng = np.random.default_rng(0)
    n, d = 512, 12
    x = rng.normal(size=(n, d)) * np.logspace(-0.5, 0.5, d)
    y = x @ rng.normal(size=d) + rng.normal(size=n)
    cov = np.linalg.inv(x.T @ x + np.eye(d))
    mean = cov @ x.T @ y
    xj, yj = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    post = Posterior(lambda p, b: 0.5 * jnp.mean((b[1] - b[0] @ p["x"]) ** 2), lambda p: -0.5 * jnp.sum(p["x"] ** 2),
                     n)
    if not minibatch:
        return post, (lambda k: (xj, yj)), mean, cov, 0.0

    def batch(k):
        i = jax.random.randint(k, (32,), 0, n)
        return xj[i], yj[i]

    grads = jax.vmap(lambda k: jax.grad(lambda t: n * post.nll({"x": t}, batch(k)))(jnp.asarray(mean, jnp.float32)))(
        jax.random.split(jax.random.PRNGKey(0), 2000))
    return post, batch, mean, cov, float(np.asarray(grads).var(0).mean())


TARGETS = {"diag10": _diag_target, "linreg12": _linreg_target}


def _chain_variance(alg, x0, batch, steps: int, warm: int, key, handover_at=None):
    """Per-coordinate variance of one chain's positions after `warm` steps; ε at the hand-over and at the end.
    Update t: fold_in(key, t) split into the minibatch key and the kernel key."""
    from evaluate.methods.smile import handover

    def body(state, t):
        if handover_at is not None:
            state = handover(state, handover_at)
        kb, kn = jax.random.split(jax.random.fold_in(key, t))
        state, info = alg.step(kn, state, batch(kb))
        return state, (state.position["x"], getattr(info, "step_size", jnp.zeros(())))

    _, (xs, eps) = jax.lax.scan(body, alg.init({"x": x0}), jnp.arange(steps))
    return xs[warm:].var(0), eps[warm], eps[-1]


def _published_smile(target, preconditioned: bool, seed: int = 0):
    """(variance ratio per ε₀, ε at the hand-over (chains, ε₀), final ε (chains, ε₀), ε₀ grid) of the shipped SMILE /
    pSMILE configuration (block comment above) on `target` = (posterior, batch, mean, cov, V)."""
    post, batch, mean, cov, _ = target
    sd = np.sqrt(np.diag(cov))
    eps0 = jnp.asarray(sd.min() * np.asarray(EPS_MULTIPLES), jnp.float32)
    x0 = jax.random.multivariate_normal(jax.random.PRNGKey(seed), jnp.asarray(mean, jnp.float32),
                                        jnp.asarray(cov, jnp.float32), (SMILE_CHAINS,))
    keys = jax.random.split(jax.random.PRNGKey(100 + seed), SMILE_CHAINS)

    def one(e, x, k):
        return _chain_variance(smile(post, e, preconditioned=preconditioned), x, batch, SMILE_STEPS, SMILE_WARMUP, k,
                               handover_at=SMILE_WARMUP)

    var, eps_h, eps_end = jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None)))(eps0, x0, keys)
    return (np.asarray(var) / sd**2).mean(axis=(1, 2)), np.asarray(eps_h).T, np.asarray(eps_end).T, np.asarray(eps0)


def _sghmc_band(target) -> list[float]:
    """SGHMC's variance ratio over 3 seeds at the comparable step and noise-aware friction (block comment above)."""
    from l2e.sghmc import sghmc

    post, batch, mean, cov, v = target
    sd = np.sqrt(np.diag(cov))
    eps = sd.min() / (2 * math.sqrt(len(sd)))
    alg = sghmc(post, eps**2 * post.data_size, max(1.0 / sd.max(), eps * v / 0.1))
    out = []
    for seed in range(3):
        x0 = jax.random.multivariate_normal(jax.random.PRNGKey(seed), jnp.asarray(mean, jnp.float32),
                                            jnp.asarray(cov, jnp.float32))
        var, _, _ = jax.jit(lambda x, k: _chain_variance(alg, x, batch, 2 * SMILE_STEPS, 2 * SMILE_WARMUP, k))(
            x0, jax.random.PRNGKey(200 + seed))
        out.append(float(np.mean(np.asarray(var) / sd**2)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["diag10", "linreg12"])
def test_published_smile_freezes_on_gaussians_with_exact_gradients(name):
    """Exact gradients: SGHMC's variance ratio over 3 seeds lies in [0.9, 1.1] (measured 1.015–1.067 diag10,
    0.940–1.067 linreg12); the published SMILE and pSMILE end every chain at the 1e-8 floor of ε from every ε₀ of the
    grid (the collapse of the module doc: |ΔE| small and heavy-tailed, Gamma shape < 0.574, ε only shrinks), so their
    chains freeze: variance ratio < 1e-6 for ε₀ ≤ σ_min (measured < 3e-11 over 5 seeds) and < 0.4 at ε₀ = 10σ_min
    (measured ≤ 0.23, a chain that moved during part of the sampling phase before freezing) — far below SGHMC's
    band.  A fix of the collapse turns these assertions."""
    target = TARGETS[name](0.0) if name == "diag10" else TARGETS[name](False)
    band = _sghmc_band(target)
    assert 0.9 < min(band) and max(band) < 1.1, band
    for pre in (False, True):
        ratio, _, eps_end, _ = _published_smile(target, pre)
        assert np.all(eps_end == np.float32(1e-8)), (pre, eps_end)
        assert np.all(ratio[:3] < 1e-6) and ratio[3] < 0.4, (pre, ratio)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["diag10", "linreg12"])
def test_published_smile_variance_is_set_by_the_initial_step_under_gradient_noise(name):
    """Gradient noise: the tuner does not steer ε to a scale, so the variance ratio the published SMILE / pSMILE
    reach is set by ε₀: it rises with ε₀ at every step of the grid and by more than 5× over it (measured ≥ 6×).
    Ranges asserted (ratio at ε₀ = 0.01σ_min, σ_min, 10σ_min; the 5-seed measured min–max, then widened by 1.5×
    each way; this test runs seed 0):
    - diag10 (additive noise ν = 1): SGHMC band measured 1.069–1.121 (asserted [0.95, 1.25]); SMILE 0.022–0.092,
      0.31–0.46, 0.67–1.83; pSMILE 0.029–0.068, 0.20–0.28, 0.42–1.11 — at the comparable step (ε₀ = σ_min) both are
      biased low, 0.2–0.5 of the target variance, far below SGHMC's band;
    - linreg12 (minibatches of 32): SGHMC band measured 0.817–1.050 (asserted [0.65, 1.25]); SMILE 0.019–0.088,
      0.81–1.00, 1.26–4.47; pSMILE 0.020–0.073, 0.76–0.89, 5.1–7.0 — at ε₀ = σ_min SMILE lands in SGHMC's band and
      pSMILE in or just below it; two grid points lower they are 10× too small, one higher 1.3–7× too large."""
    target = TARGETS[name](1.0) if name == "diag10" else TARGETS[name](True)
    band = _sghmc_band(target)
    lo, hi = {"diag10": (0.95, 1.25), "linreg12": (0.65, 1.25)}[name]
    assert lo < min(band) and max(band) < hi, band
    measured = {("diag10", False): ((0.022, 0.092), (0.31, 0.46), (0.67, 1.83)),
                ("diag10", True): ((0.029, 0.068), (0.20, 0.28), (0.42, 1.11)),
                ("linreg12", False): ((0.019, 0.088), (0.81, 1.00), (1.26, 4.47)),
                ("linreg12", True): ((0.020, 0.073), (0.76, 0.89), (5.1, 7.0))}
    for pre in (False, True):
        ratio, _, _, _ = _published_smile(target, pre)
        assert np.all(np.diff(ratio) > 0) and ratio[-1] > 5 * ratio[0], (pre, ratio)
        for value, (r_lo, r_hi) in zip(ratio[[0, 2, 3]], measured[(name, pre)]):
            assert r_lo / 1.5 < value < r_hi * 1.5, (pre, ratio)


def _tuned_state(post, x0, mean: float, std: float) -> SMILEState:
    """A state past the tuner's 9-step hold with |ΔE| statistics (mean, std) and a stored gradient/log density."""
    logdensity = lambda x: -post.data_size * post.nll({"x": x}, jnp.zeros(D))  # noqa: E731
    l0, g0 = jax.value_and_grad(logdensity)(x0)
    u0 = jnp.ones(D) / math.sqrt(D)
    return init({"x": x0}, 0.3)._replace(velocity={"x": u0}, grad={"x": g0}, logdensity=l0, step=jnp.int32(50),
                                         de_mean=jnp.float32(mean), de_std=jnp.float32(std))


def test_reset_restores_the_previous_position_and_zeroes_the_velocity():
    """With |ΔE| statistics ≈ 1e-6 every step is far in the tail: the position is the old one exactly, the velocity
    is 0, ε shrinks by (1 − δ); with statistics ≈ 1e6 the step is kept and ε grows by (1 + δ)."""
    post = gaussian_posterior(jnp.linspace(0.5, 2.0, D))
    x0 = jax.random.normal(jax.random.PRNGKey(0), (D,))
    kernel = build_kernel(post)
    new, info = kernel(jax.random.PRNGKey(1), _tuned_state(post, x0, 1e-6, 1e-6), jnp.zeros(D))
    assert bool(info.reset)
    np.testing.assert_array_equal(new.position["x"], x0)
    np.testing.assert_array_equal(new.velocity["x"], np.zeros(D))
    assert float(new.step_size) == pytest.approx(0.3 * 0.98)
    assert not np.allclose(new.grad["x"], _tuned_state(post, x0, 1, 1).grad["x"])  # the rejected position's
    new, info = kernel(jax.random.PRNGKey(1), _tuned_state(post, x0, 1e6, 1e-6), jnp.zeros(D))
    assert not bool(info.reset) and not np.allclose(new.position["x"], x0)
    assert float(new.step_size) == pytest.approx(0.3 * 1.02)


def test_psmile_learns_the_gradient_noise_scale():
    """pSMILE under gradient noise of standard deviation 30 on coordinate 0 and 0.3 elsewhere: after 3,000 steps
    its running gradient standard deviation is > 10× larger on coordinate 0 than on any other, and the
    position scale s (rms 1) is largest there."""
    post = gaussian_posterior(jnp.ones(D))
    noise = jnp.full((D,), 0.3).at[0].set(30.0)
    state, _, _, _ = jax.jit(lambda k: run(psmile(post, 0.05), jnp.zeros(D), noise, 3_000, k))(jax.random.PRNGKey(5))
    sd = np.asarray(state.grad_sd["x"])
    assert sd[0] > 10 * sd[1:].max(), sd


def _eval_cfg(**settings):
    return tiny_eval_config(iris_mlp(8), ("deep_ensemble", "smile", "psmile"),
                            dict(deep_ensemble=dict(lrs=(0.1,)), **settings), thinning=6)


@pytest.mark.slow
def test_smile_and_psmile_through_evaluate():
    """The authors' protocol in the evaluation: warm-started from the deep ensemble, ε₀ tuned over
    settings.step_sizes (not the ensemble's lr), inside the shared budget: grad_evals = G = 40 minibatch gradients
    (2 per step: 20 steps on one chain, 10 on each of 2); warm-up round(n/3) steps (7 of 20, 3 of 10), then K = 4
    finite samples spread over the sampling phase (thinning (n − warm-up) // draws: 13 // 4 = 3, 7 // 2 = 3); ESS
    needs ≥ 4 draws per chain (none for 2 chains of 2); settings validated."""
    from evaluate.config import ConfigError, apply_overrides
    from evaluate.run import evaluate

    res = evaluate(_eval_cfg(smile=dict(step_sizes=(0.01, 0.1)), psmile=dict(chains=2, step_sizes=(0.05,))), None,
                   progress=False)
    (task,) = res["tasks"].values()
    for name, chains, warm, grid in (("smile", 1, 7, (0.01, 0.1)), ("psmile", 2, 3, (0.05,))):
        m = task["methods"][name]
        hp = m["hyperparameters"]
        assert m["grad_evals"] == 40 and m["gradient"] == "minibatch (B=16)" and m["budget"].startswith("shared")
        assert m["num_samples"] == 4 and m["divergent_chains"] == 0 and math.isfinite(m["nll"]), name
        assert hp["chains"] == chains and hp["steps_per_chain"] == 20 // chains and hp["thinning"] == 3
        assert hp["warmup_steps"] == warm and hp["step_size"] in grid and "step_size0" not in hp
        assert hp["warm_start"]["method"] == "deep_ensemble" and len(hp["handover_step_size"]) == chains
        assert hp["likelihood_scale"] == 16 * (task["data"]["train"] // 16) and len(hp["final_step_size"]) == chains
        assert (m["ess"] is None) if chains == 2 else (m["ess"]["chains"] == 1 and m["ess"]["draws_per_chain"] == 4)
    assert set(task["methods"]["smile"]["hyperparameters"]["grid"]) == {"step_size=0.01", "step_size=0.1"}
    with pytest.raises(ConfigError, match="settings.psmile.chains"):
        apply_overrides(_eval_cfg(), ["settings.psmile.chains=3"])
    with pytest.raises(ConfigError, match="settings.smile.likelihood_scale"):
        apply_overrides(_eval_cfg(), ["settings.smile.likelihood_scale=half"])
    with pytest.raises(ConfigError, match="settings.smile.warmup_fraction"):
        apply_overrides(_eval_cfg(), ["settings.smile.warmup_fraction=1"])
    with pytest.raises(ConfigError, match="settings.smile.step_sizes"):
        apply_overrides(_eval_cfg(), ["settings.smile.step_sizes=0"])


def test_the_evaluation_hands_over_from_warm_up_as_the_public_code():
    """At update number warmup_steps the evaluation's kernel zeroes the velocity, stored gradient and stored log
    density (the public code builds the sampling state anew from the warm-up state) and keeps ε, the |ΔE|
    statistics and the step count: that step moves θ by exactly ε/2 along ∇ℓ(θ)/|∇ℓ(θ)|, as a first step, and its
    ΔE has no log-density term (the step equals one from the same state with those three fields zeroed by hand).
    The step before is an ordinary one; the samples all come after the hand-over."""
    from types import SimpleNamespace

    from evaluate.methods.smile import SMILESettings, _kernel, smile_schedule, warmup_steps

    post = gaussian_posterior(jnp.ones(D))
    task = type("T", (), {"posterior": post})()
    kernel = _kernel(task, False, True, float(post.data_size))
    args = {"reset_prob": 0.98, "adaption_prob": 0.1, "adaption_strength": 0.02, "smoothing": 0.01,
            "warmup_steps": jnp.int32(50)}
    x0 = jnp.arange(1.0, D + 1.0)
    state = _tuned_state(post, x0, 1.0, 1.0)  # step 50, unit velocity, stored gradient and log density
    new, info = kernel(jax.random.PRNGKey(0), state, jnp.zeros(D), args)
    np.testing.assert_allclose(new.position["x"], x0 - 0.15 * x0 / jnp.linalg.norm(x0), rtol=1e-6)
    zeroed = state._replace(velocity={"x": jnp.zeros(D)}, grad={"x": jnp.zeros(D)}, logdensity=jnp.float32(0.0))
    by_hand, info_by_hand = kernel(jax.random.PRNGKey(0), zeroed, jnp.zeros(D), {**args, "warmup_steps": jnp.int32(0)})
    for a, b in zip(jax.tree.leaves((new, info)), jax.tree.leaves((by_hand, info_by_hand))):
        np.testing.assert_array_equal(a, b)
    assert int(new.step) == 51 and float(new.step_size) == float(by_hand.step_size)
    ordinary, _ = kernel(jax.random.PRNGKey(0), state, jnp.zeros(D), {**args, "warmup_steps": jnp.int32(49)})
    assert not np.allclose(ordinary.position["x"], new.position["x"])
    cfg = SimpleNamespace(num_steps=2000, num_samples=10, batch_size=64, chunk=2)
    sched = smile_schedule(cfg, SMILESettings(chains=5))
    assert sched.num_steps == 200 and min(sched.sample_steps) > warmup_steps(200, 1 / 3) == 67


def test_a_nan_energy_error_stops_the_tuner():
    """A step whose minibatch log density is NaN (ξ = (+∞, −∞, 0, …) at positive coordinates) gives is_finite
    False and NaN |ΔE| statistics; afterwards nothing resets and ε stays fixed (the public code's behaviour)."""
    post = gaussian_posterior(jnp.ones(D))
    alg = smile(post, 0.5)
    state, _, _, _ = jax.jit(lambda k: run(alg, jnp.ones(D), jnp.ones(D), 50, k))(jax.random.PRNGKey(0))
    state = state._replace(position={"x": jnp.full((D,), 3.0)})
    xi = jnp.zeros(D).at[0].set(jnp.inf).at[1].set(-jnp.inf)
    state, info = alg.step(jax.random.PRNGKey(0), state, xi)
    assert not bool(info.is_finite) and np.isnan(float(state.de_mean))
    eps0 = float(state.step_size)
    state = state._replace(position={"x": jnp.ones(D)}, logdensity=jnp.float32(-5.0))
    _, _, eps, resets = jax.jit(lambda s, k: run(SamplingAlgorithm(lambda p: s, alg.step), jnp.ones(D), jnp.ones(D),
                                                 200, k))(state, jax.random.PRNGKey(1))
    assert np.all(np.asarray(eps) == eps0) and not np.asarray(resets).any()


@pytest.mark.slow
def test_smile_under_a_wall_time_budget():
    """budget="seconds": SMILE's probe reports seconds per gradient evaluation (half a step), so its G (gradient
    evaluations, 2 per step) × that ≈ the budget, as for every minibatch method; its FLOPs are per step."""
    from evaluate.run import evaluate

    cfg = _eval_cfg()
    cfg = type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__}, "methods": ("smile",),
                       "tune": False, "budget": "seconds", "budget_seconds": 0.5})
    (task,) = evaluate(cfg, None, progress=False)["tasks"].values()
    m = task["methods"]["smile"]
    tb = m["time_budget"]
    q = 2 * cfg.num_samples * cfg.chunk
    assert m["grad_evals"] == tb["num_steps"] and m["hyperparameters"]["steps_per_chain"] == tb["num_steps"] // 2
    assert abs(tb["num_steps"] * tb["seconds_per_step"] - 0.5) <= q * tb["seconds_per_step"] / 2 or \
        tb["num_steps"] == q
    assert m["flops_per_step"] > 0
