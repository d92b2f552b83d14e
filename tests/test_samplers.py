"""Correctness of the samplers: L2E reduces to SGHMC, hand-designed kernels recover a Gaussian's moments."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.l2e import build_kernel
from l2e.types import Posterior

DIM, N = 10, 100
MU = jnp.linspace(-2.0, 2.0, DIM)
SD = jnp.linspace(0.5, 1.5, DIM)


def gaussian_posterior(grad_noise: float = 0.5) -> Posterior:
    """Target N(MU, diag(SD²)) written as N × mean NLL; the minibatch adds zero-mean gradient noise."""

    def nll(theta, batch):
        return (0.5 * jnp.sum((theta - MU) ** 2 / SD**2) + grad_noise * jnp.dot(batch, theta)) / N

    return Posterior(nll, lambda theta: jnp.zeros(()), N)


def noise_batch(key, data, batch_size):
    return jax.random.normal(key, (DIM,))


def run_many(sampler, num_chains=64, num_steps=3000, burn=1000):
    """Moments pooled over independent chains and the post-burn-in steps."""

    def chain(key):
        def body(state, k):
            kb, ks = jax.random.split(k)
            state, _ = sampler.step(ks, state, noise_batch(kb, None, 0))
            return state, state.position

        _, xs = jax.lax.scan(body, sampler.init(jnp.zeros(DIM)), jax.random.split(key, num_steps))
        return xs[burn:]

    xs = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(0), num_chains)).reshape(-1, DIM)
    return np.asarray(xs.mean(0)), np.asarray(xs.var(0))


def assert_moments(mean, var, mean_tol=0.1, var_rtol=0.15):
    """Mean within mean_tol·SD of MU, variance within var_rtol (relative) of SD²."""
    np.testing.assert_array_less(np.abs(mean - np.asarray(MU)) / np.asarray(SD), mean_tol)
    np.testing.assert_array_less(np.abs(var / np.asarray(SD) ** 2 - 1.0), var_rtol)


def test_sgld_recovers_gaussian_moments():
    mean, var = run_many(l2e.sgld(gaussian_posterior(), learning_rate=2.0), num_steps=5000)  # ε = 0.02
    assert_moments(mean, var)


def test_sghmc_recovers_gaussian_moments():
    # ε = sqrt(lr/N) = 0.05, C = 1
    mean, var = run_many(l2e.sghmc(gaussian_posterior(), learning_rate=0.25, friction=1.0))
    assert_moments(mean, var)


def test_sghmc_wrong_temperature_is_detected():
    """The moment check can fail: T = 2 doubles the variance."""
    _, var = run_many(l2e.sghmc(gaussian_posterior(), learning_rate=0.25, friction=1.0, temperature=2.0))
    assert np.all(var / np.asarray(SD) ** 2 > 1.6)


def test_cyclical_sghmc_sampling_phase_has_noise_exploration_none():
    post = gaussian_posterior(grad_noise=0.0)
    s = l2e.cyclical_sghmc(post, learning_rate=0.5, num_steps=100, num_cycles=2, exploration_ratio=0.5,
                           momentum_decay=0.5)
    # exploration (no noise, no grad noise): deterministic, independent of the key
    st = s.init(jnp.zeros(DIM))
    (a, info_a), (b, _) = (s.step(jax.random.PRNGKey(k), st, jnp.zeros(DIM)) for k in (1, 2))
    np.testing.assert_array_equal(a.position, b.position)
    assert not bool(info_a.sampling) and float(info_a.learning_rate) == pytest.approx(0.5)
    # sampling phase (k = 30 of a 50-step cycle): the key matters
    st = st._replace(step=jnp.asarray(30))
    (a, info_a), (b, _) = (s.step(jax.random.PRNGKey(k), st, jnp.zeros(DIM)) for k in (1, 2))
    assert not np.allclose(a.position, b.position)
    assert bool(info_a.sampling)
    lr0, sampling0 = l2e.cyclical_sghmc.cyclical_schedule(0, 0.5, 100, 2, 0.5)
    lr_end, sampling_end = l2e.cyclical_sghmc.cyclical_schedule(49, 0.5, 100, 2, 0.5)
    assert float(lr0) == pytest.approx(0.5) and not bool(sampling0)
    assert float(lr_end) < 0.01 and bool(sampling_end)


def test_l2e_with_sghmc_meta_model_equals_sghmc_step():
    """α ≡ 0, β(θ, r) = r substituted for the MLP: one L2E step is one SGHMC step."""
    post = gaussian_posterior()
    cfg = l2e.L2EConfig(learning_rate=0.25, friction=0.3, temperature=0.7)

    def sghmc_meta_fn(meta_params, grad, position, momentum, averages):
        return jax.tree.map(jnp.zeros_like, momentum), momentum

    kernel = build_kernel(post, cfg, meta_fn=sghmc_meta_fn)
    ref = l2e.sghmc(post, learning_rate=0.25, friction=0.3, temperature=0.7)
    theta0 = jax.random.normal(jax.random.PRNGKey(3), (DIM,))
    st_l2e = l2e.l2e.init(theta0)
    st_ref = ref.init(theta0)
    for i in range(5):  # several steps so the momentum is non-zero
        key, batch = jax.random.PRNGKey(10 + i), jax.random.normal(jax.random.PRNGKey(20 + i), (DIM,))
        st_l2e, info_l2e = kernel(key, st_l2e, batch, None)
        st_ref, info_ref = ref.step(key, st_ref, batch)
        np.testing.assert_allclose(st_l2e.position, st_ref.position, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(st_l2e.momentum, st_ref.momentum, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(info_l2e.kinetic, info_ref.kinetic, rtol=1e-5)  # Σ r'·β = Σ r'² for β = r
        assert float(info_l2e.loss) == pytest.approx(float(info_ref.loss), rel=1e-5)


def test_l2e_step_with_mlp_is_finite_and_updates_averages():
    post = gaussian_posterior()
    phi = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))
    s = l2e.l2e(post, phi, l2e.L2EConfig(learning_rate=0.25))
    st = s.init({"w": jnp.ones((3, 4)), "b": jnp.zeros(4)})
    assert st.averages["w"].shape == (6, 3, 4)
    post2 = Posterior(lambda p, b: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"]), lambda p: jnp.zeros(()), N)
    s = l2e.l2e(post2, phi, l2e.L2EConfig(learning_rate=0.25))
    st2, info = jax.jit(s.step)(jax.random.PRNGKey(0), st, None)
    assert bool(info.is_finite) and float(info.loss) == pytest.approx(12.0)
    g = 2.0 * jnp.ones((3, 4))
    np.testing.assert_allclose(st2.averages["w"][:, 0, 0], (1 - np.asarray(l2e.meta_model.DECAYS)) * 2.0, rtol=1e-3)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(st2))
    assert not np.allclose(st2.position["w"], 1.0)
    del g


def test_features_order_shape_and_normalisation():
    k = jax.random.split(jax.random.PRNGKey(0), 8)
    shapes = {"a": (3, 4), "b": (5,)}
    g = {n: jax.random.normal(k[0], s) for n, s in shapes.items()}
    x = {n: 3.0 * jax.random.normal(k[1], s) for n, s in shapes.items()}
    r = {n: 10.0 * jax.random.normal(k[2], s) for n, s in shapes.items()}
    m = {n: jax.random.normal(k[3], (6,) + s) * jnp.arange(1, 7).reshape((6,) + (1,) * len(s))
         for n, s in shapes.items()}
    f = l2e.meta_model.features(g, x, r, m)
    assert f.shape == (17, 9)
    names = l2e.meta_model.FEATURE_NAMES
    assert names[:3] == ("grad", "position", "momentum") and len(names) == 9

    def norm(v):
        v = np.asarray(v).ravel()
        return v / np.sqrt(1e-5 + np.mean(v**2))

    for row0, name in ((0, "a"), (12, "b")):  # leaves in jax.tree order: "a" then "b"
        n = int(np.prod(shapes[name]))
        blk = np.asarray(f[row0:row0 + n])
        np.testing.assert_allclose(blk[:, 0], norm(g[name]), rtol=1e-5)
        np.testing.assert_allclose(blk[:, 1], norm(x[name]), rtol=1e-5)
        np.testing.assert_allclose(blk[:, 2], norm(r[name]), rtol=1e-5)
        for j in range(6):
            np.testing.assert_allclose(blk[:, 3 + j], norm(m[name][j]), rtol=1e-5)
        np.testing.assert_allclose(np.sqrt(np.mean(blk**2, axis=0)), 1.0, rtol=1e-4)


def test_meta_model_has_1442_parameters():
    phi = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))
    assert sum(x.size for x in jax.tree.leaves(phi)) == 1442


def test_run_chain_keeps_only_thinned_samples_and_is_chunk_invariant():
    post = gaussian_posterior()
    s = l2e.sghmc(post, learning_rate=0.25, friction=1.0)
    kern = lambda key, st, b, args: s.step(key, st, b)  # noqa: E731
    outs = []
    for chunk in (1, 5):
        sched = ChainSchedule(num_steps=40, num_samples=3, thinning=10, batch_size=1, chunk=chunk)
        fn = jax.jit(make_chunk(kern, noise_batch, 1, sched.chunk_length))
        res = run_chain(fn, s.init(jnp.zeros(DIM)), jax.random.PRNGKey(0), None, None, sched)
        samples = res.samples
        assert samples.shape == (3, DIM) and int(res.state.step) == 40
        assert res.info.loss.shape == (40,) and res.info.kinetic.shape == (40,) and bool(np.all(res.info.is_finite))
        outs.append(np.asarray(samples))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    assert ChainSchedule(40, 3, 10).sample_steps == (20, 30, 40)


@pytest.mark.parametrize("kw", [dict(learning_rate=0.0), dict(learning_rate=-1.0), dict(friction=0.0)])
def test_bad_hyperparameters_raise(kw):
    args = dict(learning_rate=0.1, friction=0.1) | kw
    with pytest.raises(ValueError, match="must be a positive"):
        l2e.sghmc(gaussian_posterior(), **args)


@pytest.mark.slow
def test_fused_l2e_step_equals_generic_two_pass_step():
    """The default (fused) kernel and the generic kernel with the MLP meta_fn give the same chain."""
    from l2e.l2e import mlp_meta_fn
    from tasks import ModelSpec, TaskSpec, build_task

    task = build_task(TaskSpec("digits", ModelSpec("cnn", channels=4, depth=2, residual=True), max_train=300))
    cfg = l2e.L2EConfig(learning_rate=0.5, alpha_scale=0.3, beta_scale=0.2, temperature=0.5)
    phi = l2e.meta_model.init_meta_params(jax.random.PRNGKey(4))
    fused = jax.jit(build_kernel(task.posterior, cfg))
    generic = jax.jit(build_kernel(task.posterior, cfg, meta_fn=mlp_meta_fn(cfg.alpha_scale, cfg.beta_scale)))
    sa = sb = l2e.l2e(task.posterior, phi, cfg).init(task.init_params(jax.random.PRNGKey(0)))
    for i in range(4):
        batch = task.sample_batch(jax.random.PRNGKey(100 + i), task.train_data, 32)
        sa, ia = fused(jax.random.PRNGKey(i), sa, batch, phi)
        sb, ib = generic(jax.random.PRNGKey(i), sb, batch, phi)
        assert float(ia.loss) == pytest.approx(float(ib.loss), rel=1e-5)
        # the fused step's kinetic uses β as applied, (θ' − θ)/ε: equal up to the rounding of θ'
        np.testing.assert_allclose(ia.kinetic, ib.kinetic, rtol=1e-3)
    for a, b in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree.leaves(sa.position), jax.tree.leaves(task.init_params(jax.random.PRNGKey(0)))))
    assert moved > 1e-3


# ------------------------------------------------------------------------------ interface: infos, kernels, checks


def _minibatch_samplers(post):
    phi = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))
    return {
        "sgld": l2e.sgld(post, 2.0), "sghmc": l2e.sghmc(post, 0.25, 1.0), "psgld": l2e.psgld(post, 0.3),
        "csghmc": l2e.cyclical_sghmc(post, 0.5, num_steps=20, num_cycles=2, exploration_ratio=0.0),
        "sgnht": l2e.sgnht(post, 0.25, 1.0), "l2e": l2e.l2e(post, phi, l2e.L2EConfig(learning_rate=0.25)),
    }


@pytest.mark.parametrize("name", ["sgld", "sghmc", "psgld", "csghmc", "sgnht", "l2e"])
def test_step_returns_state_and_info(name):
    """step -> (state, info): loss is the mean minibatch NLL at the pre-update position, is_finite is True on a
    finite step and False once the position is NaN; momentum methods report kinetic."""
    post = gaussian_posterior()
    s = _minibatch_samplers(post)[name]
    theta0 = jnp.linspace(-1.0, 1.0, DIM)
    batch = jax.random.normal(jax.random.PRNGKey(1), (DIM,))
    st, info = jax.jit(s.step)(jax.random.PRNGKey(2), s.init(theta0), batch)
    assert float(info.loss) == pytest.approx(float(post.nll(theta0, batch)), rel=1e-6)
    assert info.loss.shape == () and info.is_finite.dtype == bool and bool(info.is_finite)
    if name in ("sghmc", "sgnht"):
        np.testing.assert_allclose(info.kinetic, jnp.sum(st.momentum**2), rtol=1e-6)
    bad = st._replace(position=st.position.at[0].set(jnp.nan))
    assert not bool(jax.jit(s.step)(jax.random.PRNGKey(3), bad, batch)[1].is_finite)


def test_kernels_take_traced_hyperparameters():
    """build_kernel's hyperparameters are call arguments: a jitted kernel with a traced learning rate and friction
    gives the factory's chain bit for bit (one compilation serves a tuning grid)."""
    post = gaussian_posterior()
    kernel = jax.jit(l2e.sghmc.build_kernel(post))
    ref = l2e.sghmc(post, 0.25, 0.3)
    sa = sb = ref.init(jnp.ones(DIM))
    for i in range(3):
        batch = jax.random.normal(jax.random.PRNGKey(i), (DIM,))
        sa, _ = kernel(jax.random.PRNGKey(10 + i), sa, batch, jnp.float32(0.25), jnp.float32(0.3))
        sb, _ = jax.jit(ref.step)(jax.random.PRNGKey(10 + i), sb, batch)
    np.testing.assert_array_equal(sa.position, sb.position)
    cyc = jax.jit(l2e.cyclical_sghmc.build_kernel(post, num_steps=10, num_cycles=2))
    st, info = cyc(jax.random.PRNGKey(0), l2e.cyclical_sghmc.init(jnp.ones(DIM)), jnp.zeros(DIM), jnp.float32(0.5))
    assert float(info.learning_rate) == pytest.approx(0.5)


