"""The control-variate rivals SGLD-CV and SGHMC-CV (l2e.control_variates, l2e.sgld_cv, l2e.sghmc_cv; the evaluation
methods sgld_cv / sghmc_cv).

Known targets, each a data set whose minibatch gradient noise the control variate must remove (not the sampler card's
θ-independent noise, which it cancels exactly: `test_card_noise_cancels_exactly`):
  * gauss: Bayesian linear regression (N = 2,000, d = 5, anisotropic features): exact Gaussian posterior; the
    per-example Hessians x_i x_iᵀ differ, so the CV estimate is noisy away from the anchor;
  * banana: y_i ~ N(θ1 + θ2², 1), N = 50, prior N(0, I): a curved ridge, moments by quadrature on a grid;
  * logistic: N = 5,000, d = 5, B = 32, prior N(0, I): moments by importance sampling from the Laplace fit; plain
    SGLD and SGHMC run hot there (variance ratio above the band), their CV forms inside it.
Statistics (`_ratio`): the variance ratio E[(θ − μ)²]/σ² about the exact mean μ, per coordinate and averaged over
coordinates, with its standard error from batch means (each chain cut into BATCHES batches, all chains pooled); the
band is the project's dispersion band (evaluate.curve.fidelity.DISPERSION_BAND, 0.8 – 1.25); "in band" asserts
every coordinate's ratio inside it and the coordinate-mean's ±3 s.e. interval inside it ("off": that interval
above it). The chains are statistical: any instruction-set level draws other numbers from the same law, and a bound
of 3 standard errors fails with probability ≈ 1e-3 per assertion.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import control_variates as cv

BAND = (0.8, 1.25)
BATCHES = 5
EPS32 = float(np.finfo(np.float32).eps)


# ----------------------------------------------------------------------------- helpers


def _batch(key, data, b):
    idx = jax.random.randint(key, (b,), 0, data[0].shape[0])
    return data[0][idx], data[1][idx]


def _chains(alg, x0, data, b, steps, chains, key, burn):
    """(chains, steps − burn, d) positions of `chains` chains of alg from x0 (lax.scan: a toy model)."""

    def one(k):
        def body(state, t):
            kb, kn = jax.random.split(jax.random.fold_in(k, t))
            state, _ = alg.step(kn, state, _batch(kb, data, b))
            return state, state.position["w"]

        return jax.lax.scan(body, alg.init(x0), jnp.arange(steps))[1][burn:]

    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(key, chains)), np.float64)


def _ratio(xs, mean, var):
    """(per-coordinate ratios, coordinate-mean ratio, its standard error by batch means) of (chains, n, d) draws."""
    z = (xs - mean) ** 2 / var
    c, n, d = z.shape
    batches = z[:, : n // BATCHES * BATCHES].reshape(c * BATCHES, -1, d).mean(1)
    pooled = batches.mean(1)
    return batches.mean(0), float(pooled.mean()), float(pooled.std(ddof=1) / math.sqrt(len(pooled)))


def _in_band(xs, mean, var, what):
    per, avg, se = _ratio(xs, mean, var)
    assert np.all((per > BAND[0]) & (per < BAND[1])), (what, per)
    assert BAND[0] < avg - 3 * se and avg + 3 * se < BAND[1], (what, avg, se)
    return per, avg, se


def _linear(n, d, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, d)) * np.geomspace(0.5, 2.0, d)).astype(np.float32)
    w = rng.normal(size=d)
    y = (x @ w + rng.normal(size=n)).astype(np.float32)

    def nll(p, batch):
        return 0.5 * jnp.mean((batch[1] - batch[0] @ p["w"]) ** 2)

    post = l2e.Posterior(nll, lambda p: -0.5 * jnp.sum(p["w"] ** 2), n)
    prec = x.astype(np.float64).T @ x + np.eye(d)
    cov = np.linalg.inv(prec)
    return post, (jnp.asarray(x), jnp.asarray(y)), cov @ (x.astype(np.float64).T @ y), cov


def _logistic(n, d, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ rng.normal(size=d)))).astype(np.float32)

    def nll(p, batch):
        z = batch[0] @ p["w"]
        return jnp.mean(jnp.logaddexp(0.0, z) - batch[1] * z)

    return l2e.Posterior(nll, lambda p: -0.5 * jnp.sum(p["w"] ** 2), n), (jnp.asarray(x), jnp.asarray(y))


def _logistic_truth(data, draws=20_000, seed=1):
    """(MAP, mean, variance) of the logistic posterior: Newton's MAP, then self-normalised importance sampling from
    the Laplace fit N(MAP, H⁻¹) (float64)."""
    x, y = (np.asarray(a, np.float64) for a in data)
    d = x.shape[1]
    th = np.zeros(d)
    for _ in range(30):
        p = 1 / (1 + np.exp(-x @ th))
        h = (x * (p * (1 - p))[:, None]).T @ x + np.eye(d)
        th -= np.linalg.solve(h, x.T @ (p - y) + th)
    chol = np.linalg.cholesky(np.linalg.inv(h))
    z = np.random.default_rng(seed).normal(size=(draws, d))
    w = th + z @ chol.T
    logits = x @ w.T
    logp = -(np.logaddexp(0, logits) - y[:, None] * logits).sum(0) - 0.5 * (w**2).sum(1)
    lw = logp + 0.5 * (z**2).sum(1)
    wt = np.exp(lw - lw.max())
    wt /= wt.sum()
    mean = wt @ w
    return th, mean, wt @ (w - mean) ** 2


def _banana(n=50, sigma=1.0, seed=0):
    rng = np.random.default_rng(seed)
    y = (0.5 + sigma * rng.normal(size=n)).astype(np.float32)
    x = np.ones((n, 1), np.float32)  # no inputs: the data are the y_i

    def nll(p, batch):
        w = p["w"]
        return 0.5 * jnp.mean((batch[1] - w[0] - w[1] ** 2) ** 2) / sigma**2

    return l2e.Posterior(nll, lambda p: -0.5 * jnp.sum(p["w"] ** 2), n), (jnp.asarray(x), jnp.asarray(y))


def _banana_truth(data, sigma=1.0, step=0.004):
    """(mean, variance) of the banana posterior by quadrature on a grid (float64): θ1 ∈ [−9, 3], θ2 ∈ [−3.5, 3.5]
    (the density beyond is below e⁻⁶ of its peak), N·mean NLL through the data's sufficient statistics."""
    y = np.asarray(data[1], np.float64)
    n, ybar, ss = y.size, y.mean(), ((y - y.mean()) ** 2).sum()
    t1, t2 = np.arange(-9.0, 3.0, step), np.arange(-3.5, 3.5, step)
    a, b = np.meshgrid(t1, t2, indexing="ij")
    f = a + b**2
    logp = -0.5 * (n * (f - ybar) ** 2 + ss) / sigma**2 - 0.5 * (a**2 + b**2)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean = np.array([(p * a).sum(), (p * b).sum()])
    return mean, np.array([(p * (a - mean[0]) ** 2).sum(), (p * (b - mean[1]) ** 2).sum()]), p


