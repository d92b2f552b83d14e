"""Convergence diagnostics against known answers (AR(1) ESS, R̂ on shifted / drifting chains) and against the
trusted libraries they stand for: blackjax's and ArviZ's ESS and R̂ on the same test chains."""
import arviz as az
import blackjax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import diagnostics as dg


def ar1(phi, n, m=1, k=1, seed=0):
    """m chains of a stationary AR(1) x_t = φ x_{t−1} + sqrt(1−φ²) e_t, shape (m, n, k)."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((m, n, k))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    s = np.sqrt(1 - phi**2)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + s * e[:, t]
    return x


def _arviz(fn, x, **kw):
    """An ArviZ diagnostic per coordinate of x (m, n, k) -> (k,)."""
    return np.asarray(fn(az.convert_to_dataset(x), **kw)["x"].values, np.float64)


def _blackjax_single_chain_ess(x):
    """blackjax.diagnostics.effective_sample_size of one chain x (n, k), in float64."""
    with jax.enable_x64(True):
        return np.asarray(blackjax.diagnostics.effective_sample_size(jnp.asarray(x[None], jnp.float64), 0, 1))


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_ess_ar1_matches_theory(phi):
    """Mean over 20 coordinates of the single-chain ESS within 15 % of n(1−φ)/(1+φ)."""
    n = 20000
    x = ar1(phi, n, k=20)[0]
    theory = n * (1 - phi) / (1 + phi)
    ess = dg.ess_single_chain(x)
    assert abs(ess.mean() / theory - 1) < 0.15
    # MILE's phase III runs the same estimator in-graph in float32
    np.testing.assert_allclose(np.asarray(l2e.mclmc.ess_geyer(jnp.asarray(x, jnp.float32))), ess, rtol=2e-2)


def _spec_ess(x):
    """METRICS §3 single-chain ESS of one coordinate x (n,), written out term by term."""
    n = len(x)
    xc = x - x.mean()
    gamma = np.array([np.sum(xc[:n - t] * xc[t:]) / n for t in range(n)])
    rho = gamma / gamma[0]
    pairs, prev = [], np.inf
    for k in range(n // 2):
        p = rho[2 * k] + rho[2 * k + 1]
        if p < 0:  # initial positive sequence
            break
        prev = min(prev, p)  # initial monotone sequence
        pairs.append(prev)
    tau = max(-1.0 + 2.0 * sum(pairs), 1.0 / np.log10(n))
    return n / tau


@pytest.mark.parametrize("n", [4, 7, 10, 64])
def test_ess_single_chain_is_the_spec_definition(n):
    x = ar1(0.6, n, k=30, seed=n)[0]
    x[:, 0] = np.arange(n) % 2  # an alternating coordinate: negative lag-1 autocorrelation
    want = np.array([_spec_ess(x[:, j]) for j in range(x.shape[1])])
    np.testing.assert_allclose(dg.ess_single_chain(x), want, rtol=1e-12)
    assert dg.ess_single_chain(x.reshape(n, 3, 10)).shape == (3, 10)
    np.testing.assert_allclose(dg.ess_single_chain(np.ones((n, 2))), min(n, n * np.log10(n)))  # constant: τ̂ = 1


@pytest.mark.slow
def test_single_chain_ess_versus_blackjax_and_arviz():
    """blackjax / ArviZ single-chain ESS agree with ours on long chains but not on the 10-draw chains evaluate
    reports (their ρ̂_t = γ̂_t/γ̂_0 − 1/(n−1) and extra τ̂ term; see ess_single_chain), hence our own."""
    long = ar1(0.5, 4000, k=50, seed=1)[0]
    ours = dg.ess_single_chain(long)
    np.testing.assert_allclose(_blackjax_single_chain_ess(long), ours, rtol=0.01)  # observed 0.35 %
    np.testing.assert_allclose(_arviz(az.ess, long[None], method="identity"), ours, rtol=0.01)
    short = ar1(0.5, 10, k=200, seed=1)[0]
    rel = np.abs(_blackjax_single_chain_ess(short) / dg.ess_single_chain(short) - 1)
    assert rel.max() > 0.3  # 0.64 on these chains (mean 0.15)


@pytest.mark.slow
def test_ess_iid_and_bulk_against_arviz():
    x = np.random.default_rng(1).standard_normal((4, 2000, 10))
    np.testing.assert_allclose(dg.ess_single_chain(x[0]).mean(), 2000, rtol=0.1)
    np.testing.assert_allclose(dg.ess_bulk(x).mean(), 8000, rtol=0.1)
    y = ar1(0.8, 4000, m=4, k=5, seed=2)
    theory = 4 * 4000 * 0.2 / 1.8
    bulk = dg.ess_bulk(y)
    assert bulk.shape == (5,) and abs(bulk.mean() / theory - 1) < 0.15
    np.testing.assert_allclose(bulk, _arviz(az.ess, y, method="bulk"), rtol=1e-6)  # observed 7e-16
    assert dg.ess_bulk(y[:1]).shape == (5,)  # one chain: its two halves


def test_rhat_equals_arviz_and_the_spec_formula():
    y = ar1(0.9, 400, m=4, k=6, seed=4) + np.arange(4.0)[:, None, None] * 0.3
    # split R̂ with an even number of draws: ArviZ's "split" (raw) and "z_scale" (rank-normalised) methods
    np.testing.assert_allclose(dg.split_rhat(y, rank=False), _arviz(az.rhat, y, method="split"), rtol=1e-12)
    np.testing.assert_allclose(dg.split_rhat(y), _arviz(az.rhat, y, method="z_scale"), rtol=1e-12)
    # chainwise cR̂: the spec's formula on the k rank-normalised contiguous sub-chains, by hand
    x = y[0, :399]  # 399 draws, 4 sub-chains of 99 (the last 3 draws dropped)
    z = dg.rank_normalize(x[:396].reshape(4, 99, 6))
    n = 99
    w = np.mean(np.var(z, axis=1, ddof=1), axis=0)
    b_over_n = np.var(np.mean(z, axis=1), axis=0, ddof=1)
    np.testing.assert_allclose(dg.chainwise_rhat(x, 4), np.sqrt(((n - 1) / n * w + b_over_n) / w), rtol=1e-12)
    assert dg.chainwise_rhat(x[:, :1], 4).shape == (1,) and dg.split_rhat(y[..., 0]).shape == ()


def test_rhat_detects_shifted_chains():
    x = np.random.default_rng(3).standard_normal((4, 1000, 5))
    assert np.all(np.abs(dg.split_rhat(x) - 1) < 0.01)
    assert np.all(np.abs(dg.split_rhat(x, rank=False) - 1) < 0.01)
    shifted = x + np.arange(4)[:, None, None] * 1.0
    assert np.all(dg.split_rhat(shifted) > 1.1)
    # chainwise: a well-mixed chain passes, a chain drifting between sub-chains fails
    assert np.all(dg.chainwise_rhat(x[0]) < 1.02)
    drift = x[0] + np.repeat(np.arange(4.0), 250)[:, None]
    assert np.all(dg.chainwise_rhat(drift) > 1.1)
    fr = dg.rhat_fraction_per_leaf({"good": x, "bad": x + np.linspace(0, 3, 1000)[None, :, None]})
    assert fr["good"] == 1.0 and fr["bad"] == 0.0
    # a constant coordinate has no within-chain variance: NaN, counted as not converged
    const = np.concatenate([x[0], np.ones((1000, 1))], axis=1)
    r = dg.chainwise_rhat(const)
    assert np.isnan(r[-1]) and np.all(np.isfinite(r[:-1]))


# ----------------------------------------------------------------------------- ArviZ export of samples


def test_write_inference_data_round_trips(tmp_path):
    from evaluate.samples import write_inference_data

    rng = np.random.default_rng(0)
    k = 7
    samples = {"dense_0": {"kernel": rng.normal(size=(k, 3, 2)).astype(np.float32),
                           "bias": rng.normal(size=(k, 2)).astype(np.float32)},
               "head": [rng.normal(size=(k,))]}
    ids = np.array([3, 5, 3, 5, 3, 5, 3])  # two chains, round robin; chain 5 lost its last draw
    path = write_inference_data(tmp_path / "out" / "sghmc.nc", samples, ids, draws_per_chain=4,
                                sample_stats={"loss": np.arange(k)})
    assert path == tmp_path / "out" / "sghmc.nc" and not list(path.parent.glob(".*tmp"))
    idata = az.from_netcdf(path)
    post = idata.posterior
    assert post["chain"].values.tolist() == [3, 5] and post["draw"].values.tolist() == [0, 1, 2, 3]
    kernel = post["dense_0.kernel"].values
    assert kernel.shape == (2, 4, 3, 2) and kernel.dtype == np.float32
    np.testing.assert_array_equal(kernel[0], samples["dense_0"]["kernel"][[0, 2, 4, 6]])
    np.testing.assert_array_equal(kernel[1, :3], samples["dense_0"]["kernel"][[1, 3, 5]])
    assert np.all(np.isnan(kernel[1, 3]))
    np.testing.assert_array_equal(post["head.0"].values[0], samples["head"][0][[0, 2, 4, 6]])
    assert idata.sample_stats["loss"].values[1, :3].tolist() == [1, 3, 5]
    # ArviZ's own diagnostics run on the file (one number per kernel entry)
    assert az.ess(idata, var_names=["dense_0.kernel"])["dense_0.kernel"].shape == (3, 2)
    with pytest.raises(ValueError, match="more than draws_per_chain"):
        write_inference_data(tmp_path / "bad.nc", samples, ids, draws_per_chain=3)
    with pytest.raises(ValueError, match="leading axis of 6"):
        write_inference_data(tmp_path / "bad.nc", samples, ids[:6])
    with pytest.raises(ValueError, match="no samples"):
        write_inference_data(tmp_path / "bad.nc", jax.tree.map(lambda a: a[:0], samples), ids[:0])


def test_function_space_ess_of_the_report_entry():
    """evaluate.entries.ess_entry's function-space ESS: each test point's log p(y_i | x_i, θ) follows an AR(1)
    with ρ = 0.8 along each of 2 chains of 400 draws (the weights are i.i.d. draws, so the two spaces differ);
    fs_mean_ess must be within 25 % of the AR(1) value n(1 − ρ)/(1 + ρ) = 44.4 while the weight-space mean ESS
    is within 25 % of n = 400, and the per-cost numbers are the chains' sum ÷ seconds and per 1000 gradients."""
    from evaluate.entries import ess_entry, pointwise_functions
    from tasks.likelihoods import Classification
    from evaluate.methods import MethodResult

    rng = np.random.default_rng(0)
    chains, n, pts, rho = 2, 400, 200, 0.8
    z = np.empty((chains, n, pts))
    z[:, 0] = rng.standard_normal((chains, pts))
    for t in range(1, n):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((chains, pts))
    logits = np.stack([z, np.zeros_like(z)], axis=-1).reshape(chains * n, pts, 2)
    outputs = logits - np.logaddexp(logits[..., :1], logits[..., 1:])  # log-softmax; label 0 → its log-prob
    y = np.zeros(pts, np.int64)
    fx = pointwise_functions(type("T", (), {"likelihood": Classification()})(), outputs, y)
    np.testing.assert_allclose(fx, outputs[..., 0])
    res = MethodResult(outputs=outputs.astype(np.float32), grad_evals=8000, seconds=4.0, divergent_chains=0,
                       hyperparameters={}, samples={"w": rng.standard_normal((chains * n, 30))},
                       chain_ids=np.repeat(np.arange(chains), n), num_chains=chains, draws_per_chain=n)
    e = ess_entry(res, fx)
    theory = n * (1 - rho) / (1 + rho)
    assert abs(e["fs_mean_ess"] / theory - 1) < 0.25, e["fs_mean_ess"]
    assert abs(e["mean_ess"] / n - 1) < 0.25, e["mean_ess"]
    assert e["fs_ess_per_second"] == pytest.approx(chains * e["fs_mean_ess"] / 4.0)
    assert e["fs_ess_per_1k_grads"] == pytest.approx(1000 * chains * e["fs_mean_ess"] / 8000)
    assert "log predictive probability of the true label" in e["fs_function"]
    assert "fs_mean_ess" not in ess_entry(res)


