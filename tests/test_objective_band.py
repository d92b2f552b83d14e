"""The banded fidelity meta-objective and the budget-averaged meta-loss (meta_train.objectives.fidelity,
meta_train.reference, meta_train.config.ObjectiveConfig, meta_train.estimators.antithetic.population_fitness).

- fidelity with a ReferenceTarget: plain TV when the samples' predictive variance (ddof 1) equals the reference
  draws' or lies within [0.8, 1.25] of it; TV + w·(|log ratio| − log 1.25) outside, equal to the float64 numpy value
  to 1e-5 (the log-ratio term is of order 0.1–1 at these ratios);
- `load_task_reference(draws=True)` returns the draws' predictive variance (numpy, ddof 1, to 1e-6 relative) and
  refuses a reference without draw_probs.npz or with a subset of rows (one ReferenceError line);
- ObjectiveConfig / MetaTrainConfig refuse a dispersion weight off "fidelity", a temperature weight without
  T_kin logging, budgets with a truncated estimator (one error saying why), and a budget too short for the
  samples;
- schedule_at scales the burn-in with the budget and the sampling window (freeze) follows it;
- population_fitness averages evaluate_population over the budgets (equal to the mean of the separate calls to
  float32 rounding) and adds temperature_weight·log(1 + |T_kin − T|/T).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meta_train.config import ConfigError, ESConfig, ObjectiveConfig
from meta_train.es import ProgramCache, evaluate_population, outer_keys
from meta_train.estimators.antithetic import population_fitness
from meta_train.objectives import fidelity_fn
from meta_train.objectives.fidelity import BAND, ReferenceTarget
from meta_train.reference import ReferenceError, load_task_reference, task_name
from meta_train.train import initial_meta_params
from tasks.distribution import TaskDistribution

from conftest import tiny_meta_config
from test_objectives import TASK, _bma_probs, _samples, _smoothed_labels, _task, write_reference


def _probs(task, samples, x) -> np.ndarray:
    """(K, n, C) float64 numpy per-sample probabilities."""
    k = jax.tree.leaves(samples)[0].shape[0]
    return np.stack([_bma_probs(task, jax.tree.map(lambda a, i=i: a[i:i + 1], samples), x) for i in range(k)])


def test_band_penalty_is_zero_inside_and_the_log_excess_outside():
    task = _task()
    samples, (x, _) = _samples(task), task.splits.test
    fid = jax.jit(fidelity_fn(task))
    per = _probs(task, samples, x)
    q = _smoothed_labels(task)
    tv = float(np.mean(0.5 * np.abs(per.mean(axis=0) - q).sum(axis=1)))
    v = float(np.mean(np.var(per, axis=0, ddof=1)))
    w = 0.3
    for ratio in (1.0, 0.85, 1.2, 0.5, 2.0, 4.0):  # v / v_ref
        target = ReferenceTarget(jnp.asarray(q, jnp.float32), jnp.float32(v / ratio), jnp.float32(w))
        want = tv + w * max(abs(math.log(ratio)) - math.log(BAND), 0.0)
        got = float(fid(samples, x, target))
        assert abs(got - want) < 1e-5, (ratio, got, want)
    plain = float(fid(samples, x, ReferenceTarget(jnp.asarray(q, jnp.float32), jnp.float32(v / 4), jnp.float32(0))))
    assert abs(plain - tv) < 1e-6 and abs(float(fid(samples, x, jnp.asarray(q, jnp.float32))) - tv) < 1e-6


def _draws_near(q, draws: int, rng) -> np.ndarray:
    """(draws, n, C) probability vectors scattered around q (Dirichlet(30 q) per row): draws whose average matches the
    reference's probabilities on its rows, as a reference's own draws do (tasks.reference.load_draws checks it)."""
    g = rng.gamma(30.0 * np.broadcast_to(q, (draws, *q.shape)))
    return g / g.sum(axis=-1, keepdims=True)


def _write_draws(root, task, probs, rows=None):
    slug = task_name(task.spec).replace("/", "_").replace(":", "_")
    extra = {} if rows is None else {"rows": rows}
    np.savez(root / slug / "draw_probs.npz", probs=probs.astype(np.float32), chain=np.zeros(len(probs), int), **extra)


def test_reference_draws_give_the_predictive_variance_or_a_refusal(tmp_path):
    task = _task()
    q = _smoothed_labels(task)
    root = write_reference(tmp_path / "refs", task, q)
    with pytest.raises(ReferenceError, match="no per-draw predictives"):
        load_task_reference(root, task, draws=True)
    assert load_task_reference(root, task).pred_var is None
    rng = np.random.default_rng(1)
    draws = _draws_near(q, 6, rng)
    _write_draws(root, task, draws)
    got = load_task_reference(root, task, draws=True).pred_var
    want = float(np.mean(np.var(draws.astype(np.float32).astype(np.float64), axis=0, ddof=1)))
    assert abs(got - want) <= 1e-6 * want
    _write_draws(root, task, draws[:, :10], rows=np.arange(10))
    with pytest.raises(ReferenceError, match="every test point"):
        load_task_reference(root, task, draws=True)


def _config(root=None, kind="fidelity", estimator="antithetic", **objective):
    obj = ObjectiveConfig(kind=kind, reference=None if root is None else str(root), **objective)
    return tiny_meta_config("transient", ESConfig(estimator=estimator, truncation=10, execution="sequential"), obj,
                            TaskDistribution(tasks=(TASK,)), num_steps=40, num_samples=2, thinning=5)


def test_objective_settings_are_checked():
    with pytest.raises(ConfigError, match="dispersion_weight needs objective.kind fidelity"):
        ObjectiveConfig(kind="bma", dispersion_weight=0.1)
    with pytest.raises(ConfigError, match="temperature_weight needs objective.log_temperature"):
        ObjectiveConfig(temperature_weight=0.1)
    with pytest.raises(ConfigError, match="finite number ≥ 0"):
        ObjectiveConfig(kind="fidelity", dispersion_weight=-1.0)
    with pytest.raises(ConfigError, match="positive integers"):
        ObjectiveConfig(budgets=(100, 0))
    with pytest.raises(ConfigError, match="truncated cannot take .* a truncated estimator runs one chain"):
        _config(kind="bma", estimator="truncated", budgets=(20, 40))
    with pytest.raises(ConfigError, match="a chain of 4 updates does not fit"):
        _config(kind="bma", burn_in=20, budgets=(4, 40))


def test_schedules_scale_the_burn_in_and_the_window():
    config = _config(kind="bma", burn_in=20, budgets=(20, 80))
    short, long = config.schedules
    assert (short.num_steps, short.thinning) == (20, 5) and (long.num_steps, long.thinning) == (80, 20)
    assert config.sampler_config_at(short).freeze_step == 10 and config.sampler_config_at(long).freeze_step == 40
    assert _config(kind="bma", burn_in=20).schedules == (_config(kind="bma", burn_in=20).schedule,)


def test_population_fitness_averages_budgets_and_adds_the_temperature_penalty(tmp_path):
    task = _task()
    root = write_reference(tmp_path / "refs", task, _smoothed_labels(task))
    _write_draws(root, task, _draws_near(_smoothed_labels(task), 5, np.random.default_rng(2)))
    config = _config(root, burn_in=20, budgets=(20, 40), dispersion_weight=0.2, log_temperature=True,
                     temperature_weight=0.5)
    phi = initial_meta_params(config)
    population = jax.tree.map(lambda a: jnp.stack([a, a + 0.01]), phi)
    keys, spec, cache = outer_keys(0, 0), config.tasks.sample(outer_keys(0, 0).task), ProgramCache()
    got = population_fitness(config, spec, population, keys, cache)
    parts = []
    for schedule in config.schedules:
        r = evaluate_population(spec, population, keys, config.sampler_config_at(schedule), schedule, 64,
                                execution="sequential", cache=cache, objective="fidelity", log_temperature=True,
                                reference=str(root), dispersion_weight=0.2)
        parts.append((np.asarray(r.fitness, np.float64), r.t_kin))
    want = np.mean([f + 0.5 * np.log1p(np.abs(t - 1.0)) for f, t in parts], axis=0)
    np.testing.assert_allclose(np.asarray(got.fitness), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.t_kin, np.mean([t for _, t in parts], axis=0))
    assert np.all(np.isfinite(want)) and not np.allclose(parts[0][0], parts[1][0])


def test_init_from_starts_at_a_checkpoint_and_refuses_a_mismatch():
    """init_from: φ₀ is the checkpoint's meta-parameters (fine-tuning); another kind or width is one ConfigError."""
    import dataclasses

    from l2e.checkpoint import load_meta_params

    base = dataclasses.replace(_config(kind="bma"), hidden=(16,))
    phi = initial_meta_params(dataclasses.replace(base, init_from="transient"))
    want = load_meta_params("transient")[0]
    for a, b in zip(jax.tree.leaves(phi), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(np.any(np.asarray(a) != 0) for a in jax.tree.leaves(phi))
    with pytest.raises(ConfigError, match="is not a transient checkpoint with hidden"):
        initial_meta_params(dataclasses.replace(base, hidden=(8,), init_from="transient"))
    with pytest.raises(ConfigError, match="is not a transient checkpoint"):
        initial_meta_params(dataclasses.replace(base, init_from="mass"))  # another kind
    with pytest.raises(ConfigError, match="init_from"):
        initial_meta_params(dataclasses.replace(base, init_from="/nonexistent/run"))
