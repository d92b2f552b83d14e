"""Policy-L2E's dense mass (mass_rule "dense", l2e.policy_dense): the Fisher-divergence metric as a full matrix.

- the frame from given covariances is A with AAᵀ = Σ, Σ·G·Σ = C: on a Gaussian (G = H·C·H, chains at its
  scales with any correlation) AAᵀ = H⁻¹ within 5e-2 of the largest entry and every eigenvalue of AᵀHA within 5 % of
  1 (FRAME_TOL: float32 on a middle matrix of condition ≈ 150² — the worst of OpenBLAS's kernels reads 2.0e-2 and
  2.0 %), A⁻¹ its inverse, and the frame's noise diag(AᵀVA) (rtol 1e-4);
- from the chains of a correlated Gaussian with exact gradients, every adaptation point leaves AᵀHA a condition
  number at least 10 × smaller than the diagonal Fisher rule's M^½HM^½ (which stays above 50), and from the second
  point on (solved in the first one's frame) every eigenvalue within 5 % of 1;
- in the window the update is SGHMC in the frame: θ' − θ = ε·A·M⁻¹r' (rtol 1e-4), the constants and the frame fixed;
  the window's draws have the Gaussian's variances (every ratio within 0.8–1.25, 8 chains × 2,000 updates);
- the half-batch δ squares to l2e.adaptation.halved_gradients' V̂ (rtol 1e-5), and the pooled noise is the live
  chains' mean of δδᵀ;
- above DENSE_MAX coordinates the rule is the diagonal Fisher rule: the same chains bit for bit, no matrices kept.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import policy as P
from l2e import policy_dense as PD
from l2e.adaptation import halved_difference, halved_gradients

N, D, M = 1000, 5, 8
FRAME_TOL = 5e-2
"""The first frame's tolerance, from its spread over the LAPACK and BLAS kernels that the CPU picks (measured, the
largest entry's share of |AAᵀ − H⁻¹| and the largest |λ(AᵀHA) − 1|: OPENBLAS_CORETYPE Katmai 1.0e-2 / 1.0 %, Nehalem and
Sandybridge 1.7e-2 / 1.7 %, Haswell, which AMD's Zen takes, 4.3e-3 / 0.4 %, SkylakeX 2.0e-2 / 2.0 %; XLA's
--xla_cpu_max_isa from SSE4_2 to AVX512 changes nothing), with a margin of 2.5."""


def _hessian():
    """A posterior Hessian with strongly correlated coordinates and unequal scales (diagonally scaled cond > 100)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, D))
    x[:, 1] = x[:, 0] + 0.05 * x[:, 1]
    x[:, 3] = 20.0 * x[:, 3]
    return (x.T @ x / 200.0 + 0.01 * np.eye(D)).astype(np.float32)


H = _hessian()
COV = np.linalg.inv(H.astype(np.float64))


def exact_gaussian():
    """N(0, H⁻¹) with exact gradients (the minibatch is not read)."""
    h = jnp.asarray(H)
    return l2e.Posterior(lambda th, b: 0.5 * th @ h @ th / N + 0.0 * jnp.sum(b), lambda th: jnp.zeros(()), N)


def _run(config, steps, dim=D, post=None, seed=0):
    alg = P.policy(post or exact_gaussian(), None, config)
    step = jax.jit(alg.step)
    state = alg.init(jnp.asarray(np.random.default_rng(seed).normal(size=(M, dim)) * 0.3, jnp.float32))
    out = []
    for t in range(steps):
        state, info = step(jax.random.PRNGKey(1000 * seed + t), state, jnp.zeros((M, 2, 1)))
        out.append((state, info))
    return out


def test_frame_is_the_inverse_hessian_of_a_gaussian():
    rng = np.random.default_rng(1)
    c = rng.normal(size=(D, D))
    scale = 1.0 / np.sqrt(np.diag(H))  # chains at the posterior's scales (phase 0's RMSprop), any correlation
    c = (scale[:, None] * (c @ c.T / D + 0.1 * np.eye(D)) * scale[None, :]).astype(np.float32)
    n = 1e7  # states: the off-diagonal shrinkage m/(m + d) is 1 to float32
    v = np.diag(rng.uniform(1.0, 2.0, D)).astype(np.float32)
    dense = PD.Dense(jnp.broadcast_to(jnp.asarray(c * (n - 1)), (M, D, D)),
                     jnp.broadcast_to(jnp.asarray(H @ c @ H * (n - 1)), (M, D, D)), jnp.asarray(v),
                     jnp.eye(D), jnp.eye(D))
    new, noise = PD.frame(dense, jnp.asarray(n, jnp.float32), jnp.ones(M, bool))
    a = np.asarray(new.frame, np.float64)
    np.testing.assert_allclose(a @ a.T, COV, atol=FRAME_TOL * np.abs(COV).max())
    np.testing.assert_allclose(np.linalg.eigvalsh(a.T @ H.astype(np.float64) @ a), 1.0, atol=FRAME_TOL)
    np.testing.assert_allclose(np.asarray(new.frame_inv) @ a, np.eye(D), atol=1e-3)
    np.testing.assert_allclose(noise, np.diag(a.T @ v @ a), rtol=1e-4)
    assert not np.any(np.asarray(new.cx)) and not np.any(np.asarray(new.nv))