def test_kinetic_temperature_windows_rows_and_sampling_phase():
    from l2e.chains import ChainSchedule

    sched = ChainSchedule(num_steps=10, num_samples=3, thinning=2, batch_size=1, chunk=1)  # samples after 6, 8, 10
    kinetic = np.arange(1.0, 11.0)
    assert float(dg.kinetic_temperature(kinetic, sched, 2)) == pytest.approx(np.mean(kinetic[5:]) / 2)
    assert float(dg.kinetic_temperature(kinetic, sched, 1, window="tail")) == pytest.approx(np.mean(kinetic[4:]))
    rows = dg.kinetic_temperature(np.stack([kinetic, 2 * kinetic, np.full(10, np.inf)]), sched, 1)
    np.testing.assert_allclose(rows[:2], [np.mean(kinetic[5:]), 2 * np.mean(kinetic[5:])])
    assert rows.shape == (3,) and np.isnan(rows[2])
    sampling = np.arange(10) % 2 == 0
    assert float(dg.kinetic_temperature(kinetic, sched, 1, sampling)) == pytest.approx(np.mean(kinetic[6::2]))


def test_configurational_temperature_of_exact_gaussian_draws():
    sig = jnp.asarray(np.logspace(-1, 1, 8), jnp.float32)
    grad_u = jax.grad(lambda x: 0.5 * jnp.sum((x / sig) ** 2))
    x = jax.random.normal(jax.random.PRNGKey(0), (20_000, 8)) * sig
    assert abs(dg.configurational_temperature(x, grad_u) - 1) < 0.03
    assert abs(dg.configurational_temperature(np.sqrt(0.3) * x, grad_u) - 0.3) < 0.01  # a cold sampler
    w = np.zeros(20_000)
    w[:10] = 1.0
    want = float(np.mean([float(dg.virial(t, grad_u)) for t in x[:10]]) / 8)
    assert dg.configurational_temperature(x, grad_u, w) == pytest.approx(want, rel=1e-5)