def _sum_bound(terms) -> np.ndarray:
    """The float32 rounding bound of a sum (any order): (n − 1)·eps·Σ|terms| per coordinate (terms: (n, d))."""
    terms = np.abs(np.asarray(terms, np.float64))
    return (terms.shape[0] - 1) * EPS32 * terms.sum(0)


def _per_example_grads(post, w, data):
    """(n, d) gradients ∇ℓ_i(w) of the per-example NLL."""
    x, y = data
    return np.asarray(jax.vmap(lambda xi, yi: jax.grad(post.nll)({"w": w}, (xi[None], yi[None]))["w"])(x, y))


# ----------------------------------------------------------------------------- the estimate


def test_full_batch_cv_estimate_is_the_full_gradient():
    """With B = N (the minibatch is the data set) the CV estimate is ∇U(θ) = N·ḡ(θ) − ∇log p(θ), however far θ is
    from θ̂; the chunked full-data pass equals the one-batch pass. Tolerance: the float32 bound of the sums involved
    ((n − 1)·eps·Σ_i|∇ℓ_i| at θ and at θ̂, times N, for the three means), measured far below it."""
    post, data = _logistic(2_000, 5)
    n = post.data_size
    theta, anchor_pos = {"w": jnp.full(5, 0.3)}, {"w": jnp.linspace(-1.0, 1.0, 5)}
    anchor = cv.anchor_at(post, anchor_pos, data, chunk_size=300)
    one_batch = cv.full_nll_grad(post, anchor_pos, data)
    bound_hat = _sum_bound(_per_example_grads(post, anchor_pos["w"], data)) / n
    np.testing.assert_array_less(np.abs(np.asarray(anchor.nll_grad["w"]) - np.asarray(one_batch["w"])),
                                 2 * bound_hat + 1e-12)
    loss, _, grad_u = cv.cv_posterior(post, anchor).value_and_potential_grad(theta, data)
    want_loss, _, want = post.value_and_potential_grad(theta, data)
    bound = n * (_sum_bound(_per_example_grads(post, theta["w"], data)) / n + 3 * bound_hat)
    err = np.abs(np.asarray(grad_u["w"]) - np.asarray(want["w"]))
    np.testing.assert_array_less(err, bound + 4 * EPS32 * np.abs(np.asarray(want["w"])))
    assert float(loss) == float(want_loss)  # the reported loss is the plain minibatch NLL
    # far from θ̂ the correction is large: a CV estimate that dropped it would miss by N·|ḡ(θ̂)| ≫ the bound
    assert np.all(n * np.abs(np.asarray(anchor.nll_grad["w"])) > 100 * bound)


