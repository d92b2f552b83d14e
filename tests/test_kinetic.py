"""Kinetic-L2E (l2e.kinetic): a learned kinetic energy K = ½‖r − μ_φ(θ)‖² that is correct by construction.

- α, β are the gradients of the scalar K the module defines (against `jax.grad` of `l2e.kinetic.energy`, random
  states and random meta-parameters; float32, rtol 1e-4 / atol 1e-5 of the largest entry), and the Jacobian of
  (α, β) with respect to (θ, r) is symmetric (max |J − Jᵀ| ≤ 1e-5·max |J|); for the paper-form L2E (shipped
  meta-parameters, g and averages held fixed) the same Jacobian is far from symmetric (control).
- μ ≡ 0 (the meta-training start) is SGHMC: bit-identical states over 30 steps on a two-tensor posterior.
- On the sampler card's 10-D and 100-D Gaussians (evaluate.card, CARD below) the median variance ratio at random
  meta-parameter draws (MU_SCALE below) lies in SGHMC's band at the same ε and C (BAND_SLACK below) and
  |mean error| < 0.1 σ; the shipped paper-form L2E fails the same assertions (control).
- With a linear μ = a·θ the kernel follows its recursion's exact stationary variance (discrete Lyapunov equation):
  the step's own O(ε·a²) bias, which → 0 with ε.
- Checkpoints record the kind; `l2e.load_sampler` returns the checkpoint's kind; shipped names resolve.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from evaluate.card import CardConfig, gaussian_target, hand_designed, learned_builder, run_sampler
from l2e.checkpoint import CheckpointError, save_checkpoint
from l2e.kinetic import KineticConfig, KineticState, energy, gradients, kinetic, mlp_mu_fn
from l2e.l2e import mlp_meta_fn
from l2e.meta_model import DECAYS, init_mu_params

SHAPES = {"w": (3, 2), "b": (2,), "c": (1,)}


def random_meta(key, hidden=(8, 8), jitter=0.3):
    """A random μ-MLP: haiku-default init with every weight and bias jittered by N(0, jitter²)."""
    params = init_mu_params(key, hidden, zero_output=False)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    return jax.tree.unflatten(treedef, [x + jitter * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def random_state(key, shapes=SHAPES):
    kt, kr = jax.random.split(key)
    theta = {n: jax.random.normal(jax.random.fold_in(kt, i), s) for i, (n, s) in enumerate(shapes.items())}
    r = {n: 2.0 * jax.random.normal(jax.random.fold_in(kr, i), s) for i, (n, s) in enumerate(shapes.items())}
    return theta, r


def flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


# ----------------------------------------------------------------------------- α, β are ∇K


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_beta_are_the_gradients_of_the_kinetic_energy(seed):
    key = jax.random.PRNGKey(seed)
    mu_fn = mlp_mu_fn(0.7)
    params = random_meta(key)
    theta, r = random_state(jax.random.fold_in(key, 7))
    alpha, beta, mu = gradients(mu_fn, params, theta, r)
    g_theta, g_r = jax.grad(lambda x, p: energy(mu_fn, params, x, p), argnums=(0, 1))(theta, r)
    scale = max(np.abs(flat(g_theta)).max(), np.abs(flat(g_r)).max())
    np.testing.assert_allclose(flat(alpha), flat(g_theta), rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(flat(beta), flat(g_r), rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(flat(beta), flat(r) - flat(mu), rtol=1e-6)
    # the check has teeth: α is not small next to β, so α with the wrong sign (+J_μᵀβ) would fail it
    assert np.abs(flat(alpha)).max() > 0.05 * np.abs(flat(beta)).max()
    assert not np.allclose(-flat(alpha), flat(g_theta), rtol=1e-4, atol=1e-5 * scale)


def _flat_field(field, theta, r):
    """(α, β) as a function of one flat vector z = (θ, r) (leaves in jax.tree order)."""
    t_leaves, treedef = jax.tree.flatten(theta)
    sizes = [x.size for x in t_leaves]
    d = sum(sizes)

    def unflat(v):
        out, i = [], 0
        for x, n in zip(t_leaves, sizes):
            out.append(v[i:i + n].reshape(x.shape))
            i += n
        return jax.tree.unflatten(treedef, out)

    def f(z):
        a, b = field(unflat(z[:d]), unflat(z[d:]))
        return jnp.concatenate([jnp.concatenate([x.ravel() for x in jax.tree.leaves(t)]) for t in (a, b)])

    z0 = jnp.concatenate([jnp.asarray(flat(theta)), jnp.asarray(flat(r))])
    return np.asarray(jax.jacfwd(f)(z0)), d


@pytest.mark.parametrize("seed", [0, 1])
def test_jacobian_of_alpha_beta_is_symmetric(seed):
    key = jax.random.PRNGKey(seed)
    mu_fn = mlp_mu_fn(1.0)
    params = random_meta(key)
    theta, r = random_state(jax.random.fold_in(key, 3))
    jac, d = _flat_field(lambda x, p: gradients(mu_fn, params, x, p)[:2], theta, r)
    scale = np.abs(jac).max()
    assert np.abs(jac - jac.T).max() <= 1e-5 * scale, np.abs(jac - jac.T).max() / scale
    # not trivially symmetric: the θθ block couples coordinates (per-tensor normalisation) and θ↔r is non-zero
    tt = jac[:d, :d]
    assert np.abs(tt - np.diag(np.diag(tt))).max() > 1e-3 * scale
    assert np.abs(jac[:d, d:]).max() > 0.1


def test_paper_form_field_is_not_a_gradient_control():
    """Control: the shipped paper-form L2E's (α, β)(θ, r) (at a fixed minibatch gradient and averages) has a
    Jacobian far from symmetric, so it is the gradient of no K — the symmetry test above can fail."""
    params, config, _ = l2e.load_meta_params("paper-form")
    meta_fn = mlp_meta_fn(config.alpha_scale, config.beta_scale)
    key = jax.random.PRNGKey(0)
    theta, r = random_state(key)
    g = jax.tree.map(lambda x: jax.random.normal(jax.random.fold_in(key, 9), x.shape), theta)
    m = jax.tree.map(lambda x: jnp.stack([x * (1.0 - dk) for dk in DECAYS]), g)
    jac, _ = _flat_field(lambda x, p: meta_fn(params, g, x, p, m), theta, r)
    assert np.abs(jac - jac.T).max() > 0.1 * np.abs(jac).max()


# ----------------------------------------------------------------------------- μ ≡ 0 is SGHMC


def _posterior():
    x = jax.random.normal(jax.random.PRNGKey(5), (64, 3))
    y = (x @ jnp.array([1.0, -2.0, 0.5]) > 0).astype(jnp.int32)

    def nll(p, batch):
        xb, yb = batch
        logits = jnp.tanh(xb @ p["w"] + p["b"]) * p["c"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], axis=1))

    return l2e.Posterior(nll, lambda p: -0.5 * sum(jnp.sum(v**2) for v in jax.tree.leaves(p)), 64), (x, y)


def test_zero_mu_is_sghmc_bit_for_bit():
    post, batch = _posterior()
    theta0 = random_state(jax.random.PRNGKey(1))[0]
    params = init_mu_params(jax.random.PRNGKey(2), (8, 8), zero_output=True)
    kin = kinetic(post, params, KineticConfig(learning_rate=0.05, friction=0.3, temperature=1.0))
    ref = l2e.sghmc(post, 0.05, 0.3, 1.0)
    step_k, step_s = jax.jit(kin.step), jax.jit(ref.step)
    sk, ss = kin.init(theta0), ref.init(theta0)
    assert isinstance(sk, KineticState)
    for t in range(30):
        key = jax.random.PRNGKey(100 + t)
        sk, ik = step_k(key, sk, batch)
        ss, is_ = step_s(key, ss, batch)
        np.testing.assert_array_equal(flat(sk.position), flat(ss.position))
        np.testing.assert_array_equal(flat(sk.momentum), flat(ss.momentum))
        np.testing.assert_allclose(float(ik.kinetic), float(is_.kinetic), rtol=1e-6)
    assert not np.array_equal(flat(sk.position), flat(theta0))  # it moved


# ----------------------------------------------------------------------------- the sampler card

CARD = CardConfig(num_steps=20_000, burn_in=4_000, num_chains=4)
BAND_SEEDS = 4
BAND_SLACK = 0.01
"""SGHMC's band: [min, max] of its median variance ratio over BAND_SEEDS card seeds (CARD, ε = 0.1·σ_min, C = 1,
gradient noise ν = 0.5), widened by BAND_SLACK on each side. Measured: 1.008–1.020 (10-D), 0.997–1.011 (100-D)."""
TARGETS = (gaussian_target("gaussian-10d", np.ones(10)), gaussian_target("gaussian-100d-aniso", np.logspace(-1, 1, 100)))
MU_SCALE = 0.3
"""Random μ-MLPs (haiku-default init, output layer included) at mu_scale 0.3. At mu_scale 1 the 10-D ratio of 8
draws spread over 0.983–1.014 (SGHMC, 8 seeds: 1.008–1.022): the discretisation's O(ε·J_μ²) friction term (see
test_linear_mu_bias_is_discretisation_and_the_kernel_follows_the_recursion); at 0.3 over 1.004–1.010; at 0.1
over 1.007–1.009 (measured once, not asserted)."""


def kinetic_builder(meta_params, config: KineticConfig):
    """A Kinetic-L2E card entry at the card's ε and C (as evaluate.card.learned_builder for L2E)."""

    def build(post, eps, c, smin, steps):
        cfg = dataclasses.replace(config, learning_rate=float(eps**2 * post.data_size), friction=float(c))
        return kinetic(post, meta_params, cfg), lambda s: jnp.ones(())

    return build