def test_euler_friction_reads_hot_while_theta_is_exact():
    """docs/sampling.md: SGHMC's Euler friction step holds the momentum at T/(1 − εC/2) while θ is sampled at T to
    O(ε²λ). On N(0, 1) with exact gradients, ε = 0.1, εC = 0.5, the update's stationary covariance (discrete Lyapunov
    equation) is Var θ = 1.0033, Var r = 1.3378; 64 chains × 20,000 updates (correlation time ≈ C/λ = 5 time units
    = 50 updates: ≈ 25,000 effective draws, s.e. of a variance ≈ 1 %) land within 5 % of both."""
    post = l2e.Posterior(lambda th, b: 0.5 * jnp.sum(th**2), lambda th: jnp.zeros(()), 1)
    alg = l2e.sghmc(post, learning_rate=0.01, friction=5.0)  # ε = sqrt(lr/N) = 0.1

    def chain(key):
        def body(st, k):
            st, info = alg.step(k, st, jnp.zeros((1, 1)))
            return st, (st.position[0], info.kinetic)

        _, (xs, kin) = jax.lax.scan(body, alg.init(jnp.zeros(1)), jax.random.split(key, 20_000))
        return xs[2_000:], kin[2_000:]

    xs, kin = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(0), 64))
    assert abs(float(jnp.var(xs)) / 1.0033 - 1.0) < 0.05, float(jnp.var(xs))
    assert abs(float(jnp.mean(kin)) / 1.3378 - 1.0) < 0.05, float(jnp.mean(kin))
