"""Diagnostics against known answers: AR(1) ESS, R-hat on shifted chains, hand-computed regression metrics."""
import blackjax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from evaluate import diagnostics as dg
from l2e.mclmc import ess_geyer


def ar1(phi, n, m=1, k=1, seed=0):
    """m chains of a stationary AR(1) x_t = φ x_{t−1} + sqrt(1−φ²) e_t, shape (m, n, k)."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((m, n, k))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    s = np.sqrt(1 - phi**2)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + s * e[:, t]
    return x


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_ess_ar1_matches_theory(phi):
    """Mean over 20 coordinates of the single-chain ESS within 15 % of n(1−φ)/(1+φ)."""
    n = 20000
    x = ar1(phi, n, k=20)[0]
    theory = n * (1 - phi) / (1 + phi)
    ess = dg.ess_single_chain(x)
    assert abs(ess.mean() / theory - 1) < 0.15
    # the jnp estimator used by MILE's phase III agrees (float32)
    np.testing.assert_allclose(np.asarray(ess_geyer(jnp.asarray(x, jnp.float32))), ess, rtol=2e-2)


def test_ess_iid_is_n_and_bulk_multichain():
    x = np.random.default_rng(1).standard_normal((4, 2000, 10))
    np.testing.assert_allclose(dg.ess_single_chain(x[0]).mean(), 2000, rtol=0.1)
    np.testing.assert_allclose(dg.ess_multi_chain(x).mean(), 8000, rtol=0.1)
    np.testing.assert_allclose(dg.ess_bulk(x).mean(), 8000, rtol=0.1)
    # bulk ESS of AR(1) over 4 chains and the blackjax estimator agree with theory / with ours
    y = ar1(0.8, 4000, m=4, k=5, seed=2)
    theory = 4 * 4000 * 0.2 / 1.8
    assert abs(dg.ess_bulk(y).mean() / theory - 1) < 0.15
    bj = np.asarray(blackjax.diagnostics.effective_sample_size(jnp.asarray(y), 0, 1))
    np.testing.assert_allclose(dg.ess_multi_chain(y), bj, rtol=2e-2)


def test_rhat_detects_shifted_chains():
    x = np.random.default_rng(3).standard_normal((4, 1000, 5))
    assert np.all(np.abs(dg.split_rhat(x) - 1) < 0.01)
    assert np.all(np.abs(dg.split_rhat(x, rank=False) - 1) < 0.01)
    shifted = x + np.arange(4)[:, None, None] * 1.0
    assert np.all(dg.split_rhat(shifted) > 1.1)
    # chainwise: a well-mixed chain passes, a chain drifting between sub-chains fails
    assert np.all(dg.chainwise_rhat(x[0]) < 1.02)
    drift = x[0] + np.repeat(np.arange(4.0), 250)[:, None]
    assert np.all(dg.chainwise_rhat(drift) > 1.1)
    fr = dg.rhat_fraction_per_leaf({"good": x, "bad": x + np.linspace(0, 3, 1000)[None, :, None]})
    assert fr["good"] == 1.0 and fr["bad"] == 0.0


def test_loss_barrier_quadratic_path():
    """loss = −w² + 5 + b from (w, b) = (−1, 0) to (1, 2): loss(λ) = −(2λ−1)² + 5 + 2λ, chord 4 + 4λ,
    difference 1 − (2λ−1)², so the barrier is exactly 1 at λ = 1/2."""
    loss = lambda p: -p["w"][0] ** 2 + 5.0 + p["b"]
    b, lams, losses = dg.loss_barrier(loss, {"w": np.array([-1.0]), "b": 0.0}, {"w": np.array([1.0]), "b": 2.0},
                                      num_points=21)
    assert b == pytest.approx(1.0, abs=1e-12)
    assert losses[10] == pytest.approx(6.0)


def test_regression_metrics_hand_values():
    y = np.array([0.0, 1.0])
    mu = np.array([[0.0, 1.0], [1.0, 1.0]])  # 2 samples × 2 points
    sigma = np.array([[1.0, 1.0], [1.0, 2.0]])
    p0 = 0.5 * (norm.pdf(0, 0, 1) + norm.pdf(0, 1, 1))
    p1 = 0.5 * (norm.pdf(1, 1, 1) + norm.pdf(1, 1, 2))
    assert dg.regression_lppd(y, mu, sigma) == pytest.approx(0.5 * (np.log(p0) + np.log(p1)), rel=1e-12)
    assert dg.regression_rmse(y, mu) == pytest.approx(np.sqrt(0.5 * 0.5**2), rel=1e-12)
    # calibration: a correct predictive is calibrated, an overconfident one is not
    rng = np.random.default_rng(0)
    yy = rng.standard_normal(4000)
    good, cov = dg.calibration_error(yy, np.zeros((20, 4000)), np.ones((20, 4000)), num_draws=50)
    bad, cov_b = dg.calibration_error(yy, np.zeros((20, 4000)), 0.3 * np.ones((20, 4000)), num_draws=50)
    assert good < 0.02 and bad > 0.3 and np.all(cov_b < cov)


def test_ood_auroc_msp_and_divergent():
    p_in = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]])
    p_out = np.array([[0.6, 0.4], [0.75, 0.25]])
    # MSP in: .9 .8 .7 ; out: .6 .75 → pairs in>out: (.9:2)+(.8:2)+(.7:1) = 5 of 6
    assert dg.ood_auroc_msp(p_in, p_out) == pytest.approx(5 / 6)
    s = {"a": np.zeros((3, 4)), "b": np.array([[0.0], [np.nan], [np.inf]])}
    n, mask = dg.divergent_chains(s)
    assert n == 2 and mask.tolist() == [False, True, True]
