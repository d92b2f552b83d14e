"""The analytic benchmark (evaluate.card.analytic): exact reference moments, the metrics on samplers of known
bias, configuration checks and a tiny end-to-end run (markdown, PNG)."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evaluate.card.analytic import (TARGETS, AnalyticConfig, analytic_markdown, plot_analytic, run_analytic,
                                    smile_builders)
from base.io import ConfigError
from l2e.types import SamplingAlgorithm

from conftest import ROOT, run_cli


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_reference_moments_match_exact_draws(name):
    """Mean, variance and E[x²] of 400,000 exact draws agree with the stated moments (within 5 standard errors of
    the Monte Carlo estimate); Var[x²] too except the funnel's x_i (too heavy-tailed to estimate)."""
    t = TARGETS[name]()
    x = np.asarray(t.sample(jax.random.PRNGKey(0), 400_000), np.float64)
    n = x.shape[0]
    assert np.all(np.abs(x.mean(0) - t.mean) < 5 * np.sqrt(t.var / n) + 1e-3)
    assert np.all(np.abs((x**2).mean(0) - t.m2) < 5 * np.sqrt(t.m2_var / n) + 1e-3)
    assert np.all(np.abs(x.var(0) / t.var - 1) < 0.05) or name == "funnel"
    sl = slice(0, 1) if name == "funnel" else slice(None)
    assert np.all(np.abs((x[:, sl] ** 2).var(0) / t.m2_var[sl] - 1) < 0.1)
    g = jax.vmap(jax.grad(t.energy))(jnp.asarray(x[:20_000], jnp.float32))
    virial = np.mean(np.sum(np.asarray(g) * x[:20_000], 1)) / 10  # T_conf of exact draws
    assert abs(virial - 1) < 0.05, virial


@pytest.mark.slow
def test_noise_laws_are_standardised():
    """Each of the four laws of the noise vector b has mean 0 and variance 1 (200,000 draws × 10 coordinates:
    |mean| < 0.01, variance within 5 %); Laplace and Student-t are heavier-tailed than the Gaussian (kurtosis)."""
    from evaluate.card.analytic import _base_noise

    cfg = AnalyticConfig()
    keys = jax.random.split(jax.random.PRNGKey(0), 200_000)
    kurt = []
    for law in range(4):
        b = np.asarray(jax.jit(jax.vmap(lambda k, law=law: _base_noise(k, law, cfg)))(keys), np.float64).ravel()
        assert abs(b.mean()) < 0.01 and abs(b.var() - 1) < 0.05, (law, b.mean(), b.var())
        kurt.append(np.mean(b**4))
    assert abs(kurt[0] - 3) < 0.1 and kurt[1] > 5 and kurt[2] > 5, kurt


class ExactState(NamedTuple):
    position: dict


class ExactInfo(NamedTuple):
    loss: jax.Array
    is_finite: jax.Array


def _exact(target_name: str, scale: float):
    """A 'sampler' that ignores the gradients and draws x = √scale · (exact draw) every step."""
    sample = TARGETS[target_name]().sample

    def builder(post, eps, c, smin, steps):
        def step(key, state, minibatch):
            x = jnp.sqrt(scale) * sample(key, 1)[0]
            return ExactState({"x": x}), ExactInfo(jnp.zeros(()), jnp.ones((), bool))

        return SamplingAlgorithm(ExactState, step), lambda s: jnp.ones(())

    return builder


TINY = AnalyticConfig(num_steps=400, burn_in=100, thinning=2, seeds=2, points=2, targets=("gaussian",),
                      noises=("isotropic", "position", "lognormal"))


def test_metrics_separate_an_exact_sampler_from_an_inflated_one():
    """On the Gaussian target, exact draws give SMILE error < 0.1, variance ratio and T_conf within 0.2 of 1;
    draws with twice the variance give variance ratio within 0.3 of 2 and SMILE error > 0.3 (½ in expectation:
    (2E − E)²/(2E²))."""
    cfg = dataclasses.replace(TINY, num_steps=4_000, burn_in=0, thinning=1, noises=("isotropic",))
    res = run_analytic(cfg, {"exact": _exact("gaussian", 1.0), "wide": _exact("gaussian", 2.0)})
    best = {r["sampler"]: r for r in res["best"]}
    assert best["exact"]["metric"] < 0.1 and abs(best["exact"]["var_ratio"] - 1) < 0.2, best["exact"]
    assert abs(best["exact"]["t_conf"] - 1) < 0.2 and best["exact"]["t_kin"] is None, best["exact"]
    assert abs(best["wide"]["var_ratio"] - 2) < 0.3 and best["wide"]["metric"] > 0.3, best["wide"]


def test_config_checks():
    for bad in (dict(num_steps=0), dict(burn_in=400), dict(targets=("banana",)), dict(noises=()),
                dict(student_df=2.0), dict(noises=("isotropic", "isotropic"))):
        with pytest.raises(ConfigError):
            dataclasses.replace(TINY, **bad).check()


