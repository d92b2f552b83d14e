"""Chains in batches (evaluate.methods.batch): the M chains of a chain allocation as one vmapped program give the
numbers of the one-at-a-time path — the same keys, initial states, minibatches and noise — up to the rounding of a
vmapped program, for each family of runner (a factory-built rival, a preconditioned one with an adaptation window,
a learned sampler with a frozen window, Transient-L2E with phase kernels); the pooled result has the same structure
(chains, draws per chain, T_kin per chain, gradients); "auto" keeps a convolutional model one chain at a time on the
CPU; a bad mode is one ConfigError.

Tolerance: SAMPLE_ATOL bounds |batched − sequential| on every kept parameter after 40 updates of 2 chains; vmapping
turns the chain's matrix–vector products into matrix–matrix products, whose float32 sums may be ordered differently.
Measured on this task for every batchable runner family (sghmc, precond_fisher, l2e_mass, l2e_transient, psgld,
csghmc, warm_sghmc, adaptive_sghmc, sgnht) under XLA's default (AVX-512), AVX2 and SSE4_2 levels: at most 1.3e-7
(a few float32 ulps of parameters of order 1; 0 for half of them). The bound, 1e-5, is ~80× that; a chain paired
with the wrong keys or start differs by O(0.1).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from conftest import iris_mlp, tiny_eval_config
from evaluate.config import ConfigError
from evaluate.methods import run_method
from evaluate.methods.batch import has_convolution, use_batches
from evaluate.methods.registry import preset_grids
from evaluate.run import load_l2e
from tasks import ModelSpec, TaskSpec, build

SAMPLE_ATOL = 1e-5
METHODS = ("sghmc", "precond_fisher", "l2e_mass", "l2e_transient")


def _cfg(method: str, mode: str):
    return tiny_eval_config(iris_mlp(8), (method,), {method: preset_grids("smoke")[method]}, chains=2,
                            batch_chains=mode)


@pytest.fixture(scope="module")
def task():
    return build(iris_mlp(8))


@pytest.mark.parametrize("method", METHODS)
def test_batched_chains_equal_one_at_a_time(task, method):
    results = {}
    for mode in ("never", "always"):
        cfg = _cfg(method, mode)
        from evaluate.methods import REGISTRY

        hp = REGISTRY[method].points(getattr(cfg.settings, method))[0]
        m = REGISTRY[method]
        if m.needs_sampler:
            sampler = load_l2e(m.needs_sampler if isinstance(m.needs_sampler, str) else None)
            hp = {**hp, "meta_params": sampler["meta_params"], "sampler": sampler["sampler"], "checkpoint": "x"}
        results[mode] = run_method(method, task, jax.random.PRNGKey(3), hp, cfg)
    seq, bat = results["never"], results["always"]
    assert bat.num_chains == seq.num_chains == 2 and bat.draws_per_chain == seq.draws_per_chain
    assert bat.grad_evals == seq.grad_evals and bat.divergent_chains == seq.divergent_chains == 0
    np.testing.assert_array_equal(bat.chain_ids, seq.chain_ids)
    for a, b in zip(jax.tree.leaves(seq.samples), jax.tree.leaves(bat.samples)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=SAMPLE_ATOL)
    if seq.t_kin is not None:
        np.testing.assert_allclose(bat.t_kin, seq.t_kin, rtol=1e-3)
    assert bat.hyperparameters["chains"] == 2


def test_auto_keeps_a_conv_net_one_chain_at_a_time_on_the_cpu():
    mlp, cnn = build(iris_mlp(8)), build(TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1), max_train=200))
    assert not has_convolution(mlp) and has_convolution(cnn)
    auto = _cfg("sghmc", "auto")
    assert use_batches(auto, mlp)
    assert use_batches(auto, cnn) == (jax.default_backend() != "cpu")
    assert use_batches(dataclasses.replace(auto, batch_chains="always"), cnn)
    assert not use_batches(dataclasses.replace(auto, batch_chains="never"), mlp)


def test_a_bad_batch_mode_is_refused():
    with pytest.raises(ConfigError, match="batch_chains must be one of auto, always, never"):
        _cfg("sghmc", "sometimes")