def test_sampler_api_exposes_module():
    """l2e.<sampler>(...) is the factory; l2e.<sampler>.init / .build_kernel are its module's (the module, factory
    and kernel builder of its row in l2e.hand_designed, or its learned-sampler registry entry's) and every other
    module name is reachable through it — for every exported sampler (l2e.HAND_DESIGNED, LEARNED, FULL_BATCH)."""
    import importlib

    rows = {r.name: r for r in l2e.hand_designed.MINIBATCH + l2e.hand_designed.FULL_BATCH}
    assert set(rows) == set(l2e.HAND_DESIGNED + l2e.FULL_BATCH)
    for name in l2e.HAND_DESIGNED + l2e.LEARNED + l2e.FULL_BATCH:
        api = getattr(l2e, name)
        assert isinstance(api, l2e.SamplerAPI) and name in l2e.__all__, name
        if name in rows:
            module = importlib.import_module(f"l2e.{rows[name].module}")
            assert api.factory is getattr(module, rows[name].factory), name
            assert api.build_kernel is getattr(module, rows[name].kernel), name
        else:
            entry = l2e.learned.REGISTRY[name]
            module = importlib.import_module(entry.factory.__module__)
            assert api.factory is entry.factory and api.build_kernel is entry.build_kernel, name
        assert api.module is module and api.init is module.init, name
    assert {"sgld", "sghmc", "baoab", "precond_sghmc", "adaptive_sghmc", "warm_sghmc"} <= set(l2e.HAND_DESIGNED)
    assert {"mass", "transient", "step_scale", "l2e"} <= set(l2e.LEARNED)
    assert l2e.sghmc.SGHMCState is importlib.import_module("l2e.sghmc").SGHMCState
    assert l2e.nuts.nuts_chains is importlib.import_module("l2e.nuts").nuts_chains
    assert isinstance(l2e.sgnht(gaussian_posterior(), 0.1), l2e.SamplingAlgorithm)
    assert isinstance(l2e.mclmc(lambda x: -0.5 * jnp.sum(x**2), 3.0, 0.5), l2e.FullBatchAlgorithm)
    assert isinstance(l2e.nuts(lambda x: -0.5 * jnp.sum(x**2), 0.5, jnp.ones(DIM)), l2e.FullBatchAlgorithm)


