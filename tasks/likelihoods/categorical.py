"""Categorical (softmax) classification likelihood: the training NLL and the BMA metrics of docs/evaluation.md, Classification.

Metric functions are pure, accept numpy or jax arrays and compute in float64 numpy.  Shapes: K posterior
samples, n test points, C classes; ``log_probs`` are log-softmax outputs, ``probs`` probabilities, ``labels``
integer classes.  Metrics on a single predictive ``(n, C)`` are applied to the BMA predictive.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Classification", "accuracy", "bma_curve", "bma_log_probs", "bma_probs", "classification_metrics", "ece",
           "nll", "nll_from_log_probs", "pairwise_kld", "pairwise_kld_from_log_probs"]

_TINY = np.finfo(np.float64).tiny


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _labels(labels, n: int) -> np.ndarray:
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    if y.shape[0] != n:
        raise ValueError(f"labels has {y.shape[0]} entries, predictions have {n} rows")
    return y


def _check_samples(lp: np.ndarray) -> None:
    if lp.ndim != 3:
        raise ValueError(f"expected log_probs of shape (K, n, C), got {lp.shape}")


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    """Stable log(sum(exp(a))) along ``axis`` (handles all -inf slices)."""
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return np.squeeze(out, axis=axis)


def bma_log_probs(log_probs) -> np.ndarray:
    """Log of the BMA predictive: logsumexp_k log p_k - log K.  (K,n,C) -> (n,C)."""
    lp = _f64(log_probs)
    _check_samples(lp)
    return _logsumexp(lp, axis=0) - np.log(lp.shape[0])


def bma_probs(log_probs) -> np.ndarray:
    """BMA predictive p̄ = mean_k p_k, computed in log space.  (K,n,C) -> (n,C)."""
    return np.exp(bma_log_probs(log_probs))


def accuracy(probs, labels) -> float:
    """Fraction of points whose argmax class equals the label.  probs (n,C), labels (n,)."""
    p = _f64(probs)
    y = _labels(labels, p.shape[0])
    return float(np.mean(np.argmax(p, axis=-1) == y))


def nll_from_log_probs(log_probs, labels) -> float:
    """Mean -log p(y) from log-probabilities.  log_probs (n,C), labels (n,)."""
    lp = _f64(log_probs)
    y = _labels(labels, lp.shape[0])
    return float(-np.mean(lp[np.arange(lp.shape[0]), y]))


def nll(probs, labels) -> float:
    """Mean -log p(y) from probabilities, clipped at float64 tiny.  probs (n,C), labels (n,)."""
    p = _f64(probs)
    y = _labels(labels, p.shape[0])
    py = np.clip(p[np.arange(p.shape[0]), y], _TINY, None)
    return float(-np.mean(np.log(py)))


def ece(probs, labels, num_bins: int = 15) -> float:
    """Expected calibration error with equal-width left-open bins ((b-1)/B, b/B].

    ECE = sum_b (n_b/n) |acc_b - conf_b| over non-empty bins, conf = max_c p_c.
    probs (n,C), labels (n,).  Returned as a fraction.
    """
    p = _f64(probs)
    y = _labels(labels, p.shape[0])
    conf = np.max(p, axis=-1)
    correct = (np.argmax(p, axis=-1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    # first edge >= conf  ->  bin b with edges[b-1] < conf <= edges[b]; 0-based = b-1
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, num_bins - 1)
    sum_acc = np.bincount(idx, weights=correct, minlength=num_bins)
    sum_conf = np.bincount(idx, weights=conf, minlength=num_bins)
    # sum_b (n_b/n)|acc_b - conf_b| = (1/n) sum_b |sum_acc_b - sum_conf_b|
    return float(np.sum(np.abs(sum_acc - sum_conf)) / p.shape[0])


def pairwise_kld_from_log_probs(log_probs) -> float:
    """Mean over points of the mean over ordered pairs j != k of KL(p_j || p_k).

    log_probs (K,n,C) log-softmax outputs of the K samples.  0 when all samples agree;
    0 for K = 1.  Uses sum_{j,k} KL(p_j||p_k) = K sum_j sum_c p_j (log p_j - mean_k log p_k),
    i.e. O(K n C).
    """
    lp = _f64(log_probs)
    _check_samples(lp)
    K = lp.shape[0]
    if K < 2:
        return 0.0
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        mean_lp = np.mean(lp, axis=0, keepdims=True)
        terms = np.where(p > 0, p * (lp - mean_lp), 0.0)  # p=0 contributes 0
    total = K * np.sum(terms, axis=(0, 2))  # (n,) sum over all ordered pairs
    return float(np.mean(total / (K * K - K)))


def pairwise_kld(sample_probs) -> float:
    """Pairwise KLD (see ``pairwise_kld_from_log_probs``) from probabilities (K,n,C).

    Probabilities are clipped at float64 tiny before the log; prefer the log-prob variant.
    """
    return pairwise_kld_from_log_probs(np.log(np.clip(_f64(sample_probs), _TINY, None)))


def bma_curve(log_probs, labels, num_bins: int = 15) -> dict:
    """BMA ACC / NLL / ECE using the first k samples, k = 1..K (collection order).

    log_probs (K,n,C), labels (n,).  Returns dict(num_samples=[1..K], acc=[..], nll=[..],
    ece=[..]) of python lists.
    """
    lp = _f64(log_probs)
    _check_samples(lp)
    K = lp.shape[0]
    cum = np.logaddexp.accumulate(lp, axis=0)  # log sum_{j<=k} p_j
    out = {"num_samples": [], "acc": [], "nll": [], "ece": []}
    for k in range(1, K + 1):
        blp = cum[k - 1] - np.log(k)
        bp = np.exp(blp)
        out["num_samples"].append(k)
        out["acc"].append(accuracy(bp, labels))
        out["nll"].append(nll_from_log_probs(blp, labels))
        out["ece"].append(ece(bp, labels, num_bins))
    return out


def classification_metrics(log_probs, labels, num_bins: int = 15) -> dict:
    """ACC, NLL, ECE of the BMA and pairwise KLD among samples.  log_probs (K,n,C), labels (n,)."""
    blp = bma_log_probs(log_probs)
    bp = np.exp(blp)
    return {
        "acc": accuracy(bp, labels),
        "nll": nll_from_log_probs(blp, labels),
        "ece": ece(bp, labels, num_bins),
        "pairwise_kld": pairwise_kld_from_log_probs(log_probs),
    }


class Classification:
    """Categorical likelihood p(y | x, θ) = softmax(f(x; θ))_y of a classifier with logits f (B, C).

    Model outputs: logits (B, C).  Per-sample predictions (`predictive`, stacked by `Task.predict`): log-softmax
    (B, C).  Scores and metrics take those stacked predictions, outputs (K, n, C), and integer labels y (n,).
    """

    kind = "classification"
    metric_keys = ("acc", "nll", "ece", "pairwise_kld")
    """The keys of `metrics`."""
    curve_keys = ("acc", "nll", "ece")
    """The metric lists of `curve` (besides "num_samples")."""
    score_name = "BMA NLL"
    has_class_probs = True
    """Whether the model's outputs are class logits (softmax = class probabilities)."""
    error_metric = "test error"
    """What `error_and_nll`'s error is."""

    @staticmethod
    def mean_nll(logits: jax.Array, y: jax.Array) -> jax.Array:
        """Mean cross-entropy (nats per example) of logits (B, C) and labels y (B,) int."""
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), axis=1))

    @staticmethod
    def log_likelihood(logits: jax.Array, y: jax.Array) -> jax.Array:
        """Per-example log p(y_b | x_b) (nats), (B,), of logits (B, C) and labels y (B,) int."""
        return jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]

    @staticmethod
    def predictive(logits: jax.Array) -> jax.Array:
        """One sample's prediction: log-softmax (B, C)."""
        return jax.nn.log_softmax(logits)

    @staticmethod
    def score(outputs, y) -> float:
        """Tuning score: NLL of the BMA predictive of outputs (K, n, C) (may be inf or nan)."""
        return nll_from_log_probs(bma_log_probs(outputs), y)

    @staticmethod
    def metrics(outputs, y) -> dict:
        """`classification_metrics`: BMA acc / nll / ece (15 bins) and pairwise KLD of outputs (K, n, C)."""
        return classification_metrics(outputs, y)

    @staticmethod
    def curve(outputs, y) -> dict:
        """`bma_curve`: BMA acc / nll / ece over the first k = 1..K samples (collection order)."""
        return bma_curve(outputs, y)

    @staticmethod
    def error_and_nll(outputs, y) -> tuple[np.ndarray, np.ndarray]:
        """Per sample (each network alone, not the BMA) of outputs (K, n, C): test error 1 − accuracy (K,) and
        mean NLL (K,), float64."""
        out = _f64(outputs)
        yi = np.asarray(y).astype(np.int64)
        err = 1.0 - np.mean(np.argmax(out, -1) == yi[None], axis=1)
        nll_k = -np.mean(out[:, np.arange(out.shape[1]), yi], axis=1)
        return err, nll_k

    # --- what evaluate reads from the likelihood instead of testing the task's kind

    table_metrics = ("acc", "nll", "ece", "pairwise_kld", "agreement", "total_variation")
    """The metric columns of the report's tables."""
    summary_columns = (("acc", "acc"), ("ece", "ece"), ("kld", "pairwise_kld"))
    """(header, metric key) of the plain-text summary's columns besides nll."""
    curve_plot = (("acc", "BMA accuracy"), ("nll", "BMA NLL"))
    """(metric key, axis label) of the BMA-curve plots."""
    error_label = "test error"
    """The axis label of `error_and_nll`'s error."""
    band_note = None
    """A class distribution has no predictive interval (no 1-D band)."""

    @staticmethod
    def score_from_metrics(metrics: dict) -> float | None:
        """The tuning score (BMA NLL, nats) as `metrics` reports it; None when absent."""
        return metrics.get("nll")

    @staticmethod
    def pointwise_function(outputs, y) -> np.ndarray:
        """Per sample and test point, log p(y_i | x_i, θ_k) (nats) of outputs (K, n, C) and labels y (n,):
        (K, n) float64 (the function-space ESS's functions)."""
        out = np.asarray(outputs, np.float64)
        return np.take_along_axis(out, np.asarray(y, np.int64)[None, :, None], axis=-1)[..., 0]

    @staticmethod
    def point_prediction(outputs) -> np.ndarray:
        """The class probabilities of log-probability outputs (..., n, C), float64 (what the predictive variance
        is the spread of)."""
        return np.exp(np.asarray(outputs, np.float64))

    @staticmethod
    def prediction_scale(outputs) -> np.ndarray:
        """Per sample, the RMS of the centred log-probabilities of outputs (K, n, C): (K,) float64, inf where not
        finite (a diverged sample's scale)."""
        out = np.asarray(outputs, np.float64)
        with np.errstate(all="ignore"):
            scale = np.sqrt(np.mean(np.square(out - out.mean(axis=2, keepdims=True)), axis=(1, 2)))
        return np.where(np.isfinite(scale), scale, np.inf)

    @staticmethod
    def interval(outputs, level: float = 0.95) -> None:
        """No predictive interval for a class distribution (see `band_note`)."""
        return None

    # --- fidelity to a reference's draws (the budget curves, evaluate.curve)

    @staticmethod
    def reference_outputs(draws: dict) -> np.ndarray:
        """A reference's per-draw test predictives (tasks.reference.load_draws: probs (S, n, C)) as outputs
        (S, n, C) log-probabilities, the format of `Task.predict`."""
        return np.log(np.maximum(np.asarray(draws["probs"], np.float64), _TINY))

    @staticmethod
    def draw_vectors(outputs) -> np.ndarray:
        """Each draw's test predictive as one vector, for sample-level distances: the class probabilities of
        outputs (K, n, C) flattened and divided by sqrt(n), (K, n·C) float64 (a Euclidean distance between two rows
        is then the root mean square over test points of the probability vectors' distance)."""
        out = np.exp(np.asarray(outputs, np.float64))
        return out.reshape(out.shape[0], -1) / np.sqrt(out.shape[1])

    @staticmethod
    def bma_total_variation(outputs, ref_outputs) -> float:
        """Mean over test points of the total variation ½Σ_c|p̄ − q̄| between the BMA predictives of outputs
        (K, n, C) and ref_outputs (S, n, C) (log-probabilities), in [0, 1]."""
        p, q = bma_probs(outputs), bma_probs(ref_outputs)
        return float(np.mean(0.5 * np.sum(np.abs(p - q), axis=-1)))

    @staticmethod
    def split_total_variations(outputs, subsets) -> list[float]:
        """For each index set I of `subsets`: bma_total_variation(outputs[I], outputs[rest]), the draws of I against
        the other draws of outputs (S, n, C) (the K-draw floor, evaluate.curve.fidelity)."""
        probs = np.exp(np.asarray(outputs, np.float64))
        total, s = probs.sum(0), probs.shape[0]
        out = []
        for idx in subsets:
            part = probs[idx].sum(0)
            p, q = part / len(idx), (total - part) / (s - len(idx))
            out.append(float(np.mean(0.5 * np.sum(np.abs(p - q), axis=-1))))
        return out

