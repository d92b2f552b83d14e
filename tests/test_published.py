"""The published learned samplers shipped as named checkpoints (issue 17): "meta-sgmcmc", "precond-l2e", "small-l2e"
load and step; a Meta-SGMCMC checkpoint round-trips; a mis-shaped two-head tree is refused with one clear error."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e.checkpoint import CheckpointError, check_head_tree, save_checkpoint, shipped_checkpoint
from l2e.meta_sgmcmc import MetaSGMCMCConfig, init_meta_params

SHIPPED = [("meta-sgmcmc", "meta_sgmcmc", 92), ("precond-l2e", "meta_sgmcmc", 92), ("small-l2e", "l2e", 1442)]


def _posterior():
    return l2e.Posterior(lambda p, b: 0.5 * jnp.sum((p - b) ** 2), lambda p: -0.5 * jnp.sum(p**2), 100)


def _steps_finitely(sampler, n: int = 5):
    st = sampler.init(jnp.ones(5))
    for t in range(n):
        st, info = sampler.step(jax.random.PRNGKey(t), st, jnp.zeros(5))
    assert np.all(np.isfinite(st.position)) and bool(info.is_finite)


@pytest.mark.parametrize("name,kind,size", SHIPPED)
def test_published_checkpoint_loads_and_steps(name, kind, size):
    if not shipped_checkpoint(name).exists():
        pytest.fail(f"no shipped checkpoint at {shipped_checkpoint(name)}")
    params, config, meta = l2e.load_meta_params(name)
    assert meta.get("sampler_kind", "l2e") == kind and meta["config"]["sampler_kind"] == kind
    assert sum(x.size for x in jax.tree.leaves(params)) == size
    assert (shipped_checkpoint(name) / "PROVENANCE.md").is_file()
    _steps_finitely(l2e.load_sampler(name, posterior=_posterior(), learning_rate=0.01))


def test_meta_sgmcmc_checkpoint_round_trips(tmp_path):
    phi = init_meta_params(jax.random.PRNGKey(3), start="random")
    config = MetaSGMCMCConfig(learning_rate=0.05, friction=2.0, d_max=100.0)
    meta = {"iteration": 1, "sampler_kind": "meta_sgmcmc", "sampler": dataclasses.asdict(config)}
    save_checkpoint(tmp_path / "checkpoints", 1, {"count": jnp.zeros(())}, phi, meta)
    params, loaded, _ = l2e.load_meta_params(tmp_path)
    assert loaded == config
    assert jax.tree.structure(params) == jax.tree.structure(phi)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(phi)):
        np.testing.assert_array_equal(a, np.asarray(b))
    sampler = l2e.load_sampler(tmp_path, posterior=_posterior())
    _steps_finitely(sampler)


def test_mis_shaped_two_head_tree_is_refused(tmp_path):
    phi = init_meta_params(jax.random.PRNGKey(0))
    check_head_tree(phi, "ckpt")
    swapped = {"q": phi["d"], "d": phi["q"]}  # Q head with 3 inputs
    with pytest.raises(CheckpointError, match=r"^ckpt \(head 'q'\): meta-model of another shape \(layer 3x10, "
                                              r"expected input 2\)$"):
        check_head_tree(swapped, "ckpt")
    with pytest.raises(CheckpointError, match=r"^ckpt: not a Meta-SGMCMC meta-parameter tree \(expected heads d, q; "
                                              r"got q\)$"):
        check_head_tree({"q": phi["q"]}, "ckpt")
    flat = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))  # a paper-form tree recorded as meta_sgmcmc
    save_checkpoint(tmp_path / "checkpoints", 1, {"count": jnp.zeros(())}, flat,
                    {"iteration": 1, "sampler_kind": "meta_sgmcmc", "sampler": {}})
    with pytest.raises(CheckpointError, match="not a Meta-SGMCMC meta-parameter tree") as err:
        l2e.load_meta_params(tmp_path)
    assert "\n" not in str(err.value)
