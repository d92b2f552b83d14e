"""Predictive metrics evaluate reports (docs/evaluation.md, "Metrics").

The metrics of a task's own likelihood — BMA accuracy / NLL / ECE / pairwise KLD of classifiers, LPPD / RMSE /
calibration of Gaussian regressors — live with the likelihoods in tasks.likelihoods and are re-exported here
(evaluate applies them to reference predictives too).  Defined here: comparisons of a predictive with a
reference (agreement, total variation), predictive entropy and its decomposition, and OOD AUROC.

All functions are pure, accept numpy or jax arrays, and compute in float64 numpy.  Shapes: K posterior samples,
n test points, C classes; ``log_probs`` are log-softmax outputs, ``probs`` probabilities.
"""
from __future__ import annotations

import numpy as np

from tasks.likelihoods.categorical import (
    accuracy, bma_curve, bma_log_probs, bma_probs, classification_metrics, ece, nll, nll_from_log_probs,
    pairwise_kld, pairwise_kld_from_log_probs,
)
from tasks.likelihoods.gaussian import (
    calibration_error, regression_curve, regression_lppd, regression_metrics, regression_rmse,
)

__all__ = [
    "accuracy", "agreement", "auroc", "bma_curve", "bma_log_probs", "bma_probs", "calibration_error",
    "classification_metrics", "ece", "nll", "nll_from_log_probs", "ood_auroc_msp", "pairwise_kld",
    "pairwise_kld_from_log_probs", "predictive_entropy", "regression_curve", "regression_lppd", "regression_metrics",
    "regression_rmse", "total_variation", "uncertainty_decomposition",
]


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def agreement(probs, ref_probs) -> float:
    """Fraction of points where argmax of probs equals argmax of ref_probs.  (n,C), (n,C)."""
    p, q = _f64(probs), _f64(ref_probs)
    if p.shape != q.shape:
        raise ValueError(f"shape mismatch {p.shape} vs {q.shape}")
    return float(np.mean(np.argmax(p, axis=-1) == np.argmax(q, axis=-1)))


def total_variation(probs, ref_probs) -> float:
    """Mean over points of 0.5 * sum_c |p_c - q_c|.  (n,C), (n,C)."""
    p, q = _f64(probs), _f64(ref_probs)
    if p.shape != q.shape:
        raise ValueError(f"shape mismatch {p.shape} vs {q.shape}")
    return float(np.mean(0.5 * np.sum(np.abs(p - q), axis=-1)))


def _entropy(p: np.ndarray) -> np.ndarray:
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def predictive_entropy(probs) -> float:
    """Mean over points of H[p] = -sum_c p_c log p_c.  probs (n,C)."""
    return float(np.mean(_entropy(_f64(probs))))


def uncertainty_decomposition(log_probs) -> dict:
    """Total / aleatoric / epistemic uncertainty, each averaged over points.

    log_probs (K,n,C).  TU = H[p̄], AU = mean_k H[p_k], EU = TU - AU.
    """
    tu = predictive_entropy(bma_probs(log_probs))
    au = float(np.mean(_entropy(np.exp(_f64(log_probs)))))
    return {"total": tu, "aleatoric": au, "epistemic": tu - au}


def auroc(scores_in, scores_out) -> float:
    """AUROC = P(s_in > s_out) + 0.5 P(s_in = s_out) (Mann-Whitney U / (n_in n_out)).

    scores_in (n_in,) scores of in-distribution points (positives), scores_out (n_out,).
    For MSP use ``probs.max(-1)`` of the BMA predictive (`ood_auroc_msp`).
    """
    s_in = _f64(scores_in).reshape(-1)
    s_out = np.sort(_f64(scores_out).reshape(-1))
    below = np.searchsorted(s_out, s_in, side="left")
    ties = np.searchsorted(s_out, s_in, side="right") - below
    return float(np.sum(below + 0.5 * ties) / (s_in.size * s_out.size))


def ood_auroc_msp(probs_in, probs_out) -> float:
    """OOD AUROC with the max-softmax-probability score: in-distribution = positives.
    probs_in (n_in, C), probs_out (n_out, C): BMA predictive probabilities."""
    return auroc(_f64(probs_in).max(-1), _f64(probs_out).max(-1))
