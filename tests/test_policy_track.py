"""Policy-L2E's track_noise (l2e.policy_updates.track_gain, chain_noise): each chain's minibatch noise followed after
phase 0, its friction raised to cover it.

- by hand: the gain is the exponential average (TRACK_DECAY) of Σ v·M⁻¹ ÷ Σ V̂·M⁻¹ (exact to float32); it stays
  where V̂ is 0 or the ratio is not finite; the friction is min(max(γᵢ, NOISE_MARGIN·ε·gain·V̂ᵢ·M⁻¹ᵢ/(2T)),
  MAX_DAMPING/ε) per chain, and the noise the update corrects for gain·V̂;
- the noise growing after the freeze (the minibatch rows scaled by 2 from the freeze on: its variance × 4, the
  posterior unchanged): without the flag the window runs hot (T_kin above 1.2, a variance ratio above 1.5); with it
  every chain's gain reads the growth (3 to 5.5, the truth 4), T_kin is within 10 % of T and every coordinate's
  variance ratio within 1 ± 0.2;
- off (the default), every chain's gain stays 1 exactly;
- track_step, by hand: each chain's step s·ε, s = min(1, sqrt(MAX_DAMPING / h)), h = NOISE_MARGIN·ε²·gain·
  maxᵢ(V̂ᵢ·M⁻¹ᵢ)/(2T), and its friction capped at MAX_DAMPING/(s·ε); without track_noise a ValueError;
- noise growing past the heat cap (rows × 8: variance × 64): track_noise alone runs hot (T_kin above 1.08, a
  variance ratio above 1.5; measured 1.11 and 1.97), with track_step T_kin is within 10 % and every ratio within
  1 ± 0.2 (measured 1.01, 0.85–1.13); at rows × 2 (below the cap) track_step changes no chain (ratios to 1e-4).
The phase kernels with the flag on run the general kernel's chains (tests/test_policy.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e import policy as P
from l2e.policy_updates import TRACK_DECAY, chain_noise, track_gain
from l2e.transient import MAX_DAMPING, NOISE_MARGIN
from test_transient import D, SD, gaussian_posterior


def _state(chains=3, d=4):
    st = P.init(jnp.zeros((chains, d)))
    return st._replace(noise_var=jnp.asarray([1.0, 2.0, 0.5, 4.0]), inv_mass=jnp.asarray([1.0, 0.5, 2.0, 0.25]),
                       friction=jnp.full((d,), 1.0), eps=jnp.asarray(0.1, jnp.float32))


def test_track_gain_and_chain_noise_by_hand():
    st = _state()
    config = P.PolicyConfig(track_noise=True)
    factor = jnp.asarray([1.0, 4.0, jnp.nan])  # chain 2's noise is not finite: its gain stays
    noise = factor[:, None] * st.noise_var[None, :]
    gain = track_gain(st, config, noise)
    want = TRACK_DECAY * 1.0 + (1.0 - TRACK_DECAY) * np.asarray([1.0, 4.0])
    np.testing.assert_allclose(np.asarray(gain[:2]), want, rtol=1e-6)
    assert float(gain[2]) == 1.0
    assert np.all(np.asarray(track_gain(st._replace(noise_var=jnp.zeros(4)), config, noise)) == 1.0)  # no V̂
    st = st._replace(noise_gain=jnp.asarray([1.0, 10.0, 200.0]))
    v, f, e = chain_noise(st, config, 1.0)
    assert e is st.eps  # one ε for every chain without track_step
    np.testing.assert_allclose(np.asarray(v), np.asarray(st.noise_gain)[:, None] * np.asarray(st.noise_var)[None, :],
                               rtol=1e-6)
    need = NOISE_MARGIN * 0.1 * np.asarray(v) * np.asarray(st.inv_mass)[None, :] / 2.0
    np.testing.assert_allclose(np.asarray(f), np.minimum(np.maximum(1.0, need), MAX_DAMPING / 0.1), rtol=1e-6)
    assert float(f[0, 0]) == 1.0 and float(f[2, 0]) == pytest.approx(MAX_DAMPING / 0.1)  # γ kept; the cap


def _run(track: bool, growth: float = 2.0, freeze: int = 600, steps: int = 4000, chains: int = 8, step=False):
    alg = P.policy(gaussian_posterior(noise=3.0), None, P.PolicyConfig(freeze_step=freeze, track_noise=track,
                                                                       track_step=step))

    def body(st, k):
        kb, ks = jax.random.split(k)
        scale = jnp.where(st.step >= freeze, growth, 1.0)  # the noise grows at the freeze; its mean stays 0
        st, info = alg.step(ks, st, scale * jax.random.normal(kb, (chains, 8, D)))
        return st, (st.position, info.t_kin)

    init = alg.init(jnp.full((chains, D), 2.0) + jnp.arange(chains)[:, None] * 0.1)
    st, (xs, t_kin) = jax.jit(lambda k: jax.lax.scan(body, init, jax.random.split(k, steps)))(jax.random.PRNGKey(0))
    keep = slice(freeze + 200, None)
    if steps <= freeze + 200:  # too short for the window's statistics
        return st, None, None
    return st, np.asarray(xs[keep]).reshape(-1, D).var(0) / SD**2, float(np.mean(np.asarray(t_kin[keep])))


@pytest.mark.slow
def test_the_window_follows_noise_that_grows_after_the_freeze():
    _, ratio, t_kin = _run(False)
    assert t_kin > 1.2 and ratio.max() > 1.5, (t_kin, ratio)  # the pooled V̂ of the burn-in: hot
    st, ratio, t_kin = _run(True)
    gain = np.asarray(st.noise_gain)
    assert np.all((gain > 3.0) & (gain < 5.5)), gain
    assert abs(t_kin - 1.0) < 0.1 and np.all(np.abs(ratio - 1.0) < 0.2), (t_kin, ratio)


def test_off_the_gain_stays_one():
    st, _, _ = _run(False, steps=700)
    assert np.all(np.asarray(st.noise_gain) == 1.0)


def test_track_step_by_hand():
    eps = float(np.sqrt(MAX_DAMPING / NOISE_MARGIN))  # h = MAX_DAMPING/2 at gain 1 (max V̂·M⁻¹ = 1 here)
    st = _state()._replace(noise_gain=jnp.asarray([1.0, 10.0, 200.0]), eps=jnp.asarray(eps, jnp.float32))
    with pytest.raises(ValueError, match="track_step needs track_noise"):
        P.PolicyConfig(track_step=True)
    v, f, e = chain_noise(st, P.PolicyConfig(track_noise=True, track_step=True), 1.0)
    heat = np.max(np.asarray(st.noise_var) * np.asarray(st.inv_mass))
    h = NOISE_MARGIN * eps**2 * np.asarray(st.noise_gain) * heat / 2
    s = np.minimum(1.0, np.sqrt(MAX_DAMPING / h))
    assert s[0] == 1.0 and s[2] < s[1] < 1.0  # the cap binds on chains 1 and 2 only
    np.testing.assert_allclose(np.asarray(e), eps * s, rtol=1e-6)
    need = NOISE_MARGIN * (eps * s)[:, None] * np.asarray(v) * np.asarray(st.inv_mass)[None, :] / 2.0
    np.testing.assert_allclose(np.asarray(f), np.minimum(np.maximum(1.0, need), MAX_DAMPING / (eps * s)[:, None]),
                               rtol=1e-5)
    two = lambda x: {"a": x[..., :2], "b": x[..., 2:]}  # noqa: E731 (θ of two leaves: the heat the max over both)
    st2 = st._replace(position=two(st.position), momentum=two(st.momentum), noise_var=two(st.noise_var),
                      inv_mass=two(st.inv_mass), friction=two(st.friction))
    _, _, e2 = jax.jit(lambda x: chain_noise(x, P.PolicyConfig(track_noise=True, track_step=True), 1.0))(st2)
    np.testing.assert_allclose(np.asarray(e2), np.asarray(e), rtol=1e-6)


@pytest.mark.slow
def test_track_step_follows_noise_past_the_heat_cap():
    _, ratio, t_kin = _run(True, growth=8.0)
    assert t_kin > 1.08 and ratio.max() > 1.5, (t_kin, ratio)  # the friction at its cap: hot
    _, ratio, t_kin = _run(True, growth=8.0, step=True)
    assert abs(t_kin - 1.0) < 0.1 and np.all(np.abs(ratio - 1.0) < 0.2), (t_kin, ratio)
    _, below, _ = _run(True, growth=2.0)
    _, below_step, _ = _run(True, growth=2.0, step=True)
    np.testing.assert_allclose(below_step, below, rtol=1e-4)  # under the cap s = 1: the same chains