@pytest.fixture(scope="module")
def bands():
    out = {}
    for target in TARGETS:
        med = [run_sampler("sghmc", hand_designed()["sghmc"], target, CARD, s)["var_ratio_median"]
               for s in range(BAND_SEEDS)]
        out[target.name] = (min(med), max(med))
    return out


def samples_like_sghmc(row, band) -> bool:
    lo, hi = band
    return (row.get("diverged_chains") == 0 and lo - BAND_SLACK <= row["var_ratio_median"] <= hi + BAND_SLACK
            and row["mean_error"] < 0.1)


@pytest.mark.slow
@pytest.mark.parametrize("draw", [0, 1])
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_random_kinetic_l2e_is_in_sghmc_band(bands, target, draw):
    params = init_mu_params(jax.random.PRNGKey(1000 + draw), (32, 32), zero_output=False)
    row = run_sampler("kinetic", kinetic_builder(params, KineticConfig(mu_scale=MU_SCALE)), target, CARD, 0)
    print(target.name, draw, row, bands[target.name])
    assert samples_like_sghmc(row, bands[target.name]), (row, bands[target.name])


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_paper_form_l2e_fails_the_band_control(bands, target):
    params, config, _ = l2e.load_meta_params("paper-form")
    row = run_sampler("l2e", learned_builder(params, config), target, CARD, 0)
    print(target.name, row, bands[target.name])
    assert not samples_like_sghmc(row, bands[target.name]), (row, bands[target.name])