@pytest.mark.slow
def test_end_to_end_tiny_budget(tmp_path):
    """Hand-designed, SMILE-family and a learned sampler (whose card builder needs a concrete step size: the
    per-step fallback) run the tiny benchmark; every (sampler, noise, step) has a row, every (sampler, noise) a
    best row; markdown and PNG are written."""
    import l2e
    from evaluate.card import hand_designed, learned_builder

    params, config, _ = l2e.load_meta_params("paper-form")
    samplers = {"sghmc": hand_designed()["sghmc"], **smile_builders(), "l2e (shipped)": learned_builder(params,
                                                                                                         config)}
    res = run_analytic(TINY, samplers, progress=lambda line: None)
    assert len(res["rows"]) == len(samplers) * 3 * 2 and len(res["best"]) == len(samplers) * 3
    assert {r["sampler"] for r in res["best"]} == set(samplers)
    smile_rows = [r for r in res["rows"] if r["sampler"] == "smile" and r["diverged"] == 0]
    assert smile_rows and all(r["final_step_size"] is not None and r["t_kin"] is None for r in smile_rows)
    assert all(r["t_kin"] is not None for r in res["rows"] if r["sampler"] == "sghmc" and r["diverged"] == 0)
    text = analytic_markdown(res)
    assert "**gaussian**" in text and "| l2e (shipped) |" in text and "lognormal" in text
    plot_analytic(res, tmp_path / "analytic.png")
    assert (tmp_path / "analytic.png").stat().st_size > 10_000


def test_cli_bad_analytic_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    """`python -m evaluate card --analytic ...` (run in this process) with bad settings: exit status 2, exactly one
    stderr line `error: ...`, no output directory."""
    for args in (["--analytic", "--set", "seeds=0"], ["--analytic", "--set", "noises=isotropic,none"],
                 ["--analytic", "huge"]):
        out = tmp_path / "out"
        proc = run_cli("evaluate", "card", "--output", out, *args, cwd=ROOT)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert not out.exists()


def _exact_ensemble(target_name: str, scale: float, seen: list):
    """An ensemble 'sampler' (`ensemble = True`): every chain of its state draws x = √scale · (exact draw) each step;
    `seen` records the shapes of the state and minibatches it is given, and the steps it is built for."""
    sample = TARGETS[target_name]().sample

    def builder(post, eps, c, smin, steps):
        seen.append(("steps", steps))

        def init(position):
            seen.append(position["x"].shape)
            return ExactState(position)

        def step(key, state, minibatch):
            seen.append(minibatch.shape)
            x = jnp.sqrt(scale) * sample(key, state.position["x"].shape[0])
            return ExactState({"x": x}), ExactInfo(jnp.zeros(()), jnp.ones((), bool))

        return SamplingAlgorithm(init, step), lambda s: jnp.ones(())

    builder.ensemble = True
    return builder


def test_an_ensemble_sampler_runs_in_pooled_lanes():
    """An ensemble builder (Policy-L2E: one state for every chain) runs ENSEMBLE_CHAINS chains per lane, each with
    its own noise draw, pooled: exact draws give variance ratio and T_conf within 0.2 of 1 and SMILE error < 0.1,
    twice-wide draws a variance ratio within 0.3 of 2; tuning-free, so one point per noise and no step size; at
    equal gradients, each chain num_steps / ENSEMBLE_CHAINS steps, and a config that leaves a chain fewer than
    `thinning` steps is refused. The rule's Policy-L2E runs too (finite, in the markdown's tables, nothing
    "Not run")."""
    from evaluate.card.analytic import ENSEMBLE_CHAINS
    from evaluate.methods.registry import get_method

    seen = []
    cfg = dataclasses.replace(TINY, num_steps=1_000, burn_in=0, thinning=1, noises=("isotropic",))
    res = run_analytic(cfg, {"exact": _exact_ensemble("gaussian", 1.0, seen),
                             "wide": _exact_ensemble("gaussian", 2.0, []),
                             "policy": get_method("policy").card}, progress=lambda line: None)
    assert ENSEMBLE_CHAINS >= 2 and set(seen) == {(ENSEMBLE_CHAINS, 10), ("steps", 1_000 // ENSEMBLE_CHAINS)}, \
        set(seen)
    best = {r["sampler"]: r for r in res["best"]}
    assert best["exact"]["metric"] < 0.1 and abs(best["exact"]["var_ratio"] - 1) < 0.2, best["exact"]
    assert abs(best["exact"]["t_conf"] - 1) < 0.2 and abs(best["wide"]["var_ratio"] - 2) < 0.3, best
    assert all(best[n]["step_size"] is None for n in best) and res["step_sizes"]["policy"] == []
    assert best["policy"]["diverged"] == 0 and np.isfinite(best["policy"]["var_ratio"]) and best["policy"]["t_kin"]
    text = analytic_markdown(res)
    assert "| gaussian | isotropic | policy | — |" in text and "Not run" not in text
    with pytest.raises(ConfigError, match="ensemble"):
        run_analytic(dataclasses.replace(cfg, num_steps=30, thinning=10),
                     {"exact": _exact_ensemble("gaussian", 1.0, [])})
