"""Transient-L2E (l2e.transient): a learned burn-in in front of a correct Fisher-preconditioned SGHMC window.

- φ = 0 is the hand-designed counterpart: constant pSGLD burn-in at η₀, then M⁻¹ = the Fisher diagonal (shrunk),
  ε = κ₀, γε = δ₀; on N(0, diag σ²) that diagonal recovers σ² (median ratio within 15 %);
- after the freeze the constants are fixed and the update is SGHMC with mass M and friction γM: θ' − θ = ε·M⁻¹r';
- the minibatch-noise correction: strong gradient noise heats the uncorrected window, not the corrected one;
- stationarity in the window with φ far from 0 (a hot, fast burn-in schedule, a random mass correction, stronger
  friction; the window's whitened step κ₀ = 0.1, near SGHMC's, since a larger step only adds SGHMC's own O(ε) and
  gradient-noise bias, larger where M⁻¹ is large): the
  variance ratios on a 10-D anisotropic Gaussian and on the banana, and E[θ1²θ2], lie inside SGHMC's 3-seed band ±
  SLACK at SGHMC's ε, and T_kin is within 10 % of T;
- it loads through the registry (checkpoint round trip, l2e.transient at the top level) with no learning rate;
- the ablations are configurations that ignore part of φ: burn_in "constant" + constants "fisher" with φ far from 0
  is the φ = 0 chain (float32 roundings); "warm" injects no noise before the adaptation window (two keys, one
  position) and noise inside it; "rmsprop" freezes M⁻¹ with the RMSprop preconditioner's shape (log M⁻¹ minus
  log 1/(λ + √v) constant across coordinates) at the Fisher diagonal's geometric mean; the window with "warm" and
  "rmsprop" samples the 10-D Gaussian inside SGHMC's band (slow); unknown options are refused;
- subtract_noise: under strong gradient noise (3 × the default) the Fisher diagonal without it is shrunk (median
  M⁻¹/σ² < 0.8) and with it recovers σ² (median within 15 %, median |log ratio| < 0.15).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import transient as T
from l2e.checkpoint import save_checkpoint

N, D = 100, 10
SD = np.geomspace(0.3, 3.0, D)


def gaussian_posterior(noise=0.3):
    return l2e.Posterior(lambda th, b: (0.5 * jnp.sum(th**2 / SD**2) + noise * jnp.dot(jnp.mean(b, 0), th)) / N,
                         lambda th: jnp.zeros(()), N)


def banana_posterior(noise=0.3):
    def nll(th, b):
        lp = -0.5 * th[0] ** 2 - 0.5 * (th[1] - th[0] ** 2 + 1.0) ** 2 / 0.25
        return (-lp + noise * jnp.dot(jnp.mean(b, 0), th)) / N
    return l2e.Posterior(nll, lambda th: jnp.zeros(()), N)


def far_params():
    """φ far from 0: a hot (T_b up to e²·T early), fast burn-in schedule, a larger window step, a random mass MLP."""
    phi = T.init_meta_params(jax.random.PRNGKey(3), (8,), "random")
    return {**phi, "schedule": {"eta": jnp.asarray([2.0, 1.0, 0.0, -1.0]), "temp": jnp.asarray([2.0, 1.0, 0.5, 0.0])},
            "window": {"kappa": jnp.asarray(0.3), "damping": jnp.asarray(0.5)}}


def run(alg, dim, steps=8000, burn=2000, chains=32, start=2.0, seed=0):
    def chain(key):
        def body(st, k):
            kb, ks = jax.random.split(k)
            st, info = alg.step(ks, st, jax.random.normal(kb, (8, dim)))
            return st, (st.position, info.kinetic)

        st, (xs, kin) = jax.lax.scan(body, alg.init(jnp.full(dim, start)), jax.random.split(key, steps))
        return st, xs[burn:], kin[burn:]

    st, xs, kin = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(seed), chains))
    return st, np.asarray(xs, np.float64).reshape(-1, dim), float(np.mean(kin)) / dim


def test_zero_phi_recovers_the_fisher_diagonal():
    alg = T.transient(gaussian_posterior(), T.init_meta_params(jax.random.PRNGKey(0)),
                      T.TransientConfig(freeze_step=3000, base_step=1e-2))
    st, _, _ = run(alg, D, steps=3001, burn=3000, chains=4)
    ratio = np.asarray(st.inv_mass)[0] / SD**2
    assert abs(np.median(ratio) - 1) < 0.15, ratio
    assert np.allclose(np.asarray(st.eps), 0.3) and np.allclose(np.asarray(st.eps * st.gamma), 0.1)


def test_window_is_mass_sghmc_with_frozen_constants():
    post = gaussian_posterior()
    alg = T.transient(post, far_params(), T.TransientConfig(freeze_step=50, base_step=1e-2))
    step = jax.jit(alg.step)
    state = alg.init(jnp.ones(D))
    for t in range(50):
        state, info = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(500 + t), (8, D)))
        assert float(info.kinetic) == 0.0
    frozen = None
    for t in range(50, 56):
        new, info = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(500 + t), (8, D)))
        consts = (np.asarray(new.inv_mass), float(new.eps), float(new.gamma))
        if frozen is None:
            frozen = consts
        assert np.array_equal(consts[0], frozen[0]) and consts[1:] == frozen[1:]
        np.testing.assert_allclose(new.position - state.position, new.eps * new.inv_mass * new.momentum, rtol=1e-4,
                                   atol=1e-7)  # float32: a few roundings of 6e-8 relative
        np.testing.assert_allclose(info.kinetic, np.sum(new.momentum**2 * new.inv_mass), rtol=1e-5)
        state = new


SLACK = 0.08
"""Distance allowed from SGHMC's 3-seed band (seed noise and the splittings' O(ε) bias), as tests/test_rivals.py."""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gauss", "banana"])
def test_window_samples_inside_sghmc_band(target):
    post, dim = (gaussian_posterior(), D) if target == "gauss" else (banana_posterior(), 2)
    var = SD**2 if target == "gauss" else np.array([1.0, 2.25])
    cfg = T.TransientConfig(freeze_step=2000, base_step=1e-2, base_kappa=0.1)
    phi = {**far_params(), "window": {"kappa": jnp.asarray(0.0), "damping": jnp.asarray(0.5)}}
    _, xs, t_kin = run(T.transient(post, phi, cfg), dim)
    band = [run(l2e.sghmc(post, 0.5, 3.0), dim, seed=s)[1] for s in range(3)]
    ratios = np.stack([b.var(0) / var for b in band])
    got = xs.var(0) / var
    assert np.all(got >= ratios.min(0) - SLACK) and np.all(got <= ratios.max(0) + SLACK), (got, ratios)
    assert abs(t_kin - 1.0) < 0.1, t_kin
    if target == "banana":
        e = [np.mean(b[:, 0] ** 2 * b[:, 1]) for b in band]
        assert min(e) - 2 * SLACK <= np.mean(xs[:, 0] ** 2 * xs[:, 1]) <= max(e) + 2 * SLACK


def test_registry_checkpoint_and_no_learning_rate(tmp_path):
    entry = l2e.learned.get("transient")
    assert entry.lrs == (1.0,) and l2e.transient.init is T.init and "learning_rate" not in {
        f.name for f in dataclasses.fields(T.TransientConfig)}
    phi = far_params()
    save_checkpoint(tmp_path / "checkpoints", 1, {"count": jnp.zeros(())}, phi,
                    {"iteration": 1, "sampler_kind": "transient", "sampler": dataclasses.asdict(T.TransientConfig())})
    sampler = l2e.load_sampler(tmp_path, posterior=gaussian_posterior(), freeze_step=5)
    state = sampler.init(jnp.ones(D))
    for t in range(8):
        state, info = sampler.step(jax.random.PRNGKey(t), state, jnp.zeros((8, D)))
    assert bool(info.is_finite) and float(state.eps) > 0
    with pytest.raises(Exception, match="schedule"):
        l2e.checkpoint.check_kind_params(entry, {**phi, "schedule": {"eta": np.zeros(3)}}, "ckpt")


def test_shipped_checkpoint_loads_as_a_drop_in_step():
    """The shipped "transient" checkpoint: the preset's 200 iterations, kind transient, its PROVENANCE, and a step
    through the freeze on a 5-D Gaussian (finite, the window's constants set)."""
    from l2e.checkpoint import shipped_checkpoint

    phi, config, meta = l2e.load_meta_params("transient")
    assert meta["iteration"] == meta["config"]["num_outer"] == 200 and meta["sampler_kind"] == "transient"
    assert (shipped_checkpoint("transient") / "PROVENANCE.md").is_file()
    post = l2e.Posterior(lambda p, b: 0.5 * jnp.sum((p - b) ** 2), lambda p: 0.0 * p.sum(), 100)
    sampler = l2e.load_sampler("transient", posterior=post, freeze_step=4)
    state = sampler.init(jnp.ones(5))
    for t in range(8):
        state, info = sampler.step(jax.random.PRNGKey(t), state, jnp.zeros((8, 5)))
    assert bool(info.is_finite) and np.all(np.isfinite(np.asarray(state.position))) and float(state.eps) > 0


@pytest.mark.slow
def test_gradient_noise_correction_keeps_the_window_at_temperature():
    """Strong minibatch noise (gradient-noise variance 9/8 per coordinate, up to 100× the curvature 1/σ²) at φ = 0:
    without the correction (noise_halves=False) the preconditioned window runs hot (measured T_kin 1.42, variance
    ratios up to 1.68); with it T_kin is within 10 % of T and every variance ratio within 0.1 of 1 (measured 1.07,
    1.00–1.04)."""
    phi = T.init_meta_params(jax.random.PRNGKey(0))
    got = {}
    for halves in (False, True):
        cfg = T.TransientConfig(freeze_step=2000, base_step=1e-2, noise_halves=halves)
        _, xs, t_kin = run(T.transient(gaussian_posterior(3.0), phi, cfg), D)
        got[halves] = (t_kin, xs.var(0) / SD**2)
    assert got[False][0] > 1.25 and got[False][1].max() > 1.3, got[False]
    assert abs(got[True][0] - 1) < 0.1 and np.all(np.abs(got[True][1] - 1) < 0.1), got[True]


@pytest.mark.parametrize("kind", ["transient", "step_scale"])
def test_freeze_on_a_data_set_larger_than_int32_squares(kind):
    """N = 60,000 (MNIST's size): N² overflows int32. The freeze statistics divide by N² (and StepScale's by N²·d) in
    floating point, so both samplers step through their freeze (bench.step_cost once failed here with an
    OverflowError on the mlp family)."""
    post = l2e.Posterior(lambda p, b: 0.5 * jnp.sum((p - jnp.mean(b, 0)) ** 2), lambda p: 0.0 * p.sum(), 60_000)
    spec = l2e.learned.REGISTRY[kind]
    phi = spec.init_meta_params(jax.random.PRNGKey(0), (4,), "sghmc")
    sampler = spec.factory(post, phi, spec.window(spec.config(), 3))
    state = sampler.init(jnp.ones(5))
    for t in range(6):
        state, info = sampler.step(jax.random.PRNGKey(t), state, jnp.zeros((8, 5)))
    assert bool(info.is_finite) and np.all(np.isfinite(np.asarray(state.position)))



def _steps(alg, n, key=0, dim=D):
    state = alg.init(jnp.ones(dim))
    step = jax.jit(alg.step)
    for t in range(n):
        batch = jax.random.normal(jax.random.PRNGKey(500 + t), (8, dim))
        state, _ = step(jax.random.PRNGKey(1000 * key + t), state, batch)
    return state


def test_ablations_ignore_their_part_of_phi():
    post = gaussian_posterior()
    cfg = T.TransientConfig(freeze_step=40, base_step=1e-2)
    zero = _steps(T.transient(post, T.init_meta_params(jax.random.PRNGKey(0)), cfg), 60)
    abl = _steps(T.transient(post, far_params(), dataclasses.replace(cfg, burn_in="constant", constants="fisher")), 60)
    learned = _steps(T.transient(post, far_params(), cfg), 60)
    np.testing.assert_allclose(abl.position, zero.position, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(abl.inv_mass, zero.inv_mass, rtol=1e-5)
    assert float(abl.eps) == pytest.approx(float(zero.eps), rel=1e-6)
    assert not np.allclose(learned.position, zero.position, rtol=1e-3)  # φ matters where the ablation ignores it
    with pytest.raises(ValueError, match="burn_in must be one of learned, constant, warm"):
        T.TransientConfig(burn_in="sgd")
    with pytest.raises(ValueError, match="constants must be one of"):
        T.TransientConfig(constants="adam")


def test_warm_burn_in_descends_then_samples_and_rmsprop_takes_its_shape():
    post = gaussian_posterior()
    cfg = T.TransientConfig(freeze_step=40, base_step=1e-2, burn_in="warm", constants="rmsprop")  # adapt from 20
    alg = T.transient(post, T.init_meta_params(jax.random.PRNGKey(0)), cfg)
    a, b = _steps(alg, 20, key=1), _steps(alg, 20, key=2)
    np.testing.assert_array_equal(a.position, b.position)  # T = 0 before the adaptation window: no noise
    a, b = _steps(alg, 21, key=1), _steps(alg, 21, key=2)
    assert not np.allclose(a.position, b.position)  # T inside it
    frozen = _steps(alg, 41)
    log_shape = np.log(np.asarray(frozen.inv_mass)) + np.log(cfg.rms_eps + np.sqrt(np.asarray(frozen.sq)))
    assert np.ptp(log_shape) < 1e-4  # M⁻¹ ∝ 1 / (λ + √v)
    fisher = _steps(T.transient(post, T.init_meta_params(jax.random.PRNGKey(0)),
                                dataclasses.replace(cfg, constants="fisher")), 41)
    assert np.mean(np.log(frozen.inv_mass)) == pytest.approx(np.mean(np.log(fisher.inv_mass)), abs=1e-4)


@pytest.mark.slow
def test_warm_rmsprop_window_samples_inside_sghmc_band():
    post = gaussian_posterior()
    cfg = T.TransientConfig(freeze_step=2000, base_step=1e-2, base_kappa=0.1, burn_in="warm", constants="rmsprop")
    _, xs, t_kin = run(T.transient(post, T.init_meta_params(jax.random.PRNGKey(0)), cfg), D)
    band = np.stack([run(l2e.sghmc(post, 0.5, 3.0), D, seed=s)[1].var(0) / SD**2 for s in range(3)])
    got = xs.var(0) / SD**2
    assert np.all(got >= band.min(0) - SLACK) and np.all(got <= band.max(0) + SLACK), (got, band)
    assert abs(t_kin - 1.0) < 0.1, t_kin


def test_evaluation_settings_select_an_ablation_and_refuse_bad_ones():
    from cli import apply_overrides
    from evaluate.config import get_preset
    from evaluate.methods.l2e import override_sampler
    from base.io import ConfigError

    cfg = apply_overrides(get_preset("references"), ["settings.l2e_transient.sampler=burn_in=warm,constants=fisher"])
    got = override_sampler(T.TransientConfig(freeze_step=7), cfg.settings.l2e_transient.sampler)
    assert (got.burn_in, got.constants, got.freeze_step) == ("warm", "fisher", 7)
    for bad, words in (("burn_in=sgd", "burn_in must be one of"), ("nope=1", "unknown config key: nope"),
                       ("learning_rate=2", "its learning rate is the method's lrs")):
        with pytest.raises(ConfigError, match=words):
            apply_overrides(get_preset("references"), [f"settings.l2e_transient.sampler={bad}"])


def test_subtracting_the_minibatch_noise_recovers_the_fisher_diagonal():
    """Strong gradient noise inflates Var ∇Ũ and shrinks sqrt(Var θ / Var ∇Ũ); subtract_noise takes V̂ off."""
    got = {}
    for sub in (False, True):
        alg = T.transient(gaussian_posterior(3.0), T.init_meta_params(jax.random.PRNGKey(0)),
                          T.TransientConfig(freeze_step=3000, base_step=1e-2, subtract_noise=sub))
        st, _, _ = run(alg, D, steps=3001, burn=3000, chains=4)
        got[sub] = np.asarray(st.inv_mass)[0] / SD**2
    assert np.median(got[False]) < 0.8  # measured 0.66
    assert abs(np.median(got[True]) - 1) < 0.15 and np.median(np.abs(np.log(got[True]))) < 0.15  # 1.03, 0.04


def test_window_fraction_sets_the_evaluated_window_and_the_freeze():
    """window_fraction (a protocol choice the checkpoint carries) puts the K states over the chain's last
    window_fraction·G and the freeze at its start, unless the evaluation fixes a thinning; the default 0.5 (and the
    shipped checkpoint's) is the protocol's last half."""
    from evaluate.methods.l2e import window_thinning
    from evaluate.run import evaluate
    from conftest import iris_mlp, tiny_eval_config

    cfg = tiny_eval_config(iris_mlp(4), ("l2e_transient",), None, thinning=None, num_steps=80, num_samples=4)
    assert window_thinning(cfg, T.TransientConfig()) == cfg.sample_thinning == 10
    assert window_thinning(cfg, T.TransientConfig(window_fraction=0.25)) == 5
    assert window_thinning(dataclasses.replace(cfg, thinning=3), T.TransientConfig(window_fraction=0.25)) is None
    with pytest.raises(ValueError, match="window_fraction"):
        T.TransientConfig(window_fraction=1.0)
    from l2e.checkpoint import load_meta_params

    assert load_meta_params("transient")[1].window_fraction == 0.5  # shipped: the protocol's last half
    for override, fraction, thinning in (((), 0.5, 10), (("window_fraction=0.75",), 0.75, 15)):
        run = tiny_eval_config(iris_mlp(4), ("l2e_transient",), {"l2e_transient": dict(lrs=(1.0,), sampler=override)},
                               thinning=None, num_steps=80, num_samples=4, tune=False)
        (task,) = evaluate(run, None, progress=False)["tasks"].values()
        hp = task["methods"]["l2e_transient"]["hyperparameters"]
        assert hp["thinning"] == thinning and hp["sampler"]["freeze_step"] == 80 - 4 * thinning
        assert hp["sampler"]["window_fraction"] == fraction