def _shipped_kinetic():
    if not (l2e.checkpoint.shipped_checkpoint("kinetic") / "meta_params").is_dir():
        pytest.skip("no shipped kinetic checkpoint")
    return l2e.load_meta_params("kinetic")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_shipped_kinetic_l2e_is_in_sghmc_band(bands, target):
    """The shipped meta-trained Kinetic-L2E ("kinetic") at the card's ε and C passes the band assertions above.
    (Measured once at the full card, 8 seeds, not asserted: its ratio is SGHMC's + 0.009 on the 10-D target at every
    seed — the μ Jacobian's O(ε) term — and + 0.000 / + 0.002 on the 100-D and the mixture.)"""
    params, config, _ = _shipped_kinetic()
    row = run_sampler("kinetic (shipped)", kinetic_builder(params, config), target, CARD, 0)
    print(target.name, row, bands[target.name])
    assert samples_like_sghmc(row, bands[target.name]), (row, bands[target.name])


# ----------------------------------------------------------------------------- checkpoints


def test_kinetic_checkpoint_round_trip_and_kind(tmp_path):
    params = random_meta(jax.random.PRNGKey(0), (32, 32))
    cfg = KineticConfig(learning_rate=0.3, friction=0.2, mu_scale=0.5)
    meta = {"iteration": 1, "sampler_kind": "kinetic", "sampler": dataclasses.asdict(cfg)}
    save_checkpoint(tmp_path / "checkpoints", 1, {"x": np.zeros(2)}, params, meta)
    got, config, _ = l2e.load_meta_params(tmp_path)
    assert config == cfg
    np.testing.assert_array_equal(flat(got), flat(params))
    post, batch = _posterior()
    sampler = l2e.load_sampler(tmp_path, posterior=post, temperature=0.5)
    state, info = jax.jit(sampler.step)(jax.random.PRNGKey(0), sampler.init(random_state(jax.random.PRNGKey(1))[0]),
                                        batch)
    assert isinstance(state, KineticState) and bool(info.is_finite)
    bad = tmp_path / "bad"
    save_checkpoint(bad / "checkpoints", 1, {"x": np.zeros(2)}, params, {**meta, "sampler_kind": "bogus"})
    with pytest.raises(CheckpointError, match="unknown sampler kind"):
        l2e.load_meta_params(bad)
    wrong = tmp_path / "wrong"  # a μ-MLP recorded as an l2e checkpoint: refused by shape
    save_checkpoint(wrong / "checkpoints", 1, {"x": np.zeros(2)}, params, {**meta, "sampler_kind": "l2e"})
    with pytest.raises(CheckpointError, match="another shape"):
        l2e.load_meta_params(wrong)