def test_top_level_names():
    """The top level is the samplers, the types, chain running, checkpoint loading and the registry: every name of
    __all__ exists, and no sampler-specific helper that looks generic is exported."""
    assert all(hasattr(l2e, name) for name in l2e.__all__)
    assert callable(l2e.load_released) and l2e.learned.REGISTRY
    for name in ("build_kernel", "init", "init_meta_params", "features", "DECAYS", "FEATURE_NAMES", "MetaMLP",
                 "ess_geyer", "cyclical_schedule", "is_sampling_step", "rbf_kernel", "per_class_kernel",
                 "functional_posterior", "mclmc_sampler"):
        assert name not in l2e.__all__ and not hasattr(l2e, name), name
    assert callable(l2e.l2e.build_kernel) and callable(l2e.meta_model.init_meta_params)


def test_checks():
    from l2e.checks import check_in_range, check_positive

    jax.jit(lambda c: check_positive(c=c) or c)(-1.0)  # traced values are not checked (a tuning grid under jit)
    # what is not a number is refused, not passed over: bools, strings, None, arrays that are not 0-d (issue 40)
    for bad, what in ((False, "a bool"), ("0.1", "a str"), (None, "a NoneType"), (jnp.ones(3), r"an array of shape \(3,\)"),
                      (np.array([-0.1]), r"an array of shape \(1,\)")):
        with pytest.raises(ValueError, match=f"a must be a number \\(a scalar\\), got {what}"):
            check_positive(a=bad)
        with pytest.raises(ValueError, match="rho must be a number"):
            check_in_range("rho", bad, 0.0, 1.0)
    post = gaussian_posterior()
    for call in (lambda: l2e.baoab(post, False), lambda: l2e.warm_sghmc(post, np.array([-0.1])),
                 lambda: l2e.precond_sghmc(post, "0.1")):
        with pytest.raises(ValueError, match="learning_rate must be a number"):
            call()
    with pytest.raises(ValueError, match=r"mdecay must be in \(0.0, 1.0\]"):
        l2e.adaptive_sghmc(post, mdecay=3.0)
    for concrete in (np.float32(-1.0), jnp.float32(-1.0), np.int64(0)):  # numpy / JAX scalars are (issue 28)
        with pytest.raises(ValueError, match="c must be a positive finite number"):
            check_positive(c=concrete)
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="x must be a positive finite number"):
            check_positive(x=bad)
    check_in_range("rho", 1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"rho must be in \[0.0, 1.0\)"):
        check_in_range("rho", 1.0, 0.0, 1.0, include_high=False)
    with pytest.raises(ValueError, match="exploration_ratio"):
        l2e.cyclical_sghmc(gaussian_posterior(), 0.1, num_steps=10, exploration_ratio=1.0)
    with pytest.raises(ValueError, match="learning_rate"):
        l2e.L2EConfig(learning_rate=0.0)


