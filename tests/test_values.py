"""Values by meaning (issue 40, class 3): every sampler's hyperparameters go through one validation path
(l2e.checks), seeds stay in the range the PRNG keeps distinct, an override key is given once, every limit is checked
on the whole configuration after all overrides and before anything runs, and the report records what ran."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
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
REQUIRED = {"learning_rate": 0.1, "num_steps": 100}
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
