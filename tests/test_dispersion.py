"""Dispersion against a reference posterior (evaluate.dispersion; SAMPLING §3): a sampler run at T = 0.05 is flagged,
one at T = 1 is not — on synthetic Gaussian draws, and with real chains (SGHMC at T = 1 and T = 0.05 on a linear
softmax model) against a NUTS reference computed and stored by `evaluate.hmc_reference`."""
from __future__ import annotations

import math
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import l2e
from evaluate.dispersion import (
    FLAG_HIGH, FLAG_LOW, dispersion_entry, dispersion_ratios, dispersion_stats, mean_pairwise_distance,
    predictive_variance,
)
from evaluate.hmc_reference import compute_reference
from evaluate.methods import MethodResult
from evaluate.reference import load_references
from tasks import build
from tasks.reference import write_reference

from conftest import iris_mlp

D, N_TEST, C = 30, 200, 4
RNG = np.random.default_rng(0)
MU = RNG.normal(size=D) * 0.5
SD = np.exp(RNG.normal(size=D) * 0.3)
X = RNG.normal(size=(N_TEST, D // C + 1))


def logits(theta: np.ndarray) -> np.ndarray:
    """(K, n, C) log-softmax of a linear model whose D weights are read as a ((D // C + 1), C) matrix (padded)."""
    w = np.concatenate([theta, np.zeros((theta.shape[0], (D // C + 1) * C - D))], 1).reshape(-1, D // C + 1, C)
    z = np.einsum("nf,kfc->knc", X, w)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def draws(k: int, temperature: float, seed: int) -> np.ndarray:
    """k draws of N(MU, T·diag(SD²)): the posterior at temperature T of a Gaussian target."""
    return MU + math.sqrt(temperature) * SD * np.random.default_rng(seed).normal(size=(k, D))


def result(theta: np.ndarray, chain_ids) -> MethodResult:
    return MethodResult(logits(theta), 0, 0.0, 0, {}, num_requested=len(theta), samples={"w": theta},
                        chain_ids=np.asarray(chain_ids))


REFERENCE = dispersion_stats({"w": draws(400, 1.0, 1)}, logits(draws(400, 1.0, 1)), "classification",
                             np.repeat(np.arange(4), 100))
TASK = SimpleNamespace(kind="classification")


def test_statistics_by_hand():
    flat = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    assert mean_pairwise_distance(flat) == pytest.approx((5 + 10 + 5) / 3)
    assert math.isnan(mean_pairwise_distance(flat[:1]))
    s = dispersion_stats({"a": flat[:, :1], "b": flat[:, 1:]}, np.zeros((3, 2, 2)), "regression", [0, 0, 1])
    assert s["weight_norm"] == pytest.approx(5.0) and s["pairwise_distance_within_chain"] == pytest.approx(5.0)
    out = np.stack([np.log([[0.5, 0.5]]), np.log([[0.9, 0.1]])])  # (2 samples, 1 point, 2 classes)
    assert predictive_variance(out, "classification") == pytest.approx(0.04)  # var of 0.5, 0.9 = 0.04 per class
    reg = np.array([[[1.0, 9.0]], [[3.0, 9.0]]])
    assert predictive_variance(reg, "regression") == pytest.approx(1.0)  # the loc only
    r = dispersion_ratios({"weight_norm": 1.0, "pairwise_distance": 0.4}, {"weight_norm": 2.0, "pairwise_distance": 1.0})
    assert r["weight_norm"] == 0.5 and r["flagged"] == ["pairwise_distance"] and r["predictive_variance"] is None


@pytest.mark.parametrize("layout", ["one chain", "ensemble"])
def test_synthetic_cold_sampler_is_flagged_and_warm_one_is_not(layout):
    """Reference: 4 chains × 100 draws of N(μ, Σ) (d = 30).  Method: 20 draws at T = 1 → nothing flagged (every
    ratio within [0.75, 1.33]); scaled to T = 0.05 → the pairwise distance (ratio ≈ √0.05 = 0.22) and the predictive
    variance flagged.  "one chain": within-chain pairs compared; "ensemble" (one draw per member): pooled pairs."""
    ids = [0] * 20 if layout == "one chain" else list(range(20))
    compared = "pairwise_distance_within_chain" if layout == "one chain" else "pairwise_distance"
    warm = dispersion_entry(TASK, result(draws(20, 1.0, 2), ids), {"dispersion": REFERENCE})
    cold = dispersion_entry(TASK, result(draws(20, 0.05, 2), ids), {"dispersion": REFERENCE})
    print({k: round(v, 3) for k, v in warm["ratios"].items() if v}, {k: round(v, 3) for k, v in cold["ratios"].items() if v})
    assert warm["pairwise_compared"] == cold["pairwise_compared"] == compared
    assert warm["flagged"] == [] and all(0.75 < warm["ratios"][k] < 1.33 for k in ("weight_norm", compared))
    assert set(cold["flagged"]) >= {compared, "predictive_variance"}
    assert cold["ratios"][compared] == pytest.approx(math.sqrt(0.05), rel=0.2)
    assert cold["flag_range"] == [FLAG_LOW, FLAG_HIGH]
    assert dispersion_entry(TASK, result(draws(20, 1.0, 2), ids), {"dispersion": None}) is None
    assert dispersion_entry(TASK, result(draws(20, 1.0, 2), ids), None) is None


IRIS = iris_mlp()


def sghmc_result(task, temperature: float) -> MethodResult:
    """One SGHMC chain on the full training batch (lr 1e-3·N… see below), friction 1, 20,000 updates; 50 samples
    every 200 updates after 10,000; predictions on the test split."""
    alg = l2e.sghmc(task.posterior, learning_rate=0.01 * task.data_size / 100, friction=1.0, temperature=temperature)
    data = task.train_data

    @jax.jit
    def run(key, params):
        def block(state, k):
            state, _ = jax.lax.scan(lambda s, kk: (alg.step(kk, s, data)[0], None), state, jax.random.split(k, 200))
            return state, state.position

        return jax.lax.scan(block, alg.init(params), jax.random.split(key, 100))[1]

    samples = jax.tree.map(lambda a: a[50:], run(jax.random.PRNGKey(1), task.init_params(jax.random.PRNGKey(0))))
    out = np.asarray(task.predict(samples, task.splits.test[0]))
    return MethodResult(out, 0, 0.0, 0, {}, num_requested=50, samples=jax.tree.map(np.asarray, samples),
                        chain_ids=np.zeros(50, int))


@pytest.mark.slow
def test_sghmc_at_t005_is_flagged_against_a_nuts_reference(tmp_path):
    """NUTS reference of iris with a linear softmax model (2 chains × 200 draws), stored with its dispersion
    statistics and read back by load_references.  SGHMC at T = 1: nothing flagged; at T = 0.05: the within-chain
    pairwise distance and the predictive variance are flagged (ratios below 0.5)."""
    task = build(IRIS)
    arrays, meta = compute_reference(task, jax.random.PRNGKey(0), num_chains=2, num_warmup=200, num_samples=200,
                                     name="iris/mlp-linear")
    assert meta["dispersion"]["num_samples"] == 400 and meta["dispersion"]["pairwise_distance_within_chain"] > 0
    write_reference(tmp_path, "iris/mlp-linear", arrays, meta)
    ref = load_references({None: tmp_path}, ["iris/mlp-linear"], [task])["iris/mlp-linear"]
    assert ref["dispersion"] == meta["dispersion"]
    warm = dispersion_entry(task, sghmc_result(task, 1.0), ref)
    cold = dispersion_entry(task, sghmc_result(task, 0.05), ref)
    print("T=1", warm["ratios"], "T=0.05", cold["ratios"])
    assert warm["flagged"] == []
    assert set(cold["flagged"]) >= {"pairwise_distance_within_chain", "predictive_variance"}