def test_diffusion_updates_are_elementwise():
    """The shared one-step updates give the same numbers on a flat vector as leaf by leaf (the fused L2E step)."""
    from l2e import diffusions

    k = jax.random.split(jax.random.PRNGKey(0), 4)
    tree = {"a": jax.random.normal(k[0], (3, 2)), "b": jax.random.normal(k[1], (4,))}
    g = jax.tree.map(lambda x: 2.0 * x + 1.0, tree)
    z = jax.tree.map(lambda x: jnp.sin(x), tree)
    flat = lambda t: jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(t)])  # noqa: E731
    leafwise = jax.tree.map(lambda r, gi, zi: diffusions.sghmc_momentum(r, gi, zi, 0.1, 0.3, 0.05), tree, g, z)
    np.testing.assert_array_equal(flat(leafwise), diffusions.sghmc_momentum(flat(tree), flat(g), flat(z), 0.1, 0.3, 0.05))
    np.testing.assert_allclose(diffusions.sgd_momentum(tree["b"], g["b"], z["b"], 0.9, 0.01, 0.0),
                               0.9 * tree["b"] - 0.01 * g["b"], rtol=1e-6)


def test_make_chunk_refuses_a_bare_state():
    s = l2e.sghmc(gaussian_posterior(), 0.25)
    chunk = make_chunk(lambda key, st, b, args: s.step(key, st, b)[0], noise_batch, 1, 2)
    with pytest.raises(TypeError, match=r"must return \(state, info\)"):
        chunk(s.init(jnp.zeros(DIM)), jax.random.PRNGKey(0), 0, None, None)


