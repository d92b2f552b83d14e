"""Checkpoint loading: the shipped sampler, and clear errors for missing / corrupt / mis-shaped checkpoints."""
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import l2e
from l2e.checkpoint import CheckpointError, check_meta_params, shipped_checkpoint


@pytest.mark.parametrize("name,size,kind", [("paper-form", 1442, "l2e"), ("mass", 114, "mass")])
def test_shipped_checkpoint_loads_and_steps(name, size, kind):
    if not shipped_checkpoint(name).exists():
        pytest.fail(f"no shipped checkpoint at {shipped_checkpoint(name)}")
    params, config, meta = l2e.load_meta_params(name)
    assert sum(x.size for x in jax.tree.leaves(params)) == size
    assert meta["iteration"] == meta["config"]["num_outer"] and meta.get("sampler_kind", "l2e") == kind
    assert config.learning_rate > 0
    post = l2e.Posterior(lambda p, b: 0.5 * jax.numpy.sum((p - b) ** 2), lambda p: 0.0 * p.sum(), 100)
    s = l2e.load_sampler(None if name == "default" else name, posterior=post, learning_rate=0.1)
    st = s.init(jax.numpy.ones(5))
    for t in range(3):
        st, info = s.step(jax.random.PRNGKey(t), st, jax.numpy.zeros(5))
    assert np.all(np.isfinite(st.position)) and bool(info.is_finite)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        l2e.load_meta_params(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        l2e.load_meta_params(tmp_path)


def test_corrupt_checkpoint(tmp_path):
    step = tmp_path / "7"
    shutil.copytree(l2e.checkpoint.resolve_step_dir(shipped_checkpoint("paper-form")), step)
    (step / "meta" / "metadata").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt checkpoint metadata"):
        l2e.load_meta_params(step)
    shutil.rmtree(step)
    shutil.copytree(l2e.checkpoint.resolve_step_dir(shipped_checkpoint("paper-form")), step)
    for f in (step / "meta_params").rglob("*"):
        if f.is_file() and f.name != "_METADATA":
            f.write_bytes(b"\0" * 7)
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        l2e.load_meta_params(step)


def test_meta_model_of_another_shape_is_refused():
    good = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))
    check_meta_params(good, "x")
    wide_in = l2e.meta_model.MetaMLP().init(jax.random.PRNGKey(0), np.zeros((1, 7)))["params"]
    with pytest.raises(CheckpointError, match="another shape"):
        check_meta_params(wide_in, "ckpt")
    three_out = l2e.meta_model.MetaMLP(outputs=3).init(jax.random.PRNGKey(0), np.zeros((1, 9)))["params"]
    with pytest.raises(CheckpointError, match="3 outputs"):
        check_meta_params(three_out, "ckpt")
    with pytest.raises(CheckpointError, match="not an L2E"):
        check_meta_params({"w": np.zeros(3)}, "ckpt")


def test_shipped_checkpoint_is_package_data():
    assert Path(shipped_checkpoint()).name == "transient" and Path(shipped_checkpoint("paper-form")).name == "paper_form"
    for name in ("default", "paper-form", "kinetic"):
        assert (shipped_checkpoint(name) / "PROVENANCE.md").is_file()


def test_save_and_restore_round_trip_keeps_the_newest_steps(tmp_path):
    from l2e.checkpoint import KEEP_CHECKPOINTS, clean_staging, committed_steps, restore_checkpoint, save_checkpoint

    params = l2e.meta_model.init_meta_params(jax.random.PRNGKey(0))
    template = {"mean": np.zeros(4, np.float32), "count": np.int32(0)}
    assert restore_checkpoint(tmp_path / "none", template) == (0, template)
    for step in range(1, 6):
        state = {"mean": np.arange(4, dtype=np.float32) * step, "count": np.int32(step)}
        save_checkpoint(tmp_path, step, state, params, {"iteration": step, "sampler": {}})
    assert committed_steps(tmp_path) == list(range(6 - KEEP_CHECKPOINTS, 6))
    for step in range(1, 6):  # keep=0 keeps every step (meta_train --keep-checkpoints 0)
        save_checkpoint(tmp_path / "all", step, {"mean": np.zeros(4, np.float32), "count": np.int32(step)}, params,
                        {"iteration": step, "sampler": {}}, keep=0)
    assert committed_steps(tmp_path / "all") == [1, 2, 3, 4, 5]
    step, state = restore_checkpoint(tmp_path, template)
    assert step == 5 and int(state["count"]) == 5 and state["mean"].dtype == np.float32
    np.testing.assert_array_equal(state["mean"], np.arange(4) * 5.0)
    loaded, _, meta = l2e.load_meta_params(tmp_path)
    assert meta["iteration"] == 5 and flat_equal(loaded, params)
    (tmp_path / ".tmp-6" / "es_state").mkdir(parents=True)  # a writer killed mid-checkpoint
    assert committed_steps(tmp_path)[-1] == 5
    clean_staging(tmp_path)
    assert not (tmp_path / ".tmp-6").exists()
    with pytest.raises(CheckpointError, match="another shape"):
        restore_checkpoint(tmp_path, {"mean": np.zeros(3, np.float32), "count": np.int32(0)})


def flat_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_a_checkpoint_written_on_another_backend_loads_here(tmp_path):
    """A step whose orbax sharding file names a device this host lacks (as a CPU-written checkpoint does on a GPU
    host: 'sharding passed to deserialization should be specified, concrete …' before the fix) restores as numpy
    arrays equal to the original."""
    import json
    import shutil

    import numpy as np

    from l2e.checkpoint import load_meta_params, shipped_checkpoint

    src = shipped_checkpoint("paper-form")
    dst = tmp_path / "paper_form"
    shutil.copytree(src, dst)
    sharding = dst / "meta_params" / "_sharding"
    assert sharding.exists()
    table = json.loads(sharding.read_text())
    table = {k: json.dumps({**json.loads(v), "device_str": "gpu:0"}) for k, v in table.items()}
    sharding.write_text(json.dumps(table))
    want, _, _ = load_meta_params("paper-form")
    got, _, _ = load_meta_params(dst)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        assert isinstance(b, np.ndarray)
        np.testing.assert_array_equal(a, b)
