"""The drop-in default (issue 40, class 4): `l2e.load_sampler(posterior=…, freeze_step=…)` is the tuning-free
Transient-L2E, its Info carries the kinetic temperature of every update and whether the update is in the sampling
window, and `l2e.check_temperature(infos)` says — with a TemperatureWarning — when a chain runs far from its target
temperature, as Mass-L2E at its checkpoint's learning rate does on a logistic regression of N = 20,000."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e.diagnostics import TEMPERATURE_TOLERANCE

# ----------------------------------------------------------------------------- the default


def test_the_default_is_the_shipped_tuning_free_sampler():
    params, config, meta = l2e.load_meta_params()
    want, want_config, _ = l2e.load_meta_params("transient")
    assert meta["sampler_kind"] == l2e.learned.DEFAULT_SHIPPED == "transient" and config == want_config
    np.testing.assert_array_equal(jax.flatten_util.ravel_pytree(params)[0], jax.flatten_util.ravel_pytree(want)[0])
    entry = l2e.learned.REGISTRY[meta["sampler_kind"]]
    assert entry.protocol.tuning_free  # no learning rate to be wrong at a new N
    tuning_free = [name for name, (e, _) in l2e.learned.shipped().items() if e.protocol.tuning_free]
    assert tuning_free == ["transient"]  # the only shipped one: the default is it
    with pytest.raises(ValueError, match="learning_rate"):  # a drop-in user cannot set a learning rate it has not
        l2e.load_sampler(posterior=_gaussian(4), learning_rate=0.1)


def _gaussian(d: int, n: int = 1000):
    """A standard Gaussian target of d coordinates as a posterior of n data (exact gradients: the minibatch is
    ignored)."""
    return l2e.Posterior(lambda p, b: 0.5 * jnp.sum(p ** 2) / n, lambda p: 0.0 * jnp.sum(p), n)


def _chain(sampler, position, batches, seed: int = 0):
    """README's drop-in loop as one scan: (final state, stacked infos) over the given minibatches."""
    def body(state, xs):
        key, batch = xs
        return sampler.step(key, state, batch)

    keys = jax.random.split(jax.random.PRNGKey(seed), jax.tree.leaves(batches)[0].shape[0])
    return jax.jit(lambda s: jax.lax.scan(body, s, (keys, batches)))(sampler.init(position))


def test_the_drop_in_info_carries_t_kin_and_the_window():
    """Info.sampling marks the updates from freeze_step on and Info.t_kin is Σ(1 − εγᵢ/2)·r'ᵢ²·M⁻¹ᵢ / d (0 in the
    burn-in, where Transient-L2E has no momentum; at most the raw kinetic / d); on a 20-D Gaussian the window's T_kin
    is near 1 and the check passes silently."""
    d, steps, freeze = 20, 600, 300
    sampler = l2e.load_sampler(posterior=_gaussian(d), freeze_step=freeze)
    state, infos = _chain(sampler, jnp.full(d, 2.0), jnp.zeros((steps, 1)))
    sampling, t_kin, raw = np.asarray(infos.sampling), np.asarray(infos.t_kin), np.asarray(infos.kinetic) / d
    assert sampling.dtype == bool and not sampling[:freeze].any() and sampling[freeze:].all()
    assert np.all(t_kin[:freeze] == 0.0) and np.all(t_kin[freeze:] <= raw[freeze:] * (1 + 1e-6))
    damping = float(state.eps) * np.asarray(state.friction)
    last = np.sum((1.0 - damping / 2.0) * np.asarray(state.momentum) ** 2 * np.asarray(state.inv_mass)) / d
    np.testing.assert_allclose(t_kin[-1], last, rtol=1e-5)  # float32 sums in either order
    with warnings.catch_warnings():
        warnings.simplefilter("error", l2e.TemperatureWarning)
        check = l2e.check_temperature(infos)
    assert check.ok and check.updates == steps - freeze and abs(check.t_kin - 1.0) < TEMPERATURE_TOLERANCE
    assert check.message == ""
    listed = [jax.tree.map(lambda x: x[t], infos) for t in range(steps)]  # the README loop's list of infos
    assert l2e.check_temperature(listed, warn=False) == check


# ----------------------------------------------------------------------------- a hot drop-in chain says so

N, D = 20_000, 20