def test_shipped_names():
    default, cfg_d, _ = l2e.load_meta_params()
    transient, cfg_t, _ = l2e.load_meta_params("transient")  # the package default (tests/test_default_sampler.py)
    np.testing.assert_array_equal(flat(default), flat(transient))
    assert cfg_d == cfg_t and isinstance(cfg_d, l2e.TransientConfig)
    _, cfg_p, _ = l2e.load_meta_params("paper-form")
    assert isinstance(cfg_p, l2e.L2EConfig)
    with pytest.raises(CheckpointError):
        l2e.load_meta_params("no-such-name-or-path")
    if not (l2e.checkpoint.shipped_checkpoint("kinetic") / "meta_params").is_dir():
        pytest.skip("no shipped kinetic checkpoint")
    _, cfg_k, meta = l2e.load_meta_params("kinetic")
    assert isinstance(cfg_k, KineticConfig) and meta["sampler_kind"] == "kinetic"
    post, batch = _posterior()
    s = l2e.load_sampler("kinetic", posterior=post)
    assert isinstance(s.init(random_state(jax.random.PRNGKey(1))[0]), KineticState)


# ----------------------------------------------------------------------------- the discretisation's own bias


def linear_mu_stationary_var(eps: float, friction: float, a: float, temperature: float = 1.0) -> float:
    """Exact stationary Var[θ] of the Kinetic-L2E recursion on U = ½θ² with μ(θ) = a·θ (exact gradients): the
    discrete Lyapunov equation of z' = A z + B ξ, z = (θ, r)."""
    from scipy.linalg import solve_discrete_lyapunov

    k = friction - a
    a_rr, a_rt = 1.0 - eps * k, -eps + eps * a * k  # r' = a_rr·r + a_rt·θ + σξ;  θ' = (1 − εa)θ + ε·r'
    amat = np.array([[1.0 - eps * a + eps * a_rt, eps * a_rr], [a_rt, a_rr]])
    sigma = np.sqrt(2.0 * friction * eps * temperature)
    b = np.array([eps * sigma, sigma])
    return float(solve_discrete_lyapunov(amat, np.outer(b, b))[0, 0])


def test_linear_mu_bias_is_discretisation_and_the_kernel_follows_the_recursion():
    """μ(θ) = a·θ on a 10-D standard Gaussian, exact gradients, ε = 0.1, C = 1. The recursion's exact stationary
    variance ratio is ≈ C / (C + ε·a·(a − C)) to first order: 1.003 at a = 0 (SGHMC's own), 0.627 at a = 3 (cold
    from the discretisation alone: the α kick multiplies p by (1 + εa), the μ shift by (1 − εa), leaving an
    ε²a² friction the noise does not balance). It → 1 as ε → 0 (within 1 % at ε = 1e-3 for a ∈ {−2, 0, 1, 3}), and
    the kernel's measured ratio matches the exact value within 5 % (measured: 0.997 and 0.623).
    """
    for a in (-2.0, 0.0, 1.0, 3.0):
        assert abs(linear_mu_stationary_var(1e-3, 1.0, a) - 1.0) < 0.01
    assert linear_mu_stationary_var(0.1, 1.0, 3.0) < 0.7
    cfg = CardConfig(num_steps=20_000, burn_in=2_000, noise=0.0)
    target = gaussian_target("g10", np.ones(10))
    for a in (0.0, 3.0):
        def build(post, eps, c, smin, steps, a=a):
            kc = KineticConfig(learning_rate=float(eps**2 * post.data_size), friction=float(c))
            return kinetic(post, None, kc, mu_fn=lambda _, x: jax.tree.map(lambda v: a * v, x)), lambda s: jnp.ones(())

        row = run_sampler(f"kinetic a={a}", build, target, cfg, 0)
        want = linear_mu_stationary_var(cfg.step_factor, cfg.friction, a)
        print(a, row["var_ratio_median"], want, row["t_kin"])
        assert abs(row["var_ratio_median"] / want - 1.0) < 0.05, (a, row, want)
