"""Values by meaning (issue 40, class 3): every sampler's hyperparameters go through one validation path
(l2e.checks), seeds stay in the range the PRNG keeps distinct, an override key is given once, every limit is checked
on the whole configuration after all overrides and before anything runs, and the report records what ran."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import learned
from l2e.hand_designed import MINIBATCH

# ----------------------------------------------------------------------------- samplers: one validation path

NUMBER_BAD = (True, np.bool_(False), "0.1", None, np.array([0.1]), np.ones((2, 2)), float("nan"))
"""What a numeric hyperparameter must refuse: bools, strings, None, arrays that are not 0-d, NaN."""
FLAG_BAD = ("yes", "False", 1, 1.5, np.array([True]), None)
"""What a switch must refuse: strings (\"False\" is true), numbers, arrays, None."""
TEXT_BAD = (True, 3, None)
"""What a named option must refuse."""
REQUIRED = {"learning_rate": 0.1, "num_steps": 100, "anchor": l2e.control_variates.Anchor(jnp.zeros(3), jnp.zeros(3))}
"""The required arguments of the factories that have them."""
SKIP = {"posterior", "phase", "kwargs"}


def _quadratic():
    return l2e.Posterior(lambda p, b: 0.5 * jnp.sum((p - b) ** 2), lambda p: 0.0 * p.sum(), 100)


def _bad_values(annotation, default) -> tuple:
    """The refused values for a parameter of this annotation; an Optional one accepts None (its default)."""
    text = str(annotation)
    optional = default is None or "None" in text
    if "bool" in text:
        bad = FLAG_BAD
    elif "str" in text:
        bad = TEXT_BAD
    else:
        bad = NUMBER_BAD
    return tuple(b for b in bad if not (optional and b is None))


def _factory_cases():
    for row in MINIBATCH:
        if row.name.startswith("fsg"):  # on a FunctionalPosterior: tests/test_samplers.py
            continue
        factory = getattr(importlib.import_module(f"l2e.{row.module}"), row.factory)
        for name, p in inspect.signature(factory).parameters.items():
            if name not in SKIP:
                yield pytest.param(row.name, factory, name, p, id=f"{row.name}.{name}")


@pytest.mark.parametrize("sampler,factory,name,param", list(_factory_cases()))
def test_every_factory_refuses_what_its_hyperparameter_cannot_mean(sampler, factory, name, param):
    """Every keyword of every minibatch factory (l2e.hand_designed.MINIBATCH) refuses, with a ValueError naming it,
    each value that cannot mean what the annotation says: a bool, a string, None, a non-0-d array or NaN for a
    number, anything but a bool for a switch (before this, l2e.baoab(post, False) ran with lr 0 and smile's
    tuner='no' ran the tuner)."""
    post = _quadratic()
    base = {k: v for k, v in REQUIRED.items() if k in inspect.signature(factory).parameters}
    for bad in _bad_values(param.annotation, param.default):
        with pytest.raises(ValueError, match=name):
            factory(post, **{**base, name: bad})


def _config_cases():
    for kind, entry in learned.REGISTRY.items():
        hints = typing.get_type_hints(entry.config)
        for f in dataclasses.fields(entry.config):
            yield pytest.param(entry.config, f.name, hints[f.name], f.default, id=f"{kind}.{f.name}")


@pytest.mark.parametrize("config,name,annotation,default", list(_config_cases()))
def test_every_learned_config_refuses_what_its_field_cannot_mean(config, name, annotation, default):
    """Every field of every learned sampler's configuration (l2e.learned.REGISTRY) refuses the values above, and an
    integer field (a freeze step) a float or a bool too (TransientConfig(window_fraction=True) passed as 1.0)."""
    bad = _bad_values(annotation, default)
    if annotation is int:
        bad += (10.5, np.array([10]))
    for value in bad:
        with pytest.raises(ValueError, match=name):
            config(**{name: value})


def test_the_issue_examples_are_refused_with_the_value_named():
    post = _quadratic()
    cases = ((lambda: l2e.baoab(post, False), "learning_rate must be a number"),
             (lambda: l2e.adaptive_sghmc(post, mdecay=3.0), r"mdecay must be in \(0.0, 1.0\]"),
             (lambda: l2e.warm_sghmc(post, np.array([-0.1])), "learning_rate must be a number"),
             (lambda: l2e.precond_sghmc(post, "0.1"), "learning_rate must be a number"),
             (lambda: l2e.load_sampler("transient", posterior=post, adapt_fraction="0.5"), "adapt_fraction must be"),
             (lambda: l2e.TransientConfig(window_fraction=True), "window_fraction must be a number"),
             (lambda: l2e.cyclical_sghmc(post, 0.1, 100, momentum_decay=3.0), r"momentum_decay must be in \(0.0, 1.0\]"),
             (lambda: l2e.smile.smile(post, tuner="no"), "tuner must be True or False"))
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_full_batch_samplers_check_their_arguments():
    logdensity = lambda p: -0.5 * jnp.sum(p ** 2)  # noqa: E731
    with pytest.raises(ValueError, match="step_size"):
        l2e.mclmc(logdensity, 1.0, "0.1")
    with pytest.raises(ValueError, match="max_num_doublings"):
        l2e.nuts(logdensity, 0.1, jnp.ones(2), max_num_doublings=2.5)
    with pytest.raises(ValueError, match="thinning"):
        l2e.nuts.nuts_chains(logdensity, jnp.zeros((1, 2)), jax.random.PRNGKey(0), 10, 5, thinning=0)
    with pytest.raises(ValueError, match="target_acceptance_rate"):
        l2e.nuts.nuts_chains(logdensity, jnp.zeros((1, 2)), jax.random.PRNGKey(0), 10, 5, target_acceptance_rate=1.5)
    with pytest.raises(ValueError, match=r"num_steps \(n1\)"):
        l2e.mile(logdensity, jnp.zeros(2), jax.random.PRNGKey(0), 0.1, num_steps=(10.0, 5, 5))
    with pytest.raises(ValueError, match="step_size0"):
        l2e.mile(logdensity, jnp.zeros(2), jax.random.PRNGKey(0), -0.1)


def test_switches_that_are_bools_still_build():
    """The checks refuse by meaning, not by type name: numpy bools and numpy / JAX scalars are accepted."""
    post = _quadratic()
    l2e.precond_sghmc(post, np.float32(0.1), noise_halves=np.bool_(False))
    l2e.smile.smile(post, jnp.float32(1e-3), tuner=False, likelihood_scale=np.int64(100))
    l2e.TransientConfig(noise_halves=False, subtract_noise=True)


# ----------------------------------------------------------------------------- overrides: once each, applied as a whole


def test_overrides_apply_as_a_whole_in_any_order():
    """Every check runs on the configuration after all overrides (each group rebuilt once with all its new fields):
    `inner.num_steps=8 inner.num_samples=2` was refused in that order (3 samples 5 apart do not fit 8 steps) and
    accepted in the other; now every order gives the same configuration."""
    import itertools

    from cli import apply_overrides
    from evaluate.config import get_preset
    from meta_train.presets import PRESETS

    items = ["inner.num_steps=8", "inner.num_samples=2", "es.sigma=0.05", "seed=7"]
    got = {apply_overrides(PRESETS["smoke"], list(order)) for order in itertools.permutations(items)}
    assert len(got) == 1
    (cfg,) = got
    assert (cfg.inner.num_steps, cfg.inner.num_samples, cfg.es.sigma, cfg.seed) == (8, 2, 0.05, 7)
    items = ["num_samples=6", "num_steps=30", "thinning=5", "chains=3"]  # 60 / 3 → 30 / 6: invalid halfway
    got = {apply_overrides(get_preset("smoke"), list(order)) for order in itertools.permutations(items)}
    assert len(got) == 1 and next(iter(got)).num_steps == 30


@pytest.mark.parametrize("items,message", [
    (["seed=1", "seed=1"], "override seed given twice"),
    (["es.sigma=0.1", "es.sigma=0.2"], "override es.sigma given twice"),
    (["tasks=digits", "tasks.datasets=digits"], r"override tasks set both whole \('tasks=digits'\) and by key"),
    (["tasks.datasets=digits", "tasks=digits"], "override tasks set both whole"),
    (["es..sigma=0.1"], "has an empty part"),
])
def test_an_override_key_is_given_once(items, message):
    from base.io import ConfigError
    from cli import apply_overrides
    from meta_train.presets import PRESETS

    with pytest.raises(ConfigError, match=message):
        apply_overrides(PRESETS["smoke"], items)


def test_a_sampler_override_key_is_given_once():
    """`settings.l2e_transient.sampler=window_fraction=0.25,window_fraction=0.75` kept the last silently."""
    from base.io import ConfigError
    from cli import apply_overrides
    from evaluate.config import get_preset

    with pytest.raises(ConfigError, match="settings.l2e_transient.sampler: override window_fraction given twice"):
        apply_overrides(get_preset("smoke"), ["settings.l2e_transient.sampler=window_fraction=0.25,"
                                              "window_fraction=0.75"])


@pytest.mark.parametrize("overrides,message", [
    (["methods=sghmc,l2e", "settings.l2e.sampler=nope=1"], "settings.l2e.sampler: unknown config key: nope"),
    (["methods=sghmc,l2e", "settings.l2e.sampler=temperature=-1"], "temperature must be a positive"),
    (["methods=sghmc,l2e_mass", "settings.l2e_mass.sampler=freeze_step=10"],
     "settings.l2e_mass.sampler: freeze_step is set by the evaluation"),
    (["methods=l2e_transient", "settings.l2e_transient.sampler=freeze_step=10"],
     "settings.l2e_transient.sampler: freeze_step is set by the evaluation"),
    (["methods=l2e_transient", "settings.l2e_transient.sampler=window_fraction=0.25"],
     "changes Transient-L2E's sampling window, which thinning=10 fixes"),
    (["settings.l2e.sampler=learning_rate=0.1"], "its learning rate is the method's lrs"),
])
def test_a_sampler_override_that_would_not_run_is_refused_before_anything_runs(cli, tmp_path, overrides, message):
    """The `l2e` method's checkpoint kind is known only once loaded: an unknown field was refused after SGHMC had
    run; a field the window rule sets (freeze_step) was accepted and the window start ran instead; a window that
    thinning overrides was recorded but not sampled. Each is now one error line before anything runs."""
    from tests.conftest import one_error_line

    out = tmp_path / "out"
    argv = ["--preset", "smoke", "--output", out, "--quiet"]
    for o in overrides:
        argv += ["--set", o]
    line = one_error_line(cli("evaluate", *argv))
    assert re.search(message, line), line
    assert not out.exists()


def test_duplicate_flags_and_overrides_are_one_error_line(cli, tmp_path):
    from tests.conftest import one_error_line

    line = one_error_line(cli("evaluate", "--preset", "smoke", "--set", "seed=1", "--seed", "2", "--output",
                              tmp_path / "o"))
    assert "override seed given twice: 'seed=1' and 'seed=2'" in line
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- the report records what ran


def test_the_report_records_every_override_as_it_ran():
    """A tiny evaluation of Transient-L2E with overrides of every kind (a top-level field, a method's grid, the
    sampler's fields, a window the protocol then uses): the report's configuration holds each override's parsed,
    checked value (".25" is recorded as 0.25), and the method's record holds what the chain ran — the window the
    override asked for (thinning 2 = ⌊0.25·40⌋ // 4, the freeze at 40 − 4·2 = 32), the burn-in ablation."""
    from cli import apply_overrides
    from evaluate.run import evaluate
    from tests.conftest import iris_mlp, tiny_eval_config

    overrides = {"thinning": ("none", None), "batch_size": ("8", 8), "settings.l2e_transient.lrs": ("1", [1.0]),
                 "settings.l2e_transient.sampler": ("window_fraction=.25,burn_in=warm",
                                                    ["window_fraction=0.25", "burn_in=warm"])}
    cfg = apply_overrides(tiny_eval_config(iris_mlp(), ["l2e_transient"]),
                          [f"{k}={text}" for k, (text, _) in overrides.items()])
    res = evaluate(cfg, progress=False)
    for key, (_, want) in overrides.items():
        node = res["config"]
        for part in key.split("."):
            node = node[part]
        assert node == want, (key, node, want)
    (task,) = res["tasks"].values()
    hp = task["methods"]["l2e_transient"]["hyperparameters"]
    assert hp["thinning"] == 2 and hp["sampler"]["freeze_step"] == 40 - 4 * 2
    assert hp["sampler"]["window_fraction"] == 0.25 and hp["sampler"]["burn_in"] == "warm"
    assert res["config"]["thinning_used"] == cfg.sample_thinning  # the protocol's, for the methods without a window


# ----------------------------------------------------------------------------- seeds and limits, before anything runs


@pytest.mark.parametrize("flags,message", [
    (["--seeds", "0,4294967296"], r"seeds must be an integer in \[0, 2\*\*32\), got 4294967296"),
    (["--seeds", "0,18446744073709551616"], "seeds must be an integer in"),
    (["--seeds", "-1"], "seeds must be an integer in"),
    (["--budgets", "1000,300000000"], r"budget 300000000 with 1 chain: num_steps must be at most 1e\+08"),
    (["--tune-budget", "300000000"], "budget 300000000 with 1 chain: num_steps must be at most"),
])
def test_curve_seeds_and_limits_are_checked_before_anything_runs(cli, tmp_path, flags, message):
    """A curve seed of 2**32 gave seed 0's keys (two identical curves reported as two seeds) and 2**64 raised
    OverflowError after seed 0 ran; a budget above the resource limit was refused after the smaller budgets ran.
    Every run's configuration and seed is now checked first: one error line, nothing read or written (the reference
    named here does not even exist)."""
    from tests.conftest import one_error_line

    out = tmp_path / "curve"
    line = one_error_line(cli("evaluate", "curve", "--reference", tmp_path / "no-reference", "--output", out, *flags))
    assert re.search(message, line), line
    assert not out.exists()


def test_curve_sampler_overrides_are_checked_before_anything_runs(cli, tmp_path):
    from tests.conftest import ROOT, one_error_line

    out = tmp_path / "curve"
    line = one_error_line(cli("evaluate", "curve", "--reference", ROOT / "results" / "references", "--output", out,
                              "--set", "settings.l2e_mass.sampler=freeze_step=10"))
    assert "settings.l2e_mass.sampler: freeze_step is set by the evaluation" in line, line
    assert not out.exists()


def test_seeds_outside_the_prng_range_are_refused_everywhere():
    """jax.random.PRNGKey keeps the low 32 bits: 2**32 is seed 0's key (cli.check_seed, every configuration)."""
    assert np.array_equal(jax.random.PRNGKey(2**32), jax.random.PRNGKey(0))  # why the range is [0, 2**32)
    from base.io import ConfigError
    from cli import apply_overrides
    from evaluate.config import get_preset
    from meta_train.presets import PRESETS

    for cfg, key in ((get_preset("smoke"), "seed"), (get_preset("smoke"), "seeds"), (PRESETS["smoke"], "seed")):
        for seed in ("4294967296", "-1"):
            with pytest.raises(ConfigError, match=r"must be an integer in \[0, 2\*\*32\)"):
                apply_overrides(cfg, [f"{key}={seed}"])
    assert apply_overrides(PRESETS["smoke"], [f"seed={2**32 - 1}"]).seed == 2**32 - 1


def test_meta_train_flags_and_overrides_are_one_set(cli, tmp_path):
    """`--seed 1 --set seed=2` took 2 silently (the flag was applied first, then the override)."""
    from tests.conftest import one_error_line

    line = one_error_line(cli("meta_train", "--preset", "smoke", "--seed", "1", "--set", "seed=2", "--output",
                              tmp_path / "mt"))
    assert "override seed given twice" in line and not (tmp_path / "mt").exists()
    line = one_error_line(cli("meta_train", "--preset", "smoke", "--num-outer", "3", "--set", "num_outer=4",
                              "--output", tmp_path / "mt"))
    assert "override num_outer given twice" in line and not (tmp_path / "mt").exists()