def test_make_chunk_cycles_a_tuple_of_kernels():
    """A tuple of P kernels: update i of a chunk runs kernel i % P (here update t of the chain runs kernel t % 2, the
    chunks starting at multiples of their length); a length P does not divide is refused."""
    def kernel(tag):
        return lambda key, st, b, args: (st * 10 + tag, tag)

    chunk = make_chunk((kernel(1), kernel(2)), noise_batch, 1, 4)
    state, info = chunk(jnp.zeros(()), jax.random.PRNGKey(0), 4, None, None)
    assert float(state) == 1212.0 and np.asarray(info).tolist() == [1, 2, 1, 2]
    with pytest.raises(ValueError, match="cannot cycle through 2 kernels"):
        make_chunk((kernel(1), kernel(2)), noise_batch, 1, 3)


def test_device_data_cache():
    from l2e.devices import DeviceDataCache, member_device

    cache = DeviceDataCache(max_entries=2)
    a, b, c = jnp.ones(3), jnp.zeros(3), jnp.arange(3.0)
    dev = member_device(0)
    first = cache.put((a, b), dev)
    assert cache.put((a, b), dev) is first and len(cache) == 1
    cache.put(b, dev)
    cache.put(c, dev)
    assert len(cache) == 2 and cache.put((a, b), dev) is not first  # evicted (least recently used)
    assert member_device(len(jax.local_devices())) == member_device(0)


