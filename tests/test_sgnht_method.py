"""SGNHT as an evaluation method, added through the registry alone (evaluate/methods/sgnht.py + one line in
evaluate/methods/registry.py): it is a known method with its own settings group, the presets that run every
method run it, and its runner is exactly an `l2e.sgnht` chain (same keys, same samples)."""
from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import l2e
from evaluate.config import ConfigError, EvalConfig, apply_overrides, get_preset
from evaluate.methods import METHODS, REGISTRY, run_method
from evaluate.methods.sgnht import SGNHTSettings
from evaluate.run import evaluate
from l2e.chains import make_chunk, run_chain
from tasks import build

from conftest import iris_mlp, tiny_eval_config

IRIS = iris_mlp(8)


def tiny(**kw) -> EvalConfig:
    return tiny_eval_config(IRIS, ("sgnht",), dict(sgnht=dict(lrs=(0.01, 0.03))), **kw)


def test_registered_with_settings_and_in_every_method_presets():
    assert "sgnht" in METHODS and REGISTRY["sgnht"].tuned and not REGISTRY["sgnht"].full_batch
    for preset in ("full", "regression_1d"):
        assert "sgnht" in get_preset(preset).methods
    cfg = apply_overrides(get_preset("smoke"), ["methods=sgnht", "settings.sgnht.lrs=0.02,0.05",
                                                "settings.sgnht.diffusion=2"])
    assert cfg.settings.sgnht == SGNHTSettings(lrs=(0.02, 0.05), diffusion=2.0)
    assert cfg.schedule("sgnht") == cfg.schedule("sghmc")
    with pytest.raises(ConfigError, match="settings.sgnht.diffusion must be positive"):
        apply_overrides(cfg, ["settings.sgnht.diffusion=0"])


def test_runner_is_the_l2e_sgnht_chain():
    """run_method("sgnht") keeps the states of an l2e.sgnht chain (factory, fixed hyperparameters) at the
    schedule's sample steps: the traced-hyperparameter kernel gives the same numbers."""
    cfg = tiny()
    task = build(IRIS)
    init_key, chain_key = jax.random.split(jax.random.PRNGKey(3))
    res = run_method("sgnht", task, (init_key, chain_key), {"learning_rate": 0.03}, cfg)
    alg = l2e.sgnht(task.posterior, 0.03, cfg.settings.sgnht.diffusion)
    schedule = cfg.schedule("sgnht")
    chunk = jax.jit(make_chunk(lambda k, s, b, a: alg.step(k, s, b), task.sample_batch, schedule.batch_size,
                               schedule.chunk_length))
    direct = run_chain(chunk, alg.init(task.init_params(init_key)), chain_key, task.train_data, None, schedule)
    assert res.num_finite == 4 and res.divergent_chains == 0
    for a, b in zip(jax.tree.leaves(res.samples), jax.tree.leaves(direct.samples)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert res.hyperparameters["final_thermostat"] == pytest.approx(float(direct.state.thermostat))
    assert np.all(np.asarray(direct.info.is_finite))


def test_evaluated_and_tuned():
    (task,) = evaluate(tiny(), None, progress=False)["tasks"].values()
    m = task["methods"]["sgnht"]
    assert m["grad_evals"] == 40 and m["num_samples"] == 4 and m["divergent_chains"] == 0
    assert set(m["hyperparameters"]["grid"]) == {"lr=0.01", "lr=0.03"}
    for key in ("acc", "nll", "ece", "pairwise_kld"):
        assert math.isfinite(m[key])
    assert m["ess"]["chains"] == 1 and m["barrier"]["pair"] == "first and last sample of chain 0"
