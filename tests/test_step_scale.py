"""StepScale-L2E (l2e.step_scale), the learned sampler added through the learned-sampler registry alone (its module and
one line of l2e.learned.MODULES): SGHMC whose global step scale s and friction multiplier c are set at the freeze.

- φ with a zero output layer (start "sghmc") is SGHMC: the same states as `l2e.sghmc` bit for bit, through the freeze;
- after the freeze with a random φ the window update is SGHMC with (s·ε, c·C), s and c fixed;
- every layer finds it through the registry: a checkpoint of its kind loads as a drop-in step, meta_train has its
  config group and trains it, and the evaluation's `--sampler` method runs it with its kind's lr grid;
- on the sampler card's 10-D and 100-D Gaussians, with φ far from SGHMC (s = 0.5, c = 3), its median variance ratio
  and mean error lie inside the 3-seed band ± 0.03 of SGHMC at (s·ε, c·C) (slow).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import learned
from l2e import step_scale as S
from l2e.checkpoint import save_checkpoint


def _quadratic_posterior(d=6, n=100):
    def nll(params, batch):
        x = params["w"]
        return 0.5 * jnp.sum((x - batch) ** 2 * jnp.arange(1, d + 1)) / n

    return l2e.Posterior(nll, lambda p: jnp.zeros(()), n)


def _far_params(key=1):
    """Random φ with its output layer × 3: s and c far from 1."""
    phi = S.init_meta_params(jax.random.PRNGKey(key), (8,), "random")
    last = sorted(phi)[-1]
    return {**phi, last: jax.tree.map(lambda x: 3.0 * x, phi[last])}


def test_sghmc_start_is_sghmc_bit_for_bit():
    post = _quadratic_posterior()
    phi = S.init_meta_params(jax.random.PRNGKey(0), (8,), "sghmc")
    a = S.step_scale(post, phi, S.StepScaleConfig(learning_rate=0.3, friction=2.0, freeze_step=5))
    b = l2e.sghmc(post, 0.3, 2.0)
    sa, sb = a.init({"w": jnp.ones(6)}), b.init({"w": jnp.ones(6)})
    step_a, step_b = jax.jit(a.step), jax.jit(b.step)
    for t in range(20):
        batch = jnp.full(6, 0.1 * t)
        sa, ia = step_a(jax.random.PRNGKey(t), sa, batch)
        sb, ib = step_b(jax.random.PRNGKey(t), sb, batch)
        np.testing.assert_array_equal(ia.kinetic, ib.kinetic)
    np.testing.assert_array_equal(sa.position["w"], sb.position["w"])
    np.testing.assert_array_equal(sa.momentum["w"], sb.momentum["w"])
    assert float(sa.scale) == 1.0 and float(sa.friction) == 1.0


def test_window_is_sghmc_with_the_frozen_constants():
    post = _quadratic_posterior()
    cfg = S.StepScaleConfig(learning_rate=0.3, friction=2.0, freeze_step=10)
    alg = S.step_scale(post, _far_params(), cfg)
    step = jax.jit(alg.step)
    state = alg.init({"w": jnp.linspace(-1, 1, 6)})
    for t in range(10):
        state, _ = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(100 + t), (6,)))
    assert float(state.scale) == 1.0  # burn-in: SGHMC; the freeze is the next update
    frozen = None
    for t in range(10, 15):
        new, info = step(jax.random.PRNGKey(t), state, jnp.zeros(6))
        s, c = float(new.scale), float(new.friction)
        if frozen is None:
            frozen = (s, c)
            assert abs(np.log(s)) > 0.1 or abs(np.log(c)) > 0.1, frozen  # far from SGHMC
        assert (s, c) == frozen
        eps = float(np.sqrt(cfg.learning_rate / post.data_size)) * s
        # the window update: θ' − θ = ε'·r' (float32: |θ| ≤ 2, a few roundings → relative 1e-5 with margin)
        np.testing.assert_allclose(new.position["w"] - state.position["w"], eps * new.momentum["w"], rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(info.kinetic, np.sum(np.square(new.momentum["w"])), rtol=1e-5)
        state = new


def test_registry_row_and_checkpoint_round_trip(tmp_path):
    entry = learned.get("step_scale")
    assert entry.config is S.StepScaleConfig and entry.factory is S.step_scale and entry.shipped == ()
    assert l2e.step_scale.init is S.init and l2e.StepScaleConfig is S.StepScaleConfig  # the top level reads the registry
    assert "step_scale" in l2e.__all__ and "StepScaleConfig" in l2e.__all__
    assert entry.sampling_config(S.StepScaleConfig(), 250).freeze_step == 250
    phi = _far_params()
    cfg = S.StepScaleConfig(learning_rate=0.05, friction=3.0)
    save_checkpoint(tmp_path / "checkpoints", 1, {"count": jnp.zeros(())}, phi,
                    {"iteration": 1, "sampler_kind": "step_scale", "sampler": dataclasses.asdict(cfg)})
    params, loaded, _ = l2e.load_meta_params(tmp_path)
    assert loaded == cfg
    sampler = l2e.load_sampler(tmp_path, posterior=_quadratic_posterior())
    state = sampler.init({"w": jnp.ones(6)})
    for t in range(5):
        state, info = sampler.step(jax.random.PRNGKey(t), state, jnp.zeros(6))
    assert isinstance(state, S.StepScaleState) and bool(info.is_finite)


def test_meta_train_and_evaluation_run_it(tmp_path):
    from evaluate.config import apply_overrides as eval_overrides, get_preset
    from evaluate.run import evaluate
    from meta_train import PRESETS, apply_overrides, meta_train

    cfg = apply_overrides(PRESETS["smoke"], ["sampler_kind=step_scale", "num_outer=2", "checkpoint_every=2",
                                             "hidden=8", "step_scale.learning_rate=0.05", "step_scale.friction=3"])
    assert cfg.sampler_config.freeze_step == cfg.inner.num_steps - cfg.inner.num_samples * cfg.inner.thinning
    out = meta_train(cfg, tmp_path / "mt", progress=False)
    assert out["iterations"] == 2 and np.isfinite(out["final_meta_loss"])
    params, config, meta = l2e.load_meta_params(tmp_path / "mt")
    assert meta["sampler_kind"] == "step_scale" and isinstance(config, S.StepScaleConfig)
    ecfg = eval_overrides(get_preset("smoke"), ["methods=l2e", "num_samples=2", "num_steps=20", "thinning=5",
                                                "tune=false"])
    sampler = {"meta_params": params, "sampler": config, "path": str(tmp_path / "mt"), "meta": meta}
    report = evaluate(ecfg, None, progress=False, sampler=sampler)
    for entry in report["tasks"].values():
        run = entry["methods"]["l2e"]
        assert run["divergent_chains"] == 0 and np.isfinite(run["nll"])
        assert run["hyperparameters"]["sampler"]["freeze_step"] == 20 - 2 * 5  # the window (K = 2 draws, 5 apart) starts at update 10


CARD_SLACK = 0.03
"""Allowed distance of a correct sampler's median variance ratio from SGHMC's 3-seed band (seed noise: the band itself
spans 0.01–0.03 at these chain lengths; the same slack as tests/test_mass.py)."""


def _constant_params(scale: float, friction: float):
    """φ whose output is the same for every feature row: s = scale, c = friction (zero kernels, output bias set)."""
    phi = S.init_meta_params(jax.random.PRNGKey(0), (8,), "sghmc")
    last = sorted(phi)[-1]
    bias = S.LOG_BOUND * np.arctanh(np.log([scale, friction]) / S.LOG_BOUND)
    return {**phi, last: {"kernel": phi[last]["kernel"], "bias": jnp.asarray(bias, jnp.float32)}}


@pytest.mark.slow
def test_frozen_constants_sample_like_sghmc_at_those_constants():
    """With φ giving s = 0.5, c = 3 (far from SGHMC's 1, 1), the chain's median variance ratio lies inside the 3-seed
    band of SGHMC run at (s·ε, c·C), ± CARD_SLACK, and its mean error (in σ) is at most SGHMC's largest there + CARD_SLACK
    (at ε/2 the 100-D target's widest coordinates mix slowly: SGHMC's own mean error is 0.14–0.18 over 5 seeds): after
    the freeze it is that SGHMC."""
    from evaluate import card

    cfg = card.CardConfig(num_steps=20_000, burn_in=4_000)
    s, c = 0.5, 3.0
    phi = _constant_params(s, c)

    def builder(post, eps, friction, smin, steps):
        config = S.StepScaleConfig(learning_rate=float(eps**2 * post.data_size), friction=float(friction),
                                   freeze_step=cfg.burn_in)
        return S.step_scale(post, phi, config), lambda state: jnp.ones(())

    def sghmc(post, eps, friction, smin, steps):  # SGHMC at the window's constants
        return l2e.sghmc(post, float((s * eps) ** 2 * post.data_size), c * friction), lambda state: jnp.ones(())

    for target in (card.gaussian_target("gaussian-10d", np.ones(10)),
                   card.gaussian_target("gaussian-100d-aniso", np.logspace(-1, 1, 100))):
        rows = [card.run_sampler("sghmc", sghmc, target, cfg, seed) for seed in range(3)]
        band = [row["var_ratio_median"] for row in rows]
        r = card.run_sampler("step_scale", builder, target, cfg, 0)
        assert r["diverged_chains"] == 0
        assert min(band) - CARD_SLACK <= r["var_ratio_median"] <= max(band) + CARD_SLACK, (target.name, r, band)
        assert r["mean_error"] <= max(row["mean_error"] for row in rows) + CARD_SLACK, (target.name, r, rows)