def _conditioning(state, rule):
    if rule == "dense":
        a = np.asarray(state.dense.frame, np.float64)
        return np.linalg.eigvalsh(a.T @ H @ a)
    s = np.sqrt(np.asarray(state.inv_mass, np.float64))
    return np.linalg.eigvalsh(s[:, None] * H * s[None, :])


def test_adaptation_points_whiten_a_correlated_gaussian():
    ends, _ = P.adaptation_points(P.PolicyConfig(freeze_step=600, noise_halves=False))
    lam = {}
    for rule in ("dense", "fisher"):
        cfg = P.PolicyConfig(freeze_step=600, noise_halves=False, mass_rule=rule, policy="rule")
        runs = _run(cfg, ends[-1] + 1)
        lam[rule] = [_conditioning(runs[e][0], rule) for e in ends]
    cond = {rule: [v.max() / v.min() for v in values] for rule, values in lam.items()}
    assert all(d * 10.0 < f for d, f in zip(cond["dense"], cond["fisher"])), cond
    assert min(cond["fisher"]) > 50.0, cond
    for values in lam["dense"][1:]:  # each point solves in the last one's frame: it refines
        assert np.all(np.abs(values - 1.0) < 0.05), values


def test_window_is_sghmc_in_the_frame_and_samples_the_gaussian():
    cfg = P.PolicyConfig(freeze_step=600, noise_halves=False, mass_rule="dense", policy="rule")
    runs = _run(cfg, 2600)
    for (old, _), (new, info) in zip(runs[601:606], runs[602:607]):
        a = np.asarray(new.dense.frame)
        assert np.array_equal(a, np.asarray(old.dense.frame)) and float(new.eps) == float(old.eps)
        step = float(new.eps) * (np.asarray(new.inv_mass) * np.asarray(new.momentum)) @ a.T
        np.testing.assert_allclose(np.asarray(new.position - old.position), step, rtol=1e-4, atol=1e-6)
        assert bool(np.all(info.sampling))
    draws = np.concatenate([np.asarray(s.position) for s, _ in runs[600:]])
    ratio = draws.var(0) / np.diag(COV)
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio


def test_half_batch_difference_squares_to_the_noise_estimate():
    post = l2e.Posterior(lambda th, b: jnp.mean((b[:, :D] @ th - b[:, D]) ** 2), lambda th: -0.5 * jnp.sum(th**2), N)
    th = jnp.linspace(-1.0, 1.0, D)
    mb = jax.random.normal(jax.random.PRNGKey(0), (16, D + 1))
    loss, g, diff = halved_difference(post, th, mb, True)
    loss2, g2, var = halved_gradients(post, th, mb, True)
    np.testing.assert_allclose(np.square(diff), var, rtol=1e-5)
    np.testing.assert_allclose(g, g2, rtol=1e-6)
    np.testing.assert_allclose(loss, loss2, rtol=1e-6)
    dense = PD.init_dense(jnp.zeros((3, D)))
    diffs = jnp.stack([diff, 2.0 * diff, jnp.full((D,), jnp.nan)])
    out = PD.gather_dense(dense, 1.0, jnp.zeros((3, D)), jnp.zeros((3, D)), jnp.zeros((3, D)), jnp.zeros((3, D)), diffs)
    np.testing.assert_allclose(out.nv, 2.5 * np.outer(diff, diff), rtol=1e-5)


def test_above_dense_max_the_rule_is_the_diagonal_one():
    dim = PD.DENSE_MAX + 1
    sd = jnp.linspace(0.5, 2.0, dim)
    post = l2e.Posterior(lambda th, b: (0.5 * jnp.sum(th**2 / sd**2) + 0.3 * jnp.dot(jnp.mean(b, 0), th)) / N,
                         lambda th: jnp.zeros(()), N)
    states = {}
    for rule in ("dense", "fisher"):
        alg = P.policy(post, None, P.PolicyConfig(freeze_step=12, mass_rule=rule, policy="rule"))
        step, state = jax.jit(alg.step), alg.init(jnp.ones((M, dim)))
        for t in range(16):
            state, _ = step(jax.random.PRNGKey(t), state, jax.random.normal(jax.random.PRNGKey(99 + t), (M, 4, dim)))
        states[rule] = state
    assert states["dense"].dense.frame.shape == (0, 0)
    for a, b in zip(jax.tree.leaves(states["dense"]), jax.tree.leaves(states["fisher"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("bad", ["full", "Dense"])
def test_an_unknown_mass_rule_is_refused(bad):
    with pytest.raises(ValueError, match="mass_rule"):
        P.PolicyConfig(mass_rule=bad)