def test_cv_estimate_is_unbiased_and_exact_at_the_anchor():
    """Over the N single-example minibatches the CV estimate averages to ∇U(θ) exactly (unbiased: float32 bound of
    the average); at θ = θ̂ every minibatch gives ∇U(θ̂) (no noise), away from θ̂ the minibatches disagree."""
    post, data = _logistic(1_000, 3)
    n = post.data_size
    anchor = cv.anchor_at(post, {"w": jnp.array([0.5, -0.2, 0.1])}, data)
    cvp = cv.cv_posterior(post, anchor)

    def estimates(theta):
        one = lambda xi, yi: cvp.potential_grad(theta, (xi[None], yi[None]))[1]["w"]  # noqa: E731
        return np.asarray(jax.vmap(one)(*data), np.float64)

    theta = {"w": jnp.array([0.9, 0.3, -0.4])}
    est = estimates(theta)
    want = np.asarray(post.potential_grad(theta, data)[1]["w"], np.float64)
    np.testing.assert_array_less(np.abs(est.mean(0) - want), 2 * _sum_bound(est) / n + 8 * EPS32 * np.abs(est).max(0))
    at_anchor = estimates(anchor.position)
    u_hat = np.asarray(post.potential_grad(anchor.position, data)[1]["w"], np.float64)
    scale = n * np.abs(_per_example_grads(post, anchor.position["w"], data)).max(0)
    np.testing.assert_array_less(np.abs(at_anchor - u_hat).max(0), _sum_bound(at_anchor) / n + 4 * EPS32 * scale)
    assert np.all(est.std(0) > 100 * at_anchor.std(0) + 1.0)


