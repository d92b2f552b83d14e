"""Policy-L2E's restart of lagging chains (PolicyConfig.restart_lagging; l2e.policy_features.lagging,
l2e.policy_updates.restart).

- `lagging` marks exactly the finite chains whose window-mean loss lies more than LAG_Z × the median within-chain
  standard deviation above the best finite chain's (a divergent chain is never marked, and never the reference);
- `restart` moves every marked chain onto the θ of a live chain (exactly: a copy) and leaves the others unchanged;
  with no live chain it changes nothing;
- on a Gaussian with two of eight chains started 10³ standard deviations out, the first adaptation point moves them
  onto the others (every chain within 5 standard deviations of the mode right after it; without restart_lagging they
  are still more than 100 out); at that point exactly the two lag, and the pooled statistics (the mass rule's
  log σ̂² and the pooled mean of θ) are those of the six near chains alone (rtol 1e-5);
- at the freeze no chain is moved: a chain put far out inside the last gathering window is still far out after it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from l2e import policy as P
from l2e.policy_features import LAG_Z, features, lagging
from l2e.policy_updates import restart
from test_transient import D, SD, gaussian_posterior

M = 8
PER_CHAIN = ("position", "momentum", "sq", "mean_x", "m2_x", "mean_g", "m2_g", "loss_mean", "loss_m2", "loss_early")


def _state(loss_mean, sd, count=20.0):
    st = P.init(jnp.zeros((len(loss_mean), 3)))
    return st._replace(count=jnp.asarray(count, jnp.float32), loss_mean=jnp.asarray(loss_mean, jnp.float32),
                       loss_m2=jnp.asarray(np.square(sd) * (count - 1.0), jnp.float32))


def test_lagging_marks_the_chains_far_above_the_best():
    sd = np.full(5, 0.2)
    gap = LAG_Z * 0.2
    flags = lagging(_state([0.0, 0.5 * gap, 1.01 * gap, 3.0 * gap, np.nan], sd))
    assert list(np.asarray(flags)) == [False, False, True, True, False]
    # a divergent chain is not the reference: a NaN loss does not make every finite chain lag
    assert not np.asarray(lagging(_state([np.nan, 0.0, 0.1], np.full(3, 0.2)))).any()


def test_restart_copies_a_live_chain():
    st = P.init(jnp.arange(12.0).reshape(4, 3))
    lag, alive = jnp.array([True, False, False, True]), jnp.array([False, True, True, False])
    moved = np.asarray(restart(st, lag, alive, jax.random.PRNGKey(0)).position)
    before = np.asarray(st.position)
    for c in (0, 3):
        assert any(np.array_equal(moved[c], before[k]) for k in (1, 2)), c
    np.testing.assert_array_equal(moved[1:3], before[1:3])
    none = restart(st, lag, jnp.zeros(4, bool), jax.random.PRNGKey(0)).position
    np.testing.assert_array_equal(np.asarray(none), before)


def _run(restart_lagging, steps, far_at=None):
    """Positions after every update (steps, M, D) and the states, two chains started 10³ SD out (or, with `far_at`,
    chain 0 put 10³ SD out before update `far_at`)."""
    cfg = P.PolicyConfig(freeze_step=90, base_step=1e-2, restart_lagging=restart_lagging, policy="rule")
    alg = P.policy(gaussian_posterior(), None, cfg)
    start = np.full((M, D), 0.5) * SD
    if far_at is None:
        start[:2] = 1e3 * SD
    state, step = alg.init(jnp.asarray(start, jnp.float32)), jax.jit(alg.step)
    xs, states = [], []
    for t in range(steps):
        if t == far_at:
            state = state._replace(position=state.position.at[0].set(jnp.asarray(1e3 * SD, jnp.float32)))
        state, _ = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(10_000 + t), (M, 8, D)))
        xs.append(np.asarray(state.position) / SD)
        states.append(state)
    return np.asarray(xs), states


def test_the_first_adaptation_point_moves_lagging_chains_onto_the_others():
    ends, _ = P.adaptation_points(P.PolicyConfig(freeze_step=90))
    on, states = _run(True, ends[0] + 1)
    off, _ = _run(False, ends[0] + 1)
    assert np.abs(on[ends[0] - 1, :2]).min() > 100  # still far out before the point
    assert np.abs(on[ends[0]]).max() < 5
    assert np.abs(off[ends[0], :2]).min() > 100
    # at the point, exactly the far chains lag, and the pooled statistics are the near chains' alone
    before = states[ends[0] - 1]
    lag = np.asarray(lagging(before))
    assert list(lag) == [True, True] + [False] * (M - 2)
    cfg = P.PolicyConfig(freeze_step=90)
    masked = features(before, cfg, 1000, 1 / 3, jnp.asarray(lag))[2]
    near = before._replace(**{f: jax.tree.map(lambda x: x[2:], getattr(before, f)) for f in PER_CHAIN})
    alone = features(near, cfg, 1000, 1 / 3)[2]
    for k in ("log_s2", "centre"):
        np.testing.assert_allclose(np.asarray(masked[k]), np.asarray(alone[k]), rtol=1e-5, err_msg=k)


def test_no_chain_is_moved_at_the_freeze():
    ends, gathers = P.adaptation_points(P.PolicyConfig(freeze_step=90))
    xs, _ = _run(True, ends[-1] + 2, far_at=gathers[-1] + 2)
    assert np.abs(xs[ends[-1], 0]).max() > 100 and np.abs(xs[ends[-1], 1:]).max() < 10
