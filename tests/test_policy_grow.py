"""Policy-L2E's burn_chains (PolicyConfig.burn_chains; l2e.policy_updates.grow, l2e.policy_budget's split):

- `grow` keeps the M chains as they are and appends clones of the live chains (finite statistics, not lagging),
  round robin in chain order; a clone's gathered loss statistics are NaN, so the pooled statistics leave it out;
  with no live chain it clones the finite ones, with none finite every chain; it refuses to shrink;
- the freeze's adaptation point on the grown state sets exactly the constants it sets on the M_b chains alone (mass,
  step, friction, noise; rtol 1e-6), and in the window the clones separate from their donors (every chain finite,
  each clone more than 0.3 standard deviations, RMS over the coordinates, from its donor after 300 updates; measured
  0.94–1.19, two independent draws √2);
- the budget: with burn_chains M_b < M the plan's run (`run_gradients`) fits in G, leaving fewer than M_b gradients
  (2·M_b with control_variate); its window (k draws `thinning` apart; two gradients per update with control_variate)
  takes window_fraction of what the adaptation points leave, and its burn-in is longer than M chains' (fewer
  chains); burn_chains 0 or M is the plain split; above M, or through for_budget, it is refused;
- the evaluation's driver runs M_b chains to the freeze, then M: M × K/M draws, the gradients the plan's.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e import policy as P
from l2e.policy_features import LAG_Z, features
from test_transient import D, SD, gaussian_posterior


def _gathered(loss_mean, count=20.0):
    st = P.init(jnp.arange(len(loss_mean) * 3, dtype=jnp.float32).reshape(len(loss_mean), 3))
    sd = np.full(len(loss_mean), 0.2)
    return st._replace(count=jnp.asarray(count, jnp.float32), loss_mean=jnp.asarray(loss_mean, jnp.float32),
                       loss_m2=jnp.asarray(np.square(sd) * (count - 1.0), jnp.float32),
                       noise_gain=jnp.arange(1.0, len(loss_mean) + 1.0))


def test_grow_clones_the_live_chains_round_robin():
    st = _gathered([0.0, 10 * LAG_Z * 0.2, 0.1])  # chain 1 lags
    grown = P.grow(st, 7)
    donors = [0, 1, 2, 0, 2, 0, 2]
    before, after = np.asarray(st.position), np.asarray(grown.position)
    np.testing.assert_array_equal(after, before[donors])
    np.testing.assert_array_equal(np.asarray(grown.noise_gain), np.asarray(st.noise_gain)[donors])
    assert np.isfinite(np.asarray(grown.loss_mean[:3])).all() and np.isnan(np.asarray(grown.loss_m2[3:])).all()
    alive = np.asarray(features(grown, P.PolicyConfig(), 100, 1.0)[2]["alive"])
    assert list(alive) == [True] * 3 + [False] * 4
    for field in ("inv_mass", "eps", "friction", "noise_var", "count", "kin"):
        assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), getattr(st, field),
                                         getattr(grown, field))), field
    # no live chain: the finite ones; none finite: every chain
    nan_one = _gathered([np.nan, 0.0, np.nan])
    np.testing.assert_array_equal(np.asarray(P.grow(nan_one, 5).position)[3:], np.asarray(nan_one.position)[[1, 1]])
    nan_all = _gathered([np.nan] * 2)
    np.testing.assert_array_equal(np.asarray(P.grow(nan_all, 4).position)[2:], np.asarray(nan_all.position))
    with pytest.raises(ValueError, match="cannot grow"):
        P.grow(st, 2)


def test_the_freeze_reads_the_burn_in_chains_alone_and_the_clones_separate():
    cfg = P.PolicyConfig(freeze_step=60, phases=3, policy="rule", curvature="warm")
    alg = P.policy(gaussian_posterior(), None, cfg)
    step = jax.jit(alg.step)
    state = alg.init(jnp.asarray(np.full((3, D), 0.5) * SD, jnp.float32))

    def batch(t, m):
        return jax.random.normal(jax.random.PRNGKey(10_000 + t), (6, 8, D))[:m]

    for t in range(cfg.freeze_step):
        state, _ = step(jax.random.PRNGKey(t), state, batch(t, 3))
    grown = P.grow(state, 6)
    alone, _ = step(jax.random.PRNGKey(60), state, batch(60, 3))
    both, _ = step(jax.random.PRNGKey(60), grown, batch(60, 6))
    for field in ("inv_mass", "eps", "friction", "noise_var"):
        np.testing.assert_allclose(np.asarray(getattr(both, field)), np.asarray(getattr(alone, field)), rtol=1e-6,
                                   err_msg=field)
    for t in range(61, 361):
        both, info = step(jax.random.PRNGKey(t), both, batch(t, 6))
    assert np.asarray(info.is_finite).all()
    x = np.asarray(both.position) / SD
    rms = np.sqrt(np.mean(np.square(x[3:] - x[[0, 1, 2]]), axis=1))
    assert rms.min() > 0.3, rms


@pytest.mark.parametrize("control_variate", [False, True])
def test_burn_chains_split_the_budget(control_variate):
    plain = P.PolicyConfig(curvature="warm", control_variate=control_variate)
    grown = dataclasses.replace(plain, burn_chains=4)
    anchor = 7 if control_variate else 0
    for gradients in (500, 2_000, 8_000):
        steps, k, thinning, freeze = P.split_budget(grown, gradients, 10, 10, anchor)
        used = P.run_gradients(dataclasses.replace(grown, freeze_step=freeze), steps, 10, anchor)
        slack = 4 * (1 + control_variate)  # a burn-in update of the M_b chains: one gradient each, two if anchored
        assert steps - freeze == k * thinning and k == 1 and gradients - slack < used <= gradients, (gradients, used)
        spare = gradients - P.adaptation_gradients(grown, 10, anchor)
        assert thinning == int(plain.window_fraction * spare / (10 * (1 + control_variate)))
        assert freeze > P.split_budget(plain, gradients, 10, 10, anchor)[3]
        for same in (0, 10):
            assert P.split_budget(dataclasses.replace(plain, burn_chains=same), gradients, 10, 10, anchor) == \
                P.split_budget(plain, gradients, 10, 10, anchor)
    with pytest.raises(ValueError, match="exceeds the chains"):
        P.split_budget(dataclasses.replace(plain, burn_chains=12), 8_000, 10, 10, anchor)
    with pytest.raises(ValueError, match="burn_chains"):
        P.for_budget(gaussian_posterior(), 8_000, chains=10, meta_params="rule", config=grown, data=jnp.zeros((70, 1)),
                     batch_size=10)


def test_the_evaluation_runs_the_burn_in_chains_then_all():
    from evaluate.run import evaluate
    from conftest import TINY_EVAL, iris_mlp, tiny_eval_config

    settings = dict(chains=4, burn_chains=2, phases=2, power_iterations=1)
    res = evaluate(tiny_eval_config(iris_mlp(8), ("policy",), {"policy": settings}), None, progress=False)
    row = next(iter(res["tasks"].values()))["methods"]["policy"]
    assert row["num_chains"] == 4 and row["num_samples"] == TINY_EVAL["num_samples"]
    assert row["divergent_chains"] == 0 and row["t_kin"] is not None
    cfg = P.PolicyConfig(curvature="warm", phases=2, power_iterations=1, burn_chains=2)
    steps, _, _, freeze = P.split_budget(cfg, TINY_EVAL["num_steps"], TINY_EVAL["num_samples"], 4)
    assert row["grad_evals"] == P.run_gradients(dataclasses.replace(cfg, freeze_step=freeze), steps, 4)
    assert row["grad_evals"] <= TINY_EVAL["num_steps"] and freeze > 0