def test_refreshed_and_found_anchor():
    """refreshed() moves the anchor to the chain's position; find_anchor's SGD reaches the MAP's neighbourhood (within
    one posterior standard deviation per coordinate, 1,000 updates) and its gradient there is the full-data one (to
    the float32 bound of the mean); a momentum of 1 is refused."""
    post, data = _logistic(2_000, 3)
    th, mean, var = _logistic_truth(data, draws=2_000)
    anchor = cv.find_anchor(post, {"w": jnp.zeros(3)}, jax.random.PRNGKey(0), data, _batch, 32, 1_000, 0.05)
    assert np.all(np.abs(np.asarray(anchor.position["w"]) - th) < np.sqrt(var)), (anchor.position, th)
    eager = cv.anchor_at(post, anchor.position, data).nll_grad["w"]  # jit and eager sum in other orders
    bound = 2 * _sum_bound(_per_example_grads(post, anchor.position["w"], data)) / post.data_size
    np.testing.assert_array_less(np.abs(np.asarray(anchor.nll_grad["w"]) - np.asarray(eager)), bound)
    alg = l2e.sgld_cv(post, 0.01, anchor)
    state, _ = jax.jit(alg.step)(jax.random.PRNGKey(1), alg.init(anchor.position), _batch(jax.random.PRNGKey(2), data, 32))
    moved = cv.refreshed(state, post, data)
    assert moved.anchor.position is state.position and int(moved.step) == 1
    with pytest.raises(ValueError, match="momentum"):
        cv.find_anchor(post, {"w": jnp.zeros(3)}, jax.random.PRNGKey(0), data, _batch, 32, 10, 0.05, momentum=1.0)


# ----------------------------------------------------------------------------- known targets


def _cv_pair(post, anchor, lr_sgld, lr_sghmc, friction):
    return {"sgld_cv": l2e.sgld_cv(post, lr_sgld, anchor), "sghmc_cv": l2e.sghmc_cv(post, lr_sghmc, anchor, friction)}


@pytest.mark.slow
def test_gaussian_linear_regression():
    """Both CV samplers on the exact Gaussian posterior of a linear regression (N = 2,000, d = 5, feature scales
    0.5 – 2, B = 32; 8 chains × 20,000 updates from an SGD anchor of 1,000 updates, the first fifth dropped): every
    coordinate's variance ratio in the band, the coordinate mean's 3-s.e. interval too (measured 1.03 ± 0.02 and
    1.06 ± 0.01; plain SGLD and SGHMC at these settings: 2.1 and 8.6)."""
    post, data, mean, cov = _linear(2_000, 5)
    anchor = cv.find_anchor(post, {"w": jnp.zeros(5)}, jax.random.PRNGKey(0), data, _batch, 32, 1_000, 0.02)
    for name, alg in _cv_pair(post, anchor, 0.02, 0.01, 30.0).items():
        xs = _chains(alg, anchor.position, data, 32, 20_000, 8, jax.random.PRNGKey(2), 4_000)
        _in_band(xs, mean, np.diag(cov), name)


@pytest.mark.slow
def test_banana():
    """Both CV samplers on a curved ridge, y_i ~ N(θ1 + θ2², 2²), N = 20, B = 5, prior N(0, I) (the CV noise
    ∝ (y_i − ȳ)·(θ2 − θ̂2) does not vanish; moments by quadrature): variance ratios in the band (16 chains × 20,000
    updates; measured 1.01 ± 0.02 for both)."""
    post, data = _banana(20, 2.0)
    mean, var, _ = _banana_truth(data, 2.0)
    anchor = cv.find_anchor(post, {"w": jnp.zeros(2)}, jax.random.PRNGKey(0), data, _batch, 5, 1_000, 0.02)
    for name, alg in _cv_pair(post, anchor, 0.2, 0.2, 3.0).items():
        xs = _chains(alg, anchor.position, data, 5, 20_000, 16, jax.random.PRNGKey(2), 4_000)
        _in_band(xs, mean, var, name)


