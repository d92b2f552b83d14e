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
(a few float32 ulps of parameters of order 1; 0 for half of them). Many runs in one program (run_many: seeds, grid points,
a padded width) and vmapped ensemble members: at most 2.4e-7 at the default level; the SSE4_2 run of those tests
passes the same bound. The bound, 1e-5, is 40–80× these; a chain paired
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
    return tiny_eval_config(iris_mlp(8), (method,), {method: preset_grids("smoke").get(method, {})}, chains=2,
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


# ----------------------------------------------------------------------------- many runs in one program
MANY = {"sghmc": {"lrs": (0.01, 0.03, 0.1), "frictions": (10.0,)},  # a factory-built rival, three grid points
        "precond_fisher": {"lrs": (0.01, 0.03), "frictions": (10.0,)},  # phase kernels, a traced freeze step
        "warm_sghmc": {"lrs": (0.03,), "frictions": (10.0,), "warm_fractions": (0.1, 0.3)},  # traced Adam steps
        "l2e_transient": {}}  # a learned sampler: shared meta-parameters, phase kernels


def _jobs(method: str, cfg):
    from evaluate.methods import REGISTRY

    m = REGISTRY[method]
    extra = {}
    if m.needs_sampler:
        sampler = load_l2e(m.needs_sampler if isinstance(m.needs_sampler, str) else None)
        extra = {"meta_params": sampler["meta_params"], "sampler": sampler["sampler"], "checkpoint": "x"}
    return [(jax.random.fold_in(jax.random.PRNGKey(seed), 7), {**p, **extra}) for seed in (0, 1)
            for p in m.points(getattr(cfg.settings, method))]


@pytest.mark.parametrize("chains", (1, 2))
@pytest.mark.parametrize("method", tuple(MANY))
def test_seeds_and_grid_points_in_one_program_equal_one_at_a_time(task, method, chains):
    """registry.run_many: every (seed, grid point) job's chains in one vmapped program give each job's result of
    run_method — same samples (within SAMPLE_ATOL), chains, draws, gradients, divergence, T_kin and record; with a
    batch width of 3 (sghmc: 6 or 12 chains, the last batch padded) too."""
    from evaluate.methods import run_many

    cfg = tiny_eval_config(iris_mlp(8), (method,), {method: MANY[method]}, chains=chains, batch_chains="always")
    jobs = _jobs(method, cfg)
    assert len(jobs) >= 2
    seq = [run_method(method, task, key, hp, cfg) for key, hp in jobs]
    bat = run_many(method, task, jobs, cfg)
    # a width that does not divide the chains: batches of 3, the last padded with copies (their results dropped)
    padded = run_many(method, task, jobs, cfg, width=3) if method == "sghmc" else []
    assert len(bat) == len(seq)
    for a, b in zip(seq + seq[:len(padded)], bat + padded):
        assert (b.num_chains, b.draws_per_chain, b.grad_evals, b.divergent_chains) == (
            a.num_chains, a.draws_per_chain, a.grad_evals, a.divergent_chains)
        np.testing.assert_array_equal(b.chain_ids, a.chain_ids)
        for x, y in zip(jax.tree.leaves(a.samples), jax.tree.leaves(b.samples)):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=0, atol=SAMPLE_ATOL)
        if a.t_kin is not None:
            np.testing.assert_allclose(b.t_kin, a.t_kin, rtol=1e-3)
        drop = ("meta_params",)
        assert {k: v for k, v in b.hyperparameters.items() if k not in drop} == {
            k: v for k, v in a.hyperparameters.items() if k not in drop}
    # the jobs are distinct runs (a batch that paired a job with another's keys or point would repeat one)
    firsts = [np.asarray(jax.tree.leaves(r.samples)[0]) for r in bat]
    assert all(np.max(np.abs(firsts[0] - f)) > 1e-3 for f in firsts[1:])


def test_one_compiled_chunk_serves_every_budget(task):
    """Budget-dependent update counts (the freeze step, the Adam phase) are call arguments: a second budget
    compiles no new chunk."""
    from evaluate.methods import CompileCache

    for method in ("precond_fisher", "warm_sghmc", "adaptive_sghmc"):
        cache = CompileCache()
        cfg = _cfg(method, "never")
        hp = _jobs(method, cfg)[0][1]
        run_method(method, task, jax.random.PRNGKey(0), hp, cfg, cache=cache)
        chunks = {k for k in cache._values if k[0] == "chunk"}
        run_method(method, task, jax.random.PRNGKey(0), hp, dataclasses.replace(cfg, num_steps=2 * cfg.num_steps),
                   cache=cache)
        assert {k for k in cache._values if k[0] == "chunk"} == chunks, method


SHARD_SCRIPT = """
import os, sys, jax, numpy as np
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from conftest import iris_mlp, tiny_eval_config
from evaluate.methods import REGISTRY, batched, run_many
from tasks import build
seen = []
shard = batched.shard_population
def spy(tree, mesh):
    out = shard(tree, mesh)
    seen.append(len(jax.tree.leaves(out)[0].sharding.device_set))
    return out
batched.shard_population = spy
task = build(iris_mlp(8))
cfg = tiny_eval_config(iris_mlp(8), ("precond_fisher",), {"precond_fisher": {"lrs": (0.01, 0.03), "frictions": (10.0,)}},
                       chains=2, batch_chains="always")
jobs = [(jax.random.PRNGKey(s), p) for s in (0, 1) for p in REGISTRY["precond_fisher"].points(cfg.settings.precond_fisher)]
sharded = run_many("precond_fisher", task, jobs, cfg)
os.environ["L2E_NO_SHARDING"] = "1"
one = run_many("precond_fisher", task, jobs, cfg)
diff = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for r, q in zip(sharded, one)
           for x, y in zip(jax.tree.leaves(r.samples), jax.tree.leaves(q.samples)))
print("devices", len(jax.local_devices()), "sharded over", sorted(set(seen)), "diff", diff)
"""


@pytest.mark.slow
def test_a_batch_shards_over_the_local_devices():
    """On 2 forced host devices a batch of 8 chains (2 seeds × 2 grid points × M = 2) is sharded over both (every
    shard_population call spans 2 devices) and gives the one-device numbers within SAMPLE_ATOL."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, xla_flags_with

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": xla_flags_with("--xla_force_host_platform_device_count=2")}
    env.pop("L2E_NO_SHARDING", None)
    proc = subprocess.run([sys.executable, "-c", SHARD_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("devices 2 sharded over [2] diff "), line
    assert float(line.split()[-1]) <= SAMPLE_ATOL


@pytest.mark.parametrize("method", ("deep_ensemble", "noisy_de"))
def test_ensemble_members_in_one_program_equal_one_at_a_time(task, method):
    """An ensemble's K members vmapped (batch_chains always) give the one-at-a-time members within SAMPLE_ATOL, with
    the same record, gradients and divergence (the members are judged against each other either way)."""
    from evaluate.methods import REGISTRY

    res = {}
    for mode in ("never", "always"):
        cfg = tiny_eval_config(iris_mlp(8), (method,), {}, batch_chains=mode)
        hp = REGISTRY[method].points(getattr(cfg.settings, method))[0]
        res[mode] = run_method(method, task, jax.random.PRNGKey(2), hp, cfg)
    seq, bat = res["never"], res["always"]
    assert (bat.num_chains, bat.grad_evals, bat.divergent_chains) == (seq.num_chains, seq.grad_evals, 0)
    assert bat.hyperparameters == seq.hyperparameters
    for a, b in zip(jax.tree.leaves(seq.samples), jax.tree.leaves(bat.samples)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=SAMPLE_ATOL)
