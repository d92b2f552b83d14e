"""Outer gradient estimators (meta_train.estimators) and meta-objectives (meta_train.objectives).

- Every truncated estimator meta-trains every learned sampler kind it is paired with here (2 outer iterations on a
  tiny MLP task): finite, φ moves, log rows name the estimator and segment.
- "backprop" is the pathwise derivative: on Kinetic-L2E (no stop-gradients in its step) the gradient of a segment's
  meta-loss along a random direction equals a central finite difference.
- PES on an unroll's first segment is truncated ES (same keys, same ĝ); on the second it differs, by the
  accumulated perturbation.
- KSD: exact draws of a Gaussian score lower than under-dispersed or shifted draws; the Stein gradient estimator
  recovers ∇log q = −x of a standard normal (correlation > 0.75; measured 0.84).
- Bad combinations are refused (stein_kl with ES, a truncation that does not divide the chain).
- Every module of the estimator table follows the protocol; noise-reuse ES keeps one perturbation per unroll.
- A truncated / PES / noise-reuse / backprop run stopped mid-unroll and resumed equals an uninterrupted run bit for bit
  (meta-parameters, every checkpointed array, every log row but timings); a checkpoint in the earlier layout (no
  unroll) still resumes, with φ and the Adam state restored exactly.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e.meta_model import init_mu_params
from meta_train.config import ConfigError, ESConfig, MetaTrainConfig, ObjectiveConfig, apply_overrides
from meta_train.es import ProgramCache, outer_keys, sampler_module
from meta_train.estimators import make
from meta_train.estimators.unroll import segment_loss_fn, segment_programs
from meta_train.objectives import ksd, stein_gradient
from meta_train.train import initial_meta_params, meta_train
from tasks.distribution import TaskDistribution

from conftest import tiny_meta_config


def tiny(estimator: str, kind: str, objective: str = "bma") -> MetaTrainConfig:
    return tiny_meta_config(kind, ESConfig(estimator=estimator, truncation=10, lr=0.05), ObjectiveConfig(kind=objective),
                            TaskDistribution(datasets=("digits",), mlp_hidden=((8,),), max_train=200))


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


@pytest.mark.slow
@pytest.mark.parametrize("estimator, kind, objective", [("truncated", "l2e", "bma"), ("pes", "meta_sgmcmc", "ksd"),
                                                         ("backprop", "meta_sgmcmc", "stein_kl")])
def test_estimators_meta_train(tmp_path, estimator, kind, objective):
    config = tiny(estimator, kind, objective)
    out = meta_train(config, tmp_path / "run", progress=False)
    phi0, phi = _flat(initial_meta_params(config)), _flat(out["meta_params"])
    assert np.all(np.isfinite(phi)) and not np.array_equal(phi0, phi)
    rows = [__import__("json").loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [(r["estimator"], r["segment"]) for r in rows] == [(estimator, 0), (estimator, 1)]


@pytest.mark.slow
def test_backprop_is_the_pathwise_derivative():
    config = tiny("backprop", "kinetic")
    cache = ProgramCache()
    spec = config.tasks.sample(outer_keys(0, 0).task)
    task = cache.task(spec)
    kernel = sampler_module(config.sampler_config).build_kernel(task.posterior, config.sampler_config)
    objective = lambda s, x, y: sum(jnp.sum(v**2) for v in jax.tree.leaves(s))  # noqa: E731  (smooth)
    loss = segment_loss_fn(kernel, objective, 16, 2, 2)
    phi = init_mu_params(jax.random.PRNGKey(3), (8,), zero_output=False)
    state = sampler_module(config.sampler_config).init(task.init_params(jax.random.PRNGKey(1)))
    args = (state, jax.random.PRNGKey(2), jnp.asarray(0), task.train_data, None, None)
    f = lambda p: loss(p, *args)[0]  # noqa: E731
    grad = jax.grad(f)(phi)
    direction = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(x.size), x.shape), phi)
    h = 1e-2
    shifted = lambda s: jax.tree.map(lambda p, d: p + s * h * d, phi, direction)  # noqa: E731
    fd = (float(f(shifted(1.0))) - float(f(shifted(-1.0)))) / (2 * h)
    ad = float(sum(jnp.sum(g * d) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(direction))))
    assert abs(ad) > 1e-3 and abs(fd - ad) <= 0.05 * abs(ad), (fd, ad)  # float32, ReLU kinks: measured 3 % at h 1e-2


@pytest.mark.slow
def test_pes_first_segment_is_truncated_es_then_accumulates():
    cache = ProgramCache()
    configs = {e: tiny(e, "meta_sgmcmc") for e in ("pes", "truncated")}
    phi = initial_meta_params(configs["pes"])
    estimators = {e: make(c, phi) for e, c in configs.items()}
    states = {e: est.init(jax.random.PRNGKey(0), cache) for e, est in estimators.items()}
    grads = {e: [] for e in configs}
    for it in range(2):
        for e, est in estimators.items():
            grad, _, states[e] = est.gradient(states[e], it, cache)
            grads[e].append(_flat(grad))
    np.testing.assert_array_equal(grads["pes"][0], grads["truncated"][0])
    assert np.abs(grads["pes"][0]).max() > 0
    assert np.abs(grads["pes"][1]).max() > 0 and not np.allclose(grads["pes"][1], grads["truncated"][1])
    spec = states["pes"].unroll.spec
    assert segment_programs(cache, spec, configs["pes"]) is segment_programs(cache, spec, configs["truncated"])


def test_ksd_and_stein_gradient_on_a_gaussian():
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (200, 2))
    score = lambda a: -a  # noqa: E731  (standard normal)
    exact, narrow, shifted = ksd(x, score(x)), ksd(0.3 * x, score(0.3 * x)), ksd(x + 1.0, score(x + 1.0))
    assert abs(float(exact)) < 0.2 * min(float(narrow), float(shifted)), (exact, narrow, shifted)
    g = stein_gradient(x)
    corr = np.corrcoef(np.ravel(np.asarray(g)), np.ravel(-np.asarray(x)))[0, 1]
    assert corr > 0.75, corr  # measured 0.84 (λ = 0.05 shrinks the estimate)


def test_bad_estimator_configurations_are_refused():
    with pytest.raises(ConfigError, match="stein_kl"):
        dataclasses.replace(tiny("pes", "l2e"), objective=ObjectiveConfig(kind="stein_kl"))
    with pytest.raises(ConfigError, match="truncation"):
        apply_overrides(tiny("pes", "l2e"), ["es.truncation=7"])
    with pytest.raises(ConfigError, match="estimator"):
        ESConfig(estimator="reinforce")


# ----------------------------------------------------------------------------- the estimator table and resumption


def test_every_estimator_module_follows_the_protocol():
    from meta_train.config import ESTIMATORS
    from meta_train.estimators import ESTIMATORS as TABLE

    assert ESTIMATORS == tuple(TABLE)
    for name, module in TABLE.items():
        assert isinstance(module.TRUNCATED, bool) and isinstance(module.PATHWISE, bool), name
        cls = module.Estimator
        assert cls.name == name and all(callable(getattr(cls, m, None))
                                        for m in ("init", "step", "mean", "legacy_template")), name
        assert module.TRUNCATED == callable(getattr(cls, "from_legacy", None)), name  # earlier layouts: truncated


@pytest.fixture(scope="module")
def programs():
    """One ProgramCache for the runs below (their programs are compiled once; the numbers do not depend on it)."""
    return ProgramCache()


def test_noise_reuse_meta_trains_and_keeps_its_perturbation_within_an_unroll(tmp_path, programs):
    config = tiny("noise_reuse", "l2e")
    out = meta_train(config, tmp_path / "run", progress=False, cache=programs)
    assert np.all(np.isfinite(_flat(out["meta_params"])))
    assert not np.array_equal(_flat(initial_meta_params(config)), _flat(out["meta_params"]))
    cache, phi = programs, initial_meta_params(config)
    estimator = make(config, phi)
    state = estimator.init(jax.random.PRNGKey(0), cache)
    perts = []
    for it in range(3):  # K = 2 segments per unroll: iterations 0, 1 share one perturbation, 2 draws a new one
        _, _, state = estimator.gradient(state, it, cache)
        perts.append(np.asarray(state.es.pert))
    np.testing.assert_array_equal(perts[0], perts[1])
    assert not np.allclose(perts[1], perts[2])


def _resume_config(estimator: str) -> MetaTrainConfig:
    """Two segments per unroll; checkpoints at 3 (mid-unroll: unroll 1, segment 1) and 6."""
    kind = "kinetic" if estimator == "backprop" else "l2e"
    return dataclasses.replace(tiny(estimator, kind), num_outer=6, checkpoint_every=3)


def _rows(out) -> list[dict]:
    from meta_train.run_dir import read_log

    timing = ("seconds", "inner_seconds", "first_time_task")
    return [{k: v for k, v in r.items() if k not in timing} for r in read_log(out)]


@pytest.mark.parametrize("estimator", ["truncated", "pes", "noise_reuse", "backprop"])
def test_resume_mid_unroll_is_bit_identical(tmp_path, estimator, programs):
    """Stopped after iteration 3 (its checkpoint holds unroll 1 mid-way: chain states, perturbation accumulators) and
    resumed: the meta-parameters, every checkpointed array and every log row (but timings) equal an uninterrupted
    run's."""
    config = _resume_config(estimator)
    full = meta_train(config, tmp_path / "full", progress=False, cache=programs)
    meta_train(config, tmp_path / "cut", progress=False, stop_after=3, cache=programs)
    assert [r["segment"] for r in _rows(tmp_path / "cut")] == [0, 1, 0]
    resumed = meta_train(config, tmp_path / "cut", resume=True, progress=False, cache=programs)
    assert _flat(full["meta_params"]).tobytes() == _flat(resumed["meta_params"]).tobytes()
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "full")
    assert [(r["unroll"], r["segment"]) for r in _rows(tmp_path / "full")] == [(0, 0), (0, 1), (1, 0), (1, 1),
                                                                                (2, 0), (2, 1)]
    a, b = (_step_arrays(tmp_path / run / "checkpoints" / "6") for run in ("cut", "full"))
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def _step_arrays(step_dir) -> dict:
    """Every array of a checkpoint step (the estimator state's leaves and the meta-parameters)."""
    import orbax.checkpoint as ocp

    out = {}
    for item in ("es_state", "meta_params"):
        tree = ocp.PyTreeCheckpointer().restore(step_dir.resolve() / item)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            out[f"{item}{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    return out


def _legacy_state(estimator, state):
    """The state in the layout checkpoints held before the unroll was checkpointed: (φ, Adam state) as pytrees."""
    from jax.flatten_util import ravel_pytree

    if estimator.name == "backprop":
        return tuple(state.outer)
    unravel = ravel_pytree(estimator.phi0)[1]
    d = state.es.mean.shape[0]
    opt = jax.tree.map(lambda x: unravel(x) if np.ndim(x) == 1 and np.shape(x)[0] == d else x, state.es.opt_state)
    return unravel(state.es.mean), opt


@pytest.mark.parametrize("estimator", ["pes", "backprop"])
def test_checkpoints_without_the_unroll_still_resume(tmp_path, estimator, programs):
    """A checkpoint in the earlier layout (φ and the Adam state only) restores φ and the Adam state exactly, without
    an unroll, and the run continues from there (that unroll's chain restarts from θ₀ at its segment)."""
    from l2e.checkpoint import read_meta, save_checkpoint
    from meta_train.run_dir import RunDir

    config = _resume_config(estimator)
    out = tmp_path / "run"
    meta_train(config, out, progress=False, stop_after=3, cache=programs)
    cache, phi0, key = programs, initial_meta_params(config), jax.random.PRNGKey(config.seed)
    est = make(config, phi0)
    legacy = (est.legacy_template(), lambda old, step: est.from_legacy(old, key, cache, step))
    start, state, _ = RunDir(out, writer=False).resume(lambda step: est.init(key, cache, step), True, legacy)
    assert start == 3 and state.unroll is not None
    ckpt = out / "checkpoints" / "3"
    save_checkpoint(out / "checkpoints", 3, _legacy_state(est, state), est.mean(state), read_meta(ckpt))
    start, old, _ = RunDir(out, writer=False).resume(lambda step: est.init(key, cache, step), True, legacy)
    assert start == 3 and old.unroll is None
    assert _flat(est.mean(old)).tobytes() == _flat(est.mean(state)).tobytes()
    now = old.es.opt_state if estimator != "backprop" else old.outer.opt_state
    was = state.es.opt_state if estimator != "backprop" else state.outer.opt_state
    assert _flat(now).tobytes() == _flat(was).tobytes()
    resumed = meta_train(config, out, resume=True, progress=False, cache=programs)
    assert np.all(np.isfinite(_flat(resumed["meta_params"])))
    assert [(r["unroll"], r["segment"]) for r in _rows(out)][3:] == [(1, 1), (2, 0), (2, 1)]