@pytest.mark.slow
def test_large_n_logistic_regression_plain_hot_cv_in_band():
    """N = 5,000, d = 5, B = 32: plain SGLD (lr 0.1) and SGHMC (lr 0.05, C = 10) run hot — the variance ratio's
    3-s.e. interval above the band (measured 2.0 and 18.5) — while SGLD-CV and SGHMC-CV at the same settings, from an
    SGD anchor of 1,000 updates, are in it (1.03 ± 0.02, 1.05 ± 0.02); 8 chains × 10,000 updates from the anchor."""
    post, data = _logistic(5_000, 5)
    _, mean, var = _logistic_truth(data)
    anchor = cv.find_anchor(post, {"w": jnp.zeros(5)}, jax.random.PRNGKey(0), data, _batch, 32, 1_000, 0.05)
    key = jax.random.PRNGKey(2)
    for name, alg in {"sgld": l2e.sgld(post, 0.1), "sghmc": l2e.sghmc(post, 0.05, 10.0)}.items():
        _, avg, se = _ratio(_chains(alg, anchor.position, data, 32, 10_000, 8, key, 2_000), mean, var)
        assert avg - 3 * se > BAND[1], (name, avg, se)
    for name, alg in _cv_pair(post, anchor, 0.1, 0.05, 10.0).items():
        _in_band(_chains(alg, anchor.position, data, 32, 10_000, 8, key, 2_000), mean, var, name)



@pytest.mark.slow
def test_card_noise_cancels_exactly():
    """The sampler card's noise ξ does not depend on θ, so on the card the CV estimate is the exact gradient: the
    registry's card builders of sgld_cv / sghmc_cv at ν = 0.5 give the rows of SGLD / SGHMC at ν = 0 (same keys) on
    the 10-D Gaussian, to a relative 1e-3 (per-step rounding ≈ 1e-6 relative, not amplified: the Gaussian chain
    contracts by 1 − ε·h per step, ε·h ≥ 0.01); every card target runs finite."""
    from evaluate.card import CardConfig, default_targets, gaussian_target, hand_designed, run_sampler

    builders = hand_designed()
    noisy, exact = CardConfig(num_steps=2_000, burn_in=500), CardConfig(num_steps=2_000, burn_in=500, noise=0.0)
    target = gaussian_target("gaussian-10d", np.ones(10))
    for name, plain in (("sgld_cv", "sgld"), ("sghmc_cv", "sghmc")):
        got = run_sampler(name, builders[name], target, noisy, 0)
        want = run_sampler(plain, builders[plain], target, exact, 0)
        for key in ("mean_error", "var_ratio_median", "t_conf") + (("t_kin",) if plain == "sghmc" else ()):
            assert got[key] == pytest.approx(want[key], rel=1e-3), (name, key)
        short = CardConfig(num_steps=200, burn_in=50)
        assert all(run_sampler(name, builders[name], t, short, 0)["diverged_chains"] == 0 for t in default_targets())


# ----------------------------------------------------------------------------- the evaluation methods


def _tiny(name, **kw):
    from conftest import iris_mlp, tiny_eval_config

    return tiny_eval_config(iris_mlp(8), (name,), {}, **kw)


def test_methods_registered_with_settings():
    """sgld_cv / sghmc_cv are registered methods (the presets that run every method run them), tuned over SGLD's
    grid and SGHMC's learning rates × frictions {10, 100}; a bad anchor setting is one ConfigError."""
    from evaluate.config import ConfigError, apply_overrides, get_preset
    from evaluate.methods import METHODS, REGISTRY

    for name in ("sgld_cv", "sghmc_cv"):
        assert name in METHODS and REGISTRY[name].tuned and REGISTRY[name].batch_chains
        assert name in get_preset("full").methods
    assert REGISTRY["sgld_cv"].preset_grid("every") == REGISTRY["sgld"].preset_grid("every")
    grid = REGISTRY["sghmc_cv"].preset_grid("every")  # SGHMC's learning rates; frictions up to 100 (docs/samplers.md)
    assert grid == {"lrs": REGISTRY["sghmc"].preset_grid("every")["lrs"], "frictions": (10.0, 100.0)}
    assert REGISTRY["sghmc_cv"].kinetic_check and not REGISTRY["sgld_cv"].kinetic_check
    cfg = apply_overrides(get_preset("smoke"), ["methods=sgld_cv", "settings.sgld_cv.anchor_fraction=0.5"])
    assert cfg.settings.sgld_cv.anchor_fraction == 0.5
    for bad in ("anchor_fraction=1", "anchor_momentum=-0.1", "lrs=0"):
        with pytest.raises(ConfigError, match="settings.sgld_cv"):
            apply_overrides(cfg, [f"settings.sgld_cv.{bad}"])