def test_learned_samplers_declare_their_protocol():
    """Capabilities are declared (l2e.types.Protocol), not guessed from config field names: a tuning-free sampler's
    config has no learning rate and a tuned one's has learning_rate and friction (what the evaluation and the card
    replace); a declared window fraction is read from the config; a sampler with phase kernels names them and its
    phase_of returns only those names; a sampler that freezes before sampling has a window rule."""
    import dataclasses

    from l2e.learned import REGISTRY

    for name, entry in REGISTRY.items():
        fields = {f.name for f in dataclasses.fields(entry.config)}
        config = entry.config()
        if entry.tuning_free:
            assert "learning_rate" not in fields, name
        else:
            assert {"learning_rate", "friction"} <= fields, name
        fraction = entry.window_fraction(config)
        assert fraction is None or 0 < fraction <= 1, name
        if entry.phase_of is not None:
            assert entry.protocol.phases, name
            frozen = entry.sampling_config(config, 40)
            seen = {entry.phase_of(frozen, start, 4) for start in range(0, 80, 4)}
            assert seen <= set(entry.protocol.phases) | {None} and len(seen - {None}) >= 2, (name, seen)
        if entry.window is not None:
            assert entry.sampling_config(config, 7) != config or "freeze_step" not in fields, name
    transient = REGISTRY["transient"]
    assert transient.tuning_free and transient.window_fraction(transient.config(window_fraction=0.75)) == 0.75
    assert transient.splits_minibatch(transient.config())
    assert not transient.splits_minibatch(transient.config(noise_halves=False))
    assert not REGISTRY["mass"].splits_minibatch(REGISTRY["mass"].config())
    assert not REGISTRY["mass"].tuning_free and REGISTRY["mass"].window is not None