def _logistic():
    """The issue's probe: a logistic regression of N = 20,000 with 20 features and a bias, prior N(0, 1)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(x @ (0.5 * rng.normal(size=D)) + 0.3)))).astype(np.float32)

    def nll(p, batch):
        xb, yb = batch
        z = xb @ p[:D] + p[D]
        return jnp.mean(jnp.logaddexp(0.0, z) - yb * z)

    return l2e.Posterior(nll, lambda p: -0.5 * jnp.sum(p ** 2), N), jnp.asarray(x), jnp.asarray(y)


def _drop_in(name, batch: int, steps: int):
    post, x, y = _logistic()
    idx = jax.random.randint(jax.random.PRNGKey(7), (steps, batch), 0, N)
    sampler = l2e.load_sampler(name, posterior=post, freeze_step=steps // 2)
    return _chain(sampler, jnp.zeros(D + 1), (x[idx], y[idx]))[1]


@pytest.fixture(scope="module")
def logistic_infos():
    return {"mass": _drop_in("mass", 64, 1000), "default": _drop_in(None, 64, 1000),
            "default, batch 1024": _drop_in(None, 1024, 2000)}


def test_a_hot_drop_in_chain_warns(logistic_infos):
    """README's drop-in (batch 64, 1,000 updates, freeze at 500) with Mass-L2E at its checkpoint's learning rate
    runs at T_kin 135 here (measured, the same at XLA's default and SSE4_2 levels; 80–85 with README's per-step
    minibatch keys, its draws 8–9 × the Laplace posterior's standard deviation) and says so; the warning names the
    remedy."""
    with pytest.warns(l2e.TemperatureWarning, match=r"the chain runs hot: T_kin = .* × its target T = 1, over 500 "
                                                    r"updates .* lower the step size"):
        check = l2e.check_temperature(logistic_infos["mass"])
    assert not check.ok and check.t_kin > 10.0 and check.updates == 500


def test_the_default_on_the_same_posterior(logistic_infos):
    """The tuning-free default on the same posterior runs at T_kin 1.03 ± 0.02 at batch 64 and 0.98 ± 0.01 at batch
    1,024 (measured, the same at XLA's default and SSE4_2 levels): no warning. Its raw kinetic / d reads 1.47 at batch
    64 — its window raises εγᵢ to absorb the minibatch noise, and the friction's Euler step holds the momentum at
    T/(1 − εγᵢ/2) (docs/sampling.md) — which is why t_kin divides that out."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", l2e.TemperatureWarning)
        checks = [l2e.check_temperature(logistic_infos[k]) for k in ("default", "default, batch 1024")]
    assert all(c.ok and abs(c.t_kin - 1.0) < TEMPERATURE_TOLERANCE for c in checks)
    info = logistic_infos["default"]
    raw = np.asarray(info.kinetic)[np.asarray(info.sampling)].mean() / (D + 1)
    assert raw > 1.0 + TEMPERATURE_TOLERANCE  # what the check would have warned about without the correction


# ----------------------------------------------------------------------------- the check itself


def _infos(t_kin, sampling=None):
    t = np.asarray(t_kin, np.float32)
    window = np.ones(t.shape, bool) if sampling is None else np.asarray(sampling)
    return l2e.transient.TransientInfo(np.zeros(t.shape), np.ones(t.shape, bool), t * 7, t, window)


def test_check_temperature_reads_only_the_window_and_says_what_is_wrong():
    rng = np.random.default_rng(0)
    at_one = 1.0 + 0.05 * rng.normal(size=400)
    burn_in = np.r_[np.full(100, 50.0), at_one]  # a hot burn-in is not the window: not read
    check = l2e.check_temperature(_infos(burn_in, np.r_[np.zeros(100, bool), np.ones(400, bool)]))
    assert check.ok and check.updates == 400 and abs(check.t_kin - 1.0) < 0.01
    with pytest.warns(l2e.TemperatureWarning, match=r"runs cold: T_kin = 0\.29.* longer burn-in"):
        assert not l2e.check_temperature(_infos(0.3 * at_one)).ok
    with pytest.warns(l2e.TemperatureWarning, match="diverged"):
        assert not l2e.check_temperature(_infos(np.r_[at_one, np.inf])).ok
    assert l2e.check_temperature(_infos(2.0 * at_one), target=2.0).ok  # relative to the target T
    assert l2e.check_temperature(_infos(1.4 * at_one), tolerance=0.5).ok
    noisy = 1.2 + 2.0 * rng.normal(size=40)  # outside the band but within three standard errors: not far
    assert l2e.check_temperature(_infos(noisy), warn=False).se > 0.1
    with pytest.raises(ValueError, match="no update of the sampling window"):
        l2e.check_temperature(_infos(at_one, np.zeros(400, bool)))


def test_check_temperature_takes_any_momentum_sampler_with_d():
    """Infos without t_kin (SGHMC's) are read as kinetic / num_params, every update being in the window; stacked
    chains (a leading axis) are pooled."""
    info = l2e.sghmc.SGHMCInfo(*(np.zeros((2, 50)) for _ in l2e.sghmc.SGHMCInfo._fields))._replace(
        kinetic=np.full((2, 50), 30.0))
    check = l2e.check_temperature(info, num_params=10, warn=False)
    assert check.t_kin == pytest.approx(3.0) and check.updates == 100 and not check.ok
    with pytest.raises(ValueError, match="num_params"):
        l2e.check_temperature(info)