def test_gradient_count_holds_the_anchor():
    """Every gradient is counted in the budget: S SGD updates + F = ⌈n/B⌉ for the full-data pass + 2 per update of
    the chain = G exactly (iris, n = 96, B = 16: F = 6), per chain of a chain allocation too; below F + 2K the run is
    overspent and says so (grad_evals counts what ran)."""
    from evaluate.methods import run_method
    from tasks import build

    cfg = _tiny("sghmc_cv")
    task = build(cfg.tasks[0])
    n = int(task.train_data[0].shape[0])
    hp = {"learning_rate": 0.03, "friction": 10.0}
    for g, chains in ((40, 1), (80, 2)):
        res = run_method("sghmc_cv", task, jax.random.PRNGKey(0), hp, _tiny("sghmc_cv", num_steps=g, chains=chains))
        split = res.hyperparameters["gradients"]  # the first chain's
        assert res.grad_evals == g and split["total"] == g // chains and not split["over_budget"]
        assert split["full_gradient"] == math.ceil(n / 16) == 6
        share = round(0.25 * (g // chains - 6))  # S: a quarter of what F leaves, plus the odd gradient the halving left
        assert split["anchor_sgd"] in (share, share + 1) and split["anchor_sgd"] + 6 + split["sampling"] == g // chains
        assert split["sampling"] == 2 * res.hyperparameters["sampling_steps"] and res.num_finite == 4
        assert res.t_kin is not None and len(res.t_kin) == chains
    res = run_method("sghmc_cv", task, jax.random.PRNGKey(0), hp, _tiny("sghmc_cv", num_steps=12))
    split = res.hyperparameters["gradients"]
    assert split["over_budget"] and res.grad_evals == split["total"] == 2 + 6 + 2 * 4 > 12


@pytest.mark.parametrize("name", ["sgld_cv", "sghmc_cv"])
def test_runner_is_the_l2e_chain(name):
    """run_method keeps the states of an l2e chain from l2e.control_variates.find_anchor (the init key's parameters,
    the first half of split(chain key) for the SGD minibatches, S updates at the tuned lr, momentum 0.9, the
    full-data pass in chunks of FULL_CHUNK) and the factory's sampler (the second half of the split), at the
    planned sample steps: the same numbers."""
    from evaluate.methods import run_method
    from evaluate.methods.control_variates import FULL_CHUNK, cv_plan
    from l2e.chains import ChainSchedule, make_chunk, run_chain
    from tasks import build

    cfg = _tiny(name, num_steps=60)
    task = build(cfg.tasks[0])
    hp = {"learning_rate": 0.03} if name == "sgld_cv" else {"learning_rate": 0.03, "friction": 10.0}
    init_key, chain_key = jax.random.split(jax.random.PRNGKey(3))
    res = run_method(name, task, (init_key, chain_key), hp, cfg)
    plan = cv_plan(60, 4, int(task.train_data[0].shape[0]), 16, 0.25)
    anchor_key, sample_key = jax.random.split(chain_key)
    anchor = cv.find_anchor(task.posterior, task.init_params(init_key), anchor_key, task.train_data, task.sample_batch,
                            16, plan.anchor_steps, 0.03, 0.9, chunk_size=FULL_CHUNK, chunk=cfg.chunk)
    alg = getattr(l2e, name)(task.posterior, anchor=anchor, **hp)
    schedule = ChainSchedule(plan.steps, 4, plan.thinning, 16, cfg.chunk)
    chunk = jax.jit(make_chunk(lambda k, s, b, a: alg.step(k, s, b), task.sample_batch, 16, schedule.chunk_length))
    direct = run_chain(chunk, alg.init(anchor.position), sample_key, task.train_data, None, schedule)
    assert res.num_finite == 4 and res.grad_evals == 60
    for a, b in zip(jax.tree.leaves(res.samples), jax.tree.leaves(direct.samples)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------- batched chains (issue 38, item 4)
SAMPLE_ATOL = 1e-5
"""|batched − one at a time| on every kept parameter (iris MLP-8, parameters of order 1): the batched path runs the
same keys, starts, minibatches and noise, the anchor's SGD and full pass and the chain as vmapped programs, whose
float32 sums may be ordered differently. Measured at most 1.8e-7 (a few float32 ulps; sgld_cv and sghmc_cv, M = 1
and 3, run_many with and without padding, run_method's ChainBatch path); the bound, 1e-5 (tests/test_batch.py's),
is 55× that; a chain paired with another's keys, start or learning rate differs by O(0.1)."""
HP = {"sgld_cv": {"learning_rate": 0.03}, "sghmc_cv": {"learning_rate": 0.03, "friction": 10.0}}


def _same(seq, bat):
    """Each batched result is its one-at-a-time result: structure, gradients, divergence, record, samples, T_kin."""
    assert len(bat) == len(seq)
    for a, b in zip(seq, bat):
        assert (b.num_chains, b.draws_per_chain, b.grad_evals, b.divergent_chains, b.num_finite) == (
            a.num_chains, a.draws_per_chain, a.grad_evals, a.divergent_chains, a.num_finite)
        np.testing.assert_array_equal(b.chain_ids, a.chain_ids)
        assert b.hyperparameters == a.hyperparameters
        for x, y in zip(jax.tree.leaves(a.samples), jax.tree.leaves(b.samples)):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=0, atol=SAMPLE_ATOL)
        if a.t_kin is not None:
            assert [t is None for t in b.t_kin] == [t is None for t in a.t_kin]
            np.testing.assert_allclose([t for t in b.t_kin if t is not None], [t for t in a.t_kin if t is not None],
                                       rtol=1e-3)


@pytest.mark.parametrize("chains", (1, 3))
@pytest.mark.parametrize("name", ["sgld_cv", "sghmc_cv"])
def test_batched_chains_equal_one_at_a_time(name, chains):
    """Two seeds' runs (each M chains of G/M = 60 gradients: S = 14 SGD updates, F = 6, 20 CV updates) batched —
    registry.run_many in batches of a width that needs padding (M = 1: 2 chains in a batch of 3; M = 3: 6 chains in
    batches of 4), M = 1: run_many in one program of 2, M = 3: run_method's ChainBatch (one program of 3) — give the
    one-at-a-time runs within SAMPLE_ATOL, with the same gradient count S + F + 2s = G, record, divergence and
    T_kin."""
    from evaluate.methods import run_many, run_method
    from tasks import build

    kw = dict(num_steps=60 * chains, num_samples=4 if chains == 1 else 6, chains=chains)
    never, always = _tiny(name, batch_chains="never", **kw), _tiny(name, batch_chains="always", **kw)
    task = build(never.tasks[0])
    jobs = [(jax.random.PRNGKey(seed), HP[name]) for seed in (0, 1)]
    seq = [run_method(name, task, key, hp, never) for key, hp in jobs]
    assert all(r.grad_evals == 60 * chains and r.num_chains == chains for r in seq)
    _same(seq, run_many(name, task, jobs, always, width=3 if chains == 1 else 4))
    if chains == 1:
        _same(seq, run_many(name, task, jobs, always))
    else:
        _same(seq, [run_method(name, task, key, hp, always) for key, hp in jobs])
    firsts = [np.asarray(jax.tree.leaves(r.samples)[0]) for r in seq]  # the seeds are distinct runs
    assert np.max(np.abs(firsts[0] - firsts[1])) > 1e-3


def test_run_many_runs_one_program_per_chunk():
    """registry.run_many("sghmc_cv") with 4 jobs (2 seeds × 2 frictions) runs every compiled program — the anchor's
    SGD chunk, the full-data pass, the CV chunk — vmapped over all 4 chains: each called once to compile (warm-up)
    plus once per chunk of one chain, every call carrying the 4 chains; no one-chain chunk is built (a Python loop over
    the jobs would call each program 4 times as often, on one chain)."""
    from collections import defaultdict

    from evaluate.methods import CompileCache, run_many
    from evaluate.methods.control_variates import cv_plan
    from l2e.chains import ChainSchedule
    from tasks import build

    class Counting(CompileCache):
        def __init__(self):
            super().__init__()
            self.calls, self.widths = defaultdict(int), defaultdict(set)

        def get(self, key, build_fn):
            if key not in self._values and key[0] in ("chunk", "cv_full_grad"):
                fn = build_fn()
                if callable(fn):
                    def counted(*a, _key=key, _fn=fn):
                        self.calls[_key] += 1
                        self.widths[_key].add(int(np.shape(a[1] if _key[0] == "chunk" else
                                                           jax.tree.leaves(a[0])[0])[0]))
                        return _fn(*a)

                    fn = counted
                self._values[key] = fn
            return super().get(key, build_fn)

    cfg = _tiny("sghmc_cv", num_steps=60, batch_chains="always")
    task = build(cfg.tasks[0])
    jobs = [(jax.random.PRNGKey(seed), {"learning_rate": 0.03, "friction": c}) for seed in (0, 1) for c in (3.0, 10.0)]
    cache = Counting()
    results = run_many("sghmc_cv", task, jobs, cfg, cache=cache)
    assert [r.grad_evals for r in results] == [60] * 4 and all(r.num_finite == 4 for r in results)
    plan = cv_plan(60, 4, int(task.train_data[0].shape[0]), 16, 0.25)
    sgd = ChainSchedule(plan.anchor_steps, 1, plan.anchor_steps, 16, cfg.chunk).chunk_length
    chain = ChainSchedule(plan.steps, 4, plan.thinning, 16, cfg.chunk).chunk_length
    assert plan.anchor_steps > 0
    programs = {key[1][0] if key[0] == "chunk" else key[0]: key for key in cache.calls}
    assert set(programs) == {"cv_anchor_sgd", "sghmc_cv", "cv_full_grad"}, list(cache.calls)
    assert all("batched" in key for key in cache.calls)
    assert cache.calls[programs["cv_anchor_sgd"]] == 1 + plan.anchor_steps // sgd
    assert cache.calls[programs["sghmc_cv"]] == 1 + plan.steps // chain
    assert cache.calls[programs["cv_full_grad"]] == 2
    assert all(widths == {4} for widths in cache.widths.values()), dict(cache.widths)


def test_divergent_chains_detected_in_a_batch():
    """A job whose learning rate blows its chains up (lr 10⁴: the anchor's SGD diverges), batched with a sound one
    (registry.run_many, M = 2): its chains are counted divergent and their samples left out, as one at a time; the
    sound job's chains are untouched (same numbers)."""
    from evaluate.methods import run_many, run_method
    from tasks import build

    kw = dict(num_steps=120, chains=2)
    never, always = _tiny("sghmc_cv", batch_chains="never", **kw), _tiny("sghmc_cv", batch_chains="always", **kw)
    task = build(never.tasks[0])
    jobs = [(jax.random.PRNGKey(0), HP["sghmc_cv"]), (jax.random.PRNGKey(1), {"learning_rate": 1e4, "friction": 10.0})]
    seq = [run_method("sghmc_cv", task, key, hp, never) for key, hp in jobs]
    bat = run_many("sghmc_cv", task, jobs, always)
    assert (seq[0].divergent_chains, seq[0].num_finite) == (0, 4)
    assert (seq[1].divergent_chains, seq[1].num_finite) == (2, 0) and seq[1].t_kin == [None, None]
    _same(seq, bat)
