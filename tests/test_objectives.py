"""The "fidelity" and "stein_kl_cross" meta-objectives (meta_train.objectives, meta_train.reference).

Fidelity (TV between the samples' BMA predictive and a NUTS reference's, on the reference's test points):
- 0 when the reference is the member's own predictive, positive otherwise, equal to a float64 numpy TV to 1e-6;
- reads a reference directory as `python -m evaluate reference` writes it (a tiny fake one, written here for a tiny
  task: the tests do not depend on results/) and refuses a task without one, a spec or test-set mismatch and a
  regression task;
- its antithetic-ES meta-gradient is finite on a tiny run (sequential and vmap executions agree), and backprop
  through it too;
- `python -m meta_train` with a missing reference: exit 2, one `error:` line naming the task, nothing written.
Cross-chain Stein-KL (C chains' current states at each sample time):
- for a standard Gaussian target and samples θ = μ + s·z, z ~ N(0, I), its pathwise gradient is that of KL(q‖p):
  ∂/∂μ = μ, ∂/∂s = d(s − 1/s): ~0 at the exact samples (μ = 0, s = 1), ≈ μ for a shifted set and of the right sign
  and size for under- and over-dispersed sets (averaged over 8 draws of 100 chains);
- on a tiny Meta-SGMCMC segment with 3 chains (independent θ₀) its gradient w.r.t. φ is finite and nonzero; ES
  with it, and fewer than 2 chains, are refused.
The objective table (meta_train.objectives.OBJECTIVES) is what the config accepts; BMA and CE read the per-example
log-likelihood from the task (`task.log_likelihood`: categorical or Gaussian), checked against numpy.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e.types import Posterior
from meta_train.config import ConfigError, ESConfig, MetaTrainConfig, ObjectiveConfig
from meta_train.es import ProgramCache
from meta_train.estimators import make
from meta_train.objectives import fidelity_fn, stein_kl_cross_fn
from meta_train.reference import ReferenceError, load_task_reference, task_name
from meta_train.train import initial_meta_params, meta_train
from tasks.distribution import TaskDistribution
from tasks.likelihoods import GaussianRegression
from tasks.task import build_task
from tasks.task_strings import resolve_task

from conftest import ROOT, run_cli, tiny_meta_config

TASK = "digits/mlp-8:max=200"  # 160 training examples, the official 360 test examples


def _task(text: str = TASK):
    return build_task(resolve_task(text).spec)


def _bma_probs(task, samples, x) -> np.ndarray:
    """float64 numpy BMA probabilities of samples (leaves (K, ...)) on x."""
    logits = np.stack([np.asarray(task.logits(jax.tree.map(lambda a, k=k: a[k], samples), x), np.float64)
                       for k in range(jax.tree.leaves(samples)[0].shape[0])])
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).mean(axis=0)


def _samples(task, k: int = 3, seed: int = 0):
    inits = [task.init_params(jax.random.PRNGKey(seed + i)) for i in range(k)]
    return jax.tree.map(lambda *xs: 3.0 * jnp.stack(xs), *inits)  # ×3: confident, varied predictions


def write_reference(root: Path, task, probs: np.ndarray, name: str | None = None, **data_changes) -> Path:
    """A reference directory in the layout of evaluate.hmc_reference for one task: reference.json, metadata.json,
    probs.txt."""
    name = task_name(task.spec) if name is None else name
    slug = name.replace("/", "_").replace(":", "_")
    (root / slug).mkdir(parents=True, exist_ok=True)
    y = np.asarray(task.splits.test[1])
    data = {"train": task.data_size, "test": int(y.shape[0]), "classes": task.num_classes,
            "test_labels_sha256": hashlib.sha256(np.ascontiguousarray(y.astype(np.int64)).tobytes()).hexdigest(),
            **data_changes}
    meta = {"kind": task.kind, "spec": json.loads(json.dumps(dataclasses.asdict(task.spec))), "data": data}
    (root / slug / "metadata.json").write_text(json.dumps(meta))
    np.savetxt(root / slug / "probs.txt", probs, fmt="%.18e")
    index_path = root / "reference.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index[name] = {"dir": slug, "kind": task.kind, "metadata": f"{slug}/metadata.json"}
    index_path.write_text(json.dumps(index))
    return root


def _smoothed_labels(task) -> np.ndarray:
    y = np.asarray(task.splits.test[1])
    return 0.8 * np.eye(task.num_classes)[y] + 0.2 / task.num_classes


# --------------------------------------------------------------------------- fidelity: the loss


def test_fidelity_is_zero_at_the_reference_and_the_numpy_tv_elsewhere():
    task = _task()
    samples, (x, _) = _samples(task), task.splits.test
    fid = jax.jit(fidelity_fn(task))
    p = _bma_probs(task, samples, x)
    assert abs(float(fid(samples, x, jnp.asarray(p, jnp.float32)))) < 1e-6
    rng = np.random.default_rng(0)
    for q in (rng.dirichlet(np.ones(task.num_classes), size=x.shape[0]), _smoothed_labels(task),
              _bma_probs(task, _samples(task, seed=10), x)):
        want = float(np.mean(0.5 * np.abs(p - q).sum(axis=1)))
        got = float(fid(samples, x, jnp.asarray(q, jnp.float32)))
        assert want > 0.05 and abs(got - want) < 1e-6, (got, want)


def test_reference_reader_finds_checks_and_refuses(tmp_path):
    task = _task()
    q = _smoothed_labels(task)
    root = write_reference(tmp_path / "refs", task, q)
    ref = load_task_reference(root, task)
    np.testing.assert_allclose(ref.probs, q, atol=1e-7)
    other = _task("digits/mlp-16:max=200")
    with pytest.raises(ReferenceError, match="no reference for meta-training task 'digits/mlp-16-n200'"):
        load_task_reference(root, other)
    # same name, another spec (prior) → refused as a spec mismatch
    stored = json.loads((root / "reference.json").read_text())
    wrong_prior = _task("digits/mlp-8:max=200:prior=0.5")
    bad = write_reference(tmp_path / "bad_spec", wrong_prior, q, name=task_name(task.spec))
    with pytest.raises(ReferenceError, match="another task spec"):
        load_task_reference(bad, task)
    assert stored  # the first directory is untouched
    with pytest.raises(ReferenceError, match="359 test examples stored"):
        load_task_reference(write_reference(tmp_path / "bad_n", task, q, test=359), task)
    with pytest.raises(ReferenceError, match="359 rows, expected 360"):
        load_task_reference(write_reference(tmp_path / "bad_rows", task, q[:-1]), task)
    regression = types.SimpleNamespace(kind="regression", spec=task.spec, likelihood=GaussianRegression())
    with pytest.raises(ReferenceError, match="needs classification"):
        load_task_reference(root, regression)


# --------------------------------------------------------------------------- fidelity: meta-training


def _fidelity_config(root, estimator="antithetic", kind="mass", execution="sequential", **inner) -> MetaTrainConfig:
    return tiny_meta_config(kind, ESConfig(estimator=estimator, truncation=10, lr=0.05, execution=execution),
                            ObjectiveConfig(kind="fidelity", reference=str(root)), TaskDistribution(tasks=(TASK,)),
                            **inner)


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(tree)])


@pytest.mark.slow
def test_fidelity_es_meta_gradient_is_finite_and_executions_agree(tmp_path):
    task = _task()
    root = write_reference(tmp_path / "refs", task, _smoothed_labels(task))
    fitness = {}
    for execution in ("sequential", "vmap"):
        config = _fidelity_config(root, execution=execution)
        out = meta_train(config, tmp_path / execution, progress=False)
        phi0, phi = _flat(initial_meta_params(config)), _flat(out["meta_params"])
        assert np.all(np.isfinite(phi)) and not np.array_equal(phi0, phi)
        rows = [json.loads(line) for line in (tmp_path / execution / "log.jsonl").read_text().splitlines()]
        fitness[execution] = np.array([r["loss_plus"] + r["loss_minus"] for r in rows], np.float64)
        assert np.all(np.isfinite(fitness[execution])) and np.all((fitness[execution] > 0) & (fitness[execution] < 1))
        assert all(r["divergent_members"] == 0 for r in rows)
    np.testing.assert_allclose(fitness["sequential"], fitness["vmap"], atol=1e-5)


@pytest.mark.slow
def test_fidelity_backprop_gradient_is_finite(tmp_path):
    task = _task()
    root = write_reference(tmp_path / "refs", task, _smoothed_labels(task))
    config = _fidelity_config(root, estimator="backprop", kind="kinetic")
    cache, mean = ProgramCache(), initial_meta_params(config)
    estimator = make(config, mean)
    grad, losses, _ = estimator.gradient(estimator.init(jax.random.PRNGKey(0), cache), 0, cache)
    g = _flat(grad)
    assert np.all(np.isfinite(g)) and np.linalg.norm(g) > 0 and 0 < losses[0] < 1


def test_missing_reference_exits_2_with_one_error_line(tmp_path):
    task = _task()
    root = write_reference(tmp_path / "refs", task, _smoothed_labels(task))  # a reference, but not the smoke task's
    out = tmp_path / "run"
    proc = run_cli("meta_train", "--preset", "smoke", "--set", "objective.kind=fidelity",
                   "--set", f"objective.reference={root}", "--output", out, "--no-progress", cwd=ROOT)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert "no reference for meta-training task 'digits/cnn-c4-d1'" in lines[0], lines[0]
    assert not out.exists()


# --------------------------------------------------------------------------- cross-chain Stein-KL


def test_cross_chain_stein_kl_gradient_is_the_kl_gradient_on_a_gaussian():
    """Target N(0, I_d) (score −θ); samples θ = μ + s·z of C chains at K sample times. d/dμ KL(q‖p) = μ and
    d/ds KL = d(s − 1/s): the surrogate's pathwise gradient must reproduce them (measured: exact (0.0, 0.1 ± 0.1),
    shifted μ = 1: 0.98–0.99, s = 0.5: −2.80 (KL −3.0), s = 2: 3.12 (KL 3.0))."""
    gauss = types.SimpleNamespace(posterior=Posterior(lambda p, b: 0.0 * jnp.sum(p["w"]),
                                                      lambda p: -0.5 * jnp.sum(jnp.square(p["w"])), 1))
    objective = stein_kl_cross_fn(gauss)
    c, k, d = 100, 3, 2
    nothing = jnp.zeros((1,))
    grad = jax.jit(jax.grad(lambda mu, s, z: objective({"w": mu + s * z}, nothing, nothing), argnums=(0, 1)))

    def mean_grad(mu, s):
        gs = [grad(jnp.full((d,), mu), jnp.asarray(s), jax.random.normal(jax.random.PRNGKey(i), (c, k, d)))
              for i in range(8)]
        return np.mean([np.asarray(g[0]) for g in gs], axis=0), float(np.mean([g[1] for g in gs]))

    g_mu, g_s = mean_grad(0.0, 1.0)  # exact samples: ~0
    assert np.all(np.abs(g_mu) < 0.1) and abs(g_s) < 0.4, (g_mu, g_s)
    g_mu, g_s = mean_grad(1.0, 1.0)  # shifted by 1 in every coordinate: ∂/∂μ = 1
    np.testing.assert_allclose(g_mu, 1.0, atol=0.1)
    assert abs(g_s) < 0.4
    for s in (0.5, 2.0):  # under- / over-dispersed: d(s − 1/s) = −3 / +3
        _, g_s = mean_grad(0.0, s)
        assert abs(g_s - d * (s - 1 / s)) < 0.6, (s, g_s)


def _cross_config(chains: int = 3) -> MetaTrainConfig:
    return tiny_meta_config("meta_sgmcmc", ESConfig(estimator="backprop", truncation=10, lr=0.01),
                            ObjectiveConfig(kind="stein_kl_cross", chains=chains), TaskDistribution(tasks=(TASK,)),
                            num_samples=5, thinning=2)


@pytest.mark.slow
def test_cross_chain_stein_kl_gradient_is_finite_and_nonzero():
    config = _cross_config(3)
    cache, mean = ProgramCache(), initial_meta_params(config)
    estimator = make(config, mean)
    state = estimator.init(jax.random.PRNGKey(0), cache)
    first = _flat(jax.tree.map(lambda a: a[0], state.unroll.states.position))
    second = _flat(jax.tree.map(lambda a: a[1], state.unroll.states.position))
    assert jax.tree.leaves(state.unroll.states.position)[0].shape[0] == 3 and not np.allclose(first, second)
    grad, losses, state = estimator.gradient(state, 0, cache)
    g = _flat(grad)
    assert np.all(np.isfinite(g)) and np.linalg.norm(g) > 0 and np.isfinite(losses[0])
    assert jax.tree.leaves(state.unroll.states.position)[0].shape[0] == 3  # the chains carried on to the next segment


def test_cross_chain_configurations_are_refused():
    with pytest.raises(ConfigError, match="gives gradients only"):
        dataclasses.replace(_cross_config(), es=ESConfig(estimator="antithetic"))
    with pytest.raises(ConfigError, match="objective.chains"):
        ObjectiveConfig(kind="stein_kl_cross", chains=1)


# --------------------------------------------------------------------------- the objective table and the likelihoods


def test_objective_table_drives_the_config():
    from meta_train.config import OBJECTIVES as KINDS
    from meta_train.objectives import OBJECTIVES

    assert KINDS == tuple(OBJECTIVES)
    assert [k for k, o in OBJECTIVES.items() if o.gradient_only] == ["stein_kl", "stein_kl_cross"]
    assert [k for k, o in OBJECTIVES.items() if o.reference] == ["fidelity"]
    assert [k for k, o in OBJECTIVES.items() if o.cross_chain] == ["stein_kl_cross"]
    for kind in KINDS:  # every kind is accepted with a pathwise estimator, and the ES ones with antithetic ES
        ObjectiveConfig(kind=kind)
        assert OBJECTIVES[kind].gradient_only or dataclasses.replace(_cross_config(), objective=ObjectiveConfig(
            kind=kind), es=ESConfig(estimator="antithetic")).objective.kind == kind


def test_task_log_likelihood_serves_bma_and_ce_for_classification_and_regression():
    """task.log_likelihood(θ, x, y) (B,) is log softmax(logits)_y for a classifier and log N(y | loc, scale²) for a
    regression task (float64 numpy to 1e-5); BMA NLL ≤ CE on both; fidelity refuses the regression task."""
    from meta_train.objectives import OBJECTIVES
    from tasks.regression import RegressionSpec, build_regression_task

    clf, reg = _task(), build_regression_task(RegressionSpec("synthetic_1d", hidden=(8,)))
    for task in (clf, reg):
        samples, (x, y) = _samples(task), task.splits.test
        ll = np.stack([np.asarray(task.log_likelihood(jax.tree.map(lambda a, k=k: a[k], samples), x, y), np.float64)
                       for k in range(3)])
        for k in range(3):
            out = task.apply(jax.tree.map(lambda a, k=k: a[k], samples), x)
            if task is clf:
                z = np.asarray(out, np.float64)
                want = z[np.arange(len(y)), np.asarray(y)] - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) \
                    - z.max(1)
            else:
                loc, scale = (np.asarray(v, np.float64) for v in out)
                want = -0.5 * np.log(2 * np.pi) - np.log(scale) - 0.5 * ((np.asarray(y) - loc) / scale) ** 2
            np.testing.assert_allclose(ll[k], want, rtol=1e-5, atol=1e-5)
        bma, ce = (float(OBJECTIVES[kind].fn(task)(samples, x, y)) for kind in ("bma", "ce"))
        assert np.isfinite(bma) and bma <= ce + 1e-6, (bma, ce)
    with pytest.raises(ConfigError, match="needs a classification task"):
        fidelity_fn(reg)
