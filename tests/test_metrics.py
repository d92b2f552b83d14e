"""Predictive metrics against hand-computed values: the likelihoods' metrics (tasks.likelihoods: categorical BMA
metrics, Gaussian mixture metrics, the Task-facing likelihood objects) and evaluate.metrics' comparisons."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from evaluate import metrics as M
from tasks.likelihoods import Classification, GaussianRegression, categorical as C, gaussian as G

# Two samples x three points x two classes, written out by hand.
P1 = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
P2 = np.array([[0.7, 0.3], [0.2, 0.8], [0.4, 0.6]])
LOGP = np.log(np.stack([P1, P2]))  # (2, 3, 2)
LABELS = np.array([0, 0, 1])
BMA = np.array([[0.8, 0.2], [0.4, 0.6], [0.3, 0.7]])  # (P1 + P2) / 2 by hand


def test_bma_probs_hand():
    np.testing.assert_allclose(C.bma_probs(LOGP), BMA, rtol=0, atol=1e-12)
    np.testing.assert_allclose(C.bma_log_probs(LOGP), np.log(BMA), atol=1e-12)


def test_accuracy_nll_hand():
    # predictions [0, 1, 1] vs labels [0, 0, 1]
    assert C.accuracy(BMA, LABELS) == pytest.approx(2 / 3)
    expected_nll = -(math.log(0.8) + math.log(0.4) + math.log(0.7)) / 3
    assert C.nll(BMA, LABELS) == pytest.approx(expected_nll, rel=1e-12)
    assert C.nll_from_log_probs(np.log(BMA), LABELS) == pytest.approx(expected_nll, rel=1e-12)


def test_nll_clips_zero_probability():
    val = C.nll(np.array([[1.0, 0.0]]), np.array([1]))
    assert math.isfinite(val)
    assert val == pytest.approx(-math.log(np.finfo(np.float64).tiny))


def test_ece_hand_three_points():
    # conf 0.8 (correct), 0.6 (wrong), 0.7 (correct), each alone in its 1/15 bin.
    assert C.ece(BMA, LABELS) == pytest.approx((0.2 + 0.6 + 0.3) / 3, abs=1e-12)


def test_ece_perfectly_calibrated_is_zero():
    probs = np.tile([0.8, 0.2], (10, 1))
    labels = np.array([0] * 8 + [1] * 2)  # 80 % correct at confidence 0.8
    assert C.ece(probs, labels) == pytest.approx(0.0, abs=1e-12)
    assert C.ece(np.eye(3), np.arange(3)) == pytest.approx(0.0, abs=1e-12)


def test_ece_miscalibrated_known():
    probs = np.tile([0.9, 0.1], (10, 1))
    labels = np.array([0] * 5 + [1] * 5)  # 50 % correct at confidence 0.9
    assert C.ece(probs, labels) == pytest.approx(0.4, abs=1e-12)


def test_ece_pools_within_a_bin():
    # conf 0.70 and 0.72 share bin (10/15, 11/15]: acc 0.5, conf 0.71 -> ECE 0.21
    probs = np.array([[0.70, 0.30], [0.72, 0.28]])
    labels = np.array([0, 1])
    assert C.ece(probs, labels) == pytest.approx(0.21, abs=1e-12)


def test_ece_bins_are_left_open():
    # conf 0.2 == 3/15 falls in (2/15, 3/15]; conf 0.21 in (3/15, 4/15] -> separate bins.
    probs = np.array([[0.2] * 5, [0.21, 0.2, 0.2, 0.2, 0.19]])
    labels = np.array([0, 1])  # first correct (argmax 0), second wrong
    assert C.ece(probs, labels) == pytest.approx((0.8 + 0.21) / 2, abs=1e-12)


def test_pairwise_kld_identical_is_zero():
    same = np.stack([P1, P1, P1])
    assert C.pairwise_kld(same) == pytest.approx(0.0, abs=1e-12)
    assert C.pairwise_kld_from_log_probs(np.log(same)) == pytest.approx(0.0, abs=1e-12)
    assert C.pairwise_kld(P1[None]) == 0.0


def test_pairwise_kld_two_samples_hand():
    # K=2: mean over ordered pairs = (KL(p||q) + KL(q||p)) / 2 = J / 2,
    # J = sum_c (p_c - q_c)(log p_c - log q_c), written out per point.
    j1 = 0.2 * math.log(0.9 / 0.7) + (-0.2) * math.log(0.1 / 0.3)
    j2 = 0.4 * math.log(0.6 / 0.2) + (-0.4) * math.log(0.4 / 0.8)
    j3 = (-0.2) * math.log(0.2 / 0.4) + 0.2 * math.log(0.8 / 0.6)
    expected = (j1 + j2 + j3) / 3 / 2
    assert C.pairwise_kld(np.stack([P1, P2])) == pytest.approx(expected, rel=1e-12)
    assert C.pairwise_kld_from_log_probs(LOGP) == pytest.approx(expected, rel=1e-12)


def test_pairwise_kld_three_samples_brute_force():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 5))
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    p = np.exp(lp)
    total = 0.0
    for j in range(3):
        for k in range(3):
            if j != k:
                total += np.mean(np.sum(p[j] * (lp[j] - lp[k]), axis=-1))
    assert C.pairwise_kld_from_log_probs(lp) == pytest.approx(total / 6, rel=1e-10)


def test_agreement_tv_self_and_hand():
    assert M.agreement(BMA, BMA) == 1.0
    assert M.total_variation(BMA, BMA) == 0.0
    ref = np.array([[0.6, 0.4], [0.55, 0.45], [0.1, 0.9]])
    # argmax BMA [0,1,1], ref [0,0,1] -> 2/3; TV per point 0.2, 0.15, 0.2
    assert M.agreement(BMA, ref) == pytest.approx(2 / 3)
    assert M.total_variation(BMA, ref) == pytest.approx((0.2 + 0.15 + 0.2) / 3, abs=1e-12)


def test_bma_curve_matches_full_and_single():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 20, 3)) * 2
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = rng.integers(0, 3, size=20)
    curve = C.bma_curve(lp, labels)
    full = C.classification_metrics(lp, labels)
    assert curve["num_samples"] == [1, 2, 3, 4]
    assert len(curve["acc"]) == len(curve["nll"]) == 4
    assert curve["acc"][-1] == pytest.approx(full["acc"])
    assert curve["nll"][-1] == pytest.approx(full["nll"], rel=1e-12)
    assert curve["ece"][-1] == pytest.approx(full["ece"], rel=1e-12)
    assert curve["nll"][0] == pytest.approx(C.nll(np.exp(lp[0]), labels), rel=1e-12)
    two = C.classification_metrics(lp[:2], labels)
    assert curve["nll"][1] == pytest.approx(two["nll"], rel=1e-12)


def test_classification_metrics_hand():
    out = C.classification_metrics(LOGP, LABELS)
    assert set(out) == {"acc", "nll", "ece", "pairwise_kld"}
    assert out["acc"] == pytest.approx(2 / 3)
    assert out["nll"] == pytest.approx(-(math.log(0.8) + math.log(0.4) + math.log(0.7)) / 3)
    assert out["ece"] == pytest.approx(1.1 / 3)


def test_stability_with_very_negative_log_probs():
    # exp(-1000) underflows; everything must stay finite and exact in log space.
    lp = np.array([[[0.0, -1000.0]], [[-1000.0, 0.0]]])  # (2, 1, 2)
    np.testing.assert_allclose(C.bma_probs(lp), [[0.5, 0.5]], atol=1e-15)
    both = np.array([[[0.0, -1000.0]], [[0.0, -1000.0]]])
    out = C.classification_metrics(both, np.array([1]))
    assert out["nll"] == pytest.approx(1000.0, rel=1e-12)  # not inf, not clipped at 708
    assert out["pairwise_kld"] == pytest.approx(0.0, abs=1e-12)
    # KL([1,0] || [0,1]) in log space = 0 - (-1000) = 1000, both directions
    assert C.pairwise_kld_from_log_probs(lp) == pytest.approx(1000.0, rel=1e-12)
    # uniformly shifted log-probs: BMA log-probs keep the shift exactly
    shifted = np.log(np.stack([P1, P2])) - 1000.0
    np.testing.assert_allclose(C.bma_log_probs(shifted), np.log(BMA) - 1000.0, rtol=1e-12)
    assert C.nll_from_log_probs(C.bma_log_probs(shifted), LABELS) == pytest.approx(
        1000.0 - (math.log(0.8) + math.log(0.4) + math.log(0.7)) / 3, rel=1e-12)


def test_accepts_jax_arrays():
    out = C.classification_metrics(jnp.asarray(LOGP, dtype=jnp.float32), jnp.asarray(LABELS))
    assert out["acc"] == pytest.approx(2 / 3)
    assert out["nll"] == pytest.approx(-(math.log(0.8) + math.log(0.4) + math.log(0.7)) / 3,
                                       rel=1e-5)


def test_entropy_decomposition_and_auroc():
    assert M.predictive_entropy(np.array([[0.5, 0.5], [1.0, 0.0]])) == pytest.approx(
        math.log(2) / 2)
    with np.errstate(divide="ignore"):
        lp = np.log(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]))  # contains -inf
    dec = M.uncertainty_decomposition(lp)
    assert dec["total"] == pytest.approx(math.log(2))
    assert dec["aleatoric"] == pytest.approx(0.0)
    assert dec["epistemic"] == pytest.approx(math.log(2))
    # pairs: 0.9>both, 0.8>both, 0.5 > 0.3 and ties 0.5 -> (2 + 2 + 1.5) / 6
    assert M.auroc([0.9, 0.8, 0.5], [0.5, 0.3]) == pytest.approx(5.5 / 6)


def test_ood_auroc_msp():
    p_in = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]])
    p_out = np.array([[0.6, 0.4], [0.75, 0.25]])
    # MSP in: .9 .8 .7 ; out: .6 .75 → pairs in>out: (.9:2)+(.8:2)+(.7:1) = 5 of 6
    assert M.ood_auroc_msp(p_in, p_out) == pytest.approx(5 / 6)


# ----------------------------------------------------------------------------- Gaussian regression


def test_regression_metrics_hand_values():
    from scipy.stats import norm

    y = np.array([0.0, 1.0])
    mu = np.array([[0.0, 1.0], [1.0, 1.0]])  # 2 samples × 2 points
    sigma = np.array([[1.0, 1.0], [1.0, 2.0]])
    p0 = 0.5 * (norm.pdf(0, 0, 1) + norm.pdf(0, 1, 1))
    p1 = 0.5 * (norm.pdf(1, 1, 1) + norm.pdf(1, 1, 2))
    assert G.regression_lppd(y, mu, sigma) == pytest.approx(0.5 * (np.log(p0) + np.log(p1)), rel=1e-12)
    assert G.regression_rmse(y, mu) == pytest.approx(np.sqrt(0.5 * 0.5**2), rel=1e-12)
    # calibration: a correct predictive is calibrated, an overconfident one is not
    rng = np.random.default_rng(0)
    yy = rng.standard_normal(4000)
    good, cov = G.calibration_error(yy, np.zeros((20, 4000)), np.ones((20, 4000)), num_draws=50)
    bad, cov_b = G.calibration_error(yy, np.zeros((20, 4000)), 0.3 * np.ones((20, 4000)), num_draws=50)
    assert good < 0.02 and bad > 0.3 and np.all(cov_b < cov)


def test_gaussian_nll_numpy_and_jax():
    y, loc, scale = np.array([0.5, -1.0]), np.array([0.0, 1.0]), np.array([1.0, 2.0])
    want = -np.log([np.exp(-0.125) / np.sqrt(2 * np.pi), np.exp(-0.5) / (2 * np.sqrt(2 * np.pi))])
    got = G.gaussian_nll(y, loc, scale)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14)
    got_j = G.gaussian_nll(jnp.asarray(y), jnp.asarray(loc), jnp.asarray(scale))
    assert isinstance(got_j, jnp.ndarray) and got_j.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got_j), want, rtol=1e-6)


# ----------------------------------------------------------------------------- likelihood objects (Task API)


def test_classification_likelihood_api():
    lik = Classification()
    assert lik.kind == "classification" and set(C.classification_metrics(LOGP, LABELS)) == set(lik.metric_keys)
    assert lik.score(LOGP, LABELS) == pytest.approx(-(math.log(0.8) + math.log(0.4) + math.log(0.7)) / 3)
    assert lik.metrics(LOGP, LABELS) == C.classification_metrics(LOGP, LABELS)
    assert lik.curve(LOGP, LABELS) == C.bma_curve(LOGP, LABELS)
    assert set(lik.curve_keys) < set(lik.curve(LOGP, LABELS))
    # each network alone: P1 predicts [0, 0, 1] (all right), P2 predicts [0, 1, 1] (one wrong)
    err, nll = lik.error_and_nll(LOGP.astype(np.float32), LABELS)
    np.testing.assert_allclose(err, [0.0, 1 / 3], atol=1e-12)
    np.testing.assert_allclose(nll, [-np.mean(np.log([0.9, 0.6, 0.8])), -np.mean(np.log([0.7, 0.2, 0.6]))],
                               rtol=1e-6)
    np.testing.assert_allclose(lik.predictive(jnp.log(jnp.asarray(P1))), np.log(P1), rtol=1e-5)
    assert float(lik.mean_nll(jnp.log(jnp.asarray(P1)), jnp.asarray(LABELS))) == pytest.approx(nll[0], rel=1e-5)


def test_gaussian_likelihood_api():
    lik = GaussianRegression()
    y = np.array([0.0, 1.0])
    out = np.stack([np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 2.0]])], -1)  # (K=2, n=2, 2)
    assert lik.kind == "regression" and set(lik.metrics(out, y)) == set(lik.metric_keys)
    assert lik.score(out, y) == pytest.approx(-G.regression_lppd(y, out[..., 0], out[..., 1]), rel=1e-15)
    curve = lik.curve(out, y)
    assert curve["num_samples"] == [1, 2] and curve["lppd"][-1] == pytest.approx(lik.metrics(out, y)["lppd"])
    err, nll = lik.error_and_nll(out, y)
    np.testing.assert_allclose(err, [0.0, np.sqrt(0.5)], atol=1e-15)
    np.testing.assert_allclose(nll, [0.5 * np.log(2 * np.pi), 0.5 * np.log(2 * np.pi) + 0.25 + 0.5 * np.log(2)],
                               rtol=1e-14)
    pred = lik.predictive((jnp.asarray([0.0, 1.0]), jnp.asarray([1.0, 2.0])))
    assert pred.shape == (2, 2) and float(pred[1, 1]) == 2.0
    loc, scale = jnp.asarray(out[1, :, 0]), jnp.asarray(out[1, :, 1])
    assert float(lik.mean_nll((loc, scale), jnp.asarray(y))) == pytest.approx(nll[1], rel=1e-6)
    # scales are clipped to [SCALE_MIN, SCALE_MAX] before scoring
    tiny = out.copy()
    tiny[..., 1] = 1e-12
    assert lik.error_and_nll(tiny, y)[1][0] == pytest.approx(0.5 * np.log(2 * np.pi) + np.log(G.SCALE_MIN))


def test_likelihoods_answer_what_reports_used_to_branch_on():
    """The kind-dependent pieces of evaluate's reports come from the likelihood (tasks.likelihoods.likelihood_of)."""
    from tasks.likelihoods import likelihood_of

    cls, reg = likelihood_of("classification"), likelihood_of("regression")
    assert isinstance(cls, Classification) and isinstance(reg, GaussianRegression)
    assert cls.score_from_metrics({"nll": 0.5}) == 0.5 and reg.score_from_metrics({"lppd": -1.25}) == 1.25
    assert reg.score_from_metrics({"lppd": None}) is None and cls.score_from_metrics({}) is None
    lp = np.log(np.array([[[0.7, 0.3], [0.2, 0.8]], [[0.5, 0.5], [0.4, 0.6]]]))  # (K=2, n=2, C=2)
    np.testing.assert_allclose(cls.pointwise_function(lp, [0, 1]), np.log([[0.7, 0.8], [0.5, 0.6]]))
    np.testing.assert_allclose(cls.point_prediction(lp), np.exp(lp))
    centred = lp - lp.mean(2, keepdims=True)
    np.testing.assert_allclose(cls.prediction_scale(lp), np.sqrt(np.mean(centred**2, axis=(1, 2))))
    out = np.array([[[1.0, 2.0], [3.0, 0.5]], [[-1.0, 1.0], [np.inf, 1.0]]])  # (K=2, n=2, [loc, scale])
    np.testing.assert_array_equal(reg.pointwise_function(out, [0.0, 0.0]), out[..., 0])
    assert reg.prediction_scale(out)[1] == np.inf and cls.interval(lp) is None and cls.band_note is None
    mean, lo, hi = reg.interval(np.stack([np.zeros((3, 1)), np.ones((3, 1))], -1))
    np.testing.assert_allclose([mean[0], lo[0], hi[0]], [0.0, -1.959964, 1.959964], atol=1e-5)
    for lk in (cls, reg):
        assert set(lk.table_metrics) >= {k for _, k in lk.summary_columns} | {"nll"}
        assert {k for k, _ in lk.curve_plot} <= set(lk.curve_keys) | {"nll"}
