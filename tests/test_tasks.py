"""Tests of the tasks package: datasets, IDX reading, tfds conversion, splits, models, tasks, distribution."""
from __future__ import annotations

import gzip
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e.types import Posterior
from tasks import (
    Dataset, DatasetError, ModelSpec, TaskCache, TaskDistribution, TaskSpec, build_model, build_task, load_dataset,
    make_splits, read_idx,
)
from tasks.data.tfds import tfds_to_dataset
from tasks.datasets import read_npz_images

from conftest import DATA_DIR, iris_mlp

MNIST_DIR = DATA_DIR / "mnist"


# ----------------------------------------------------------------------------- datasets


@pytest.mark.parametrize(
    "name, n_train, n_test, shape, classes",
    [
        ("digits", 1437, 360, (8, 8, 1), 10),
        ("synthetic_images", 2000, 500, (8, 8, 1), 10),
        ("synthetic_images_b", 2000, 500, (8, 8, 1), 6),
        ("breast_cancer", 455, 114, (30,), 2),
        ("wine", 142, 36, (13,), 3),
        ("iris", 120, 30, (4,), 3),
    ],
)
def test_builtin_datasets(name, n_train, n_test, shape, classes):
    ds = load_dataset(name)
    assert ds.x_train.shape == (n_train, *shape) and ds.x_test.shape == (n_test, *shape)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    assert ds.num_classes == classes
    assert set(np.unique(ds.y_train)) == set(range(classes))
    if len(shape) == 3:
        assert ds.x_train.min() >= 0 and ds.x_train.max() <= 1
    else:
        np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(ds.x_train.std(0), 1, atol=1e-4)
    assert not ds.x_train.flags.writeable


def test_datasets_deterministic_and_distinct():
    a, b = load_dataset("synthetic_images"), load_dataset("synthetic_images_b")
    from tasks.data.images import synthetic

    fresh = synthetic("synthetic_images", seed=1234, num_classes=10)
    np.testing.assert_array_equal(a.x_train, fresh.x_train)
    assert not np.allclose(a.x_train[:10], b.x_train[:10])


def test_max_train_test_and_unknown_name():
    ds = load_dataset("digits", max_train=50, max_test=7)
    full = load_dataset("digits")
    assert ds.x_train.shape[0] == 50 and ds.x_test.shape[0] == 7
    np.testing.assert_array_equal(ds.x_train, full.x_train[:50])
    with pytest.raises(DatasetError, match="unknown dataset 'nope'.*digits.*mnist"):
        load_dataset("nope")
    with pytest.raises(DatasetError, match="max_train"):
        load_dataset("digits", max_train=0)


# ----------------------------------------------------------------------------- IDX / npz files


def _idx_bytes(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, arr.ndim]) + np.array(arr.shape, ">u4").tobytes()
    return header + arr.astype(np.uint8).tobytes()


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_roundtrip(tmp_path, compress):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    data = _idx_bytes(arr)
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(gzip.compress(data) if compress else data)
    out = read_idx(path)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, arr)


def test_read_idx_errors(tmp_path):
    with pytest.raises(DatasetError, match="file not found"):
        read_idx(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x00\x0d\x01" + np.array([3], ">u4").tobytes() + b"abc")
    with pytest.raises(DatasetError, match="bad IDX magic") as e:
        read_idx(bad)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    trunc = tmp_path / "trunc.gz"
    header = bytes([0, 0, 8, 3]) + np.array([60000, 28, 28], ">u4").tobytes()
    trunc.write_bytes(gzip.compress(header + bytes(1000)))
    with pytest.raises(DatasetError, match="truncated IDX file: expected 47040000 bytes of data, got 1000"):
        read_idx(trunc)


def test_read_npz_images(tmp_path):
    path = tmp_path / "imgs.npz"
    np.savez(path, np.zeros((3, 28, 28), np.uint8))
    assert read_npz_images(path, "arr_0").shape == (3, 28, 28)
    with pytest.raises(DatasetError, match="missing key 'images'"):
        read_npz_images(path, "images")
    with pytest.raises(DatasetError, match="file not found"):
        read_npz_images(tmp_path / "nope.npz")


def test_idx_dataset_from_dir_and_missing_file(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 12), ("t10k", 5)):
        (tmp_path / f"{prefix}-images-idx3-ubyte").write_bytes(_idx_bytes(rng.integers(0, 256, (n, 28, 28))))
        (tmp_path / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(np.arange(n) % 10)))
    ds = load_dataset("fashion_mnist", data_dir=str(tmp_path))
    assert ds.x_train.shape == (12, 28, 28, 1) and ds.x_test.shape == (5, 28, 28, 1)
    assert 0 <= ds.x_train.min() and ds.x_train.max() <= 1 and ds.y_test.dtype == np.int32
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(DatasetError, match="missing t10k-images-idx3-ubyte"):
        load_dataset("mnist", data_dir=str(tmp_path))


def test_real_mnist():
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST IDX files not found in {MNIST_DIR}")
    ds = load_dataset("mnist", data_dir=str(MNIST_DIR), max_train=500, max_test=200)
    assert ds.x_train.shape == (500, 28, 28, 1) and ds.x_test.shape == (200, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() and ds.x_train.max() == 1.0
    assert ds.num_classes == 10 and set(np.unique(ds.y_train)) == set(range(10))


# ----------------------------------------------------------------------------- tfds


def test_tfds_conversion():
    rng = np.random.default_rng(0)
    train = (rng.integers(0, 256, (6, 4, 4), dtype=np.uint8), np.array([0, 1, 2, 0, 1, 2], np.int64))
    test = (rng.integers(0, 256, (3, 4, 4, 3), dtype=np.uint8)[..., :1], np.array([2, 1, 0]))
    ds = tfds_to_dataset(train, test, "tfds:fake", 3)
    assert isinstance(ds, Dataset) and ds.num_classes == 3
    assert ds.x_train.shape == (6, 4, 4, 1) and ds.x_test.shape == (3, 4, 4, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    np.testing.assert_allclose(ds.x_train[..., 0], train[0] / 255.0, rtol=1e-6)
    assert tfds_to_dataset(train, test, "tfds:fake", None).num_classes == 3


def test_tfds_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # makes `import` raise ImportError
    with pytest.raises(DatasetError, match="pip install tensorflow-datasets"):
        load_dataset("tfds:mnist")


# ----------------------------------------------------------------------------- splits


def test_splits():
    ds = load_dataset("digits")
    s = make_splits(ds)
    n = len(ds.x_train)
    sizes = [len(s.train[0]), len(s.inner_valid[0]), len(s.outer_valid[0])]
    assert sum(sizes) == n and sizes == [round(0.8 * n), round(0.9 * n) - round(0.8 * n), n - round(0.9 * n)]
    assert isinstance(s.train[0], jax.Array) and len(s.test[0]) == len(ds.x_test)
    np.testing.assert_array_equal(s.outer_valid[1], ds.y_train[round(0.9 * n):])
    with pytest.raises(ValueError, match="empty splits"):
        make_splits(ds, train_frac=0.95, inner_frac=0.1)


# ----------------------------------------------------------------------------- models


@pytest.mark.parametrize(
    "spec, name",
    [
        (ModelSpec(channels=4, depth=2), "cnn-c4-d2"),
        (ModelSpec(channels=8, depth=3, residual=True), "cnn-c8-d3-res"),
        (ModelSpec("mlp", hidden=(32, 32)), "mlp-32x32"),
    ],
)
def test_model_shapes(spec, name):
    assert spec.name == name
    model = build_model(spec, 7)
    x = jnp.ones((5, 8, 8, 1))
    params = model.init(jax.random.key(0), x)["params"]
    assert model.apply({"params": params}, x).shape == (5, 7)
    if spec.kind == "cnn":
        assert params[f"conv_{spec.depth - 1}"]["kernel"].shape == (3, 3, spec.channels, spec.channels)
        assert ("proj" in params) == spec.residual and ("hidden" in params) != spec.residual


def test_residual_uses_projection():
    model = build_model(ModelSpec(channels=4, depth=2, residual=True), 3)
    x = jax.random.uniform(jax.random.key(1), (2, 8, 8, 1))
    params = model.init(jax.random.key(0), x)["params"]
    assert params["proj"]["kernel"].shape == (1, 1, 1, 4)
    zeroed = {**params, "proj": jax.tree.map(jnp.zeros_like, params["proj"])}
    assert not np.allclose(model.apply({"params": params}, x), model.apply({"params": zeroed}, x))


def test_model_spec_validation():
    with pytest.raises(ValueError, match="kind"):
        ModelSpec("rnn")


# ----------------------------------------------------------------------------- tasks


def test_task_nll_prior_posterior():
    cache = TaskCache()
    task = build_task(TaskSpec("digits", ModelSpec(channels=4, depth=1), prior_variance=0.5), cache)
    assert task is build_task(TaskSpec("digits", ModelSpec(channels=4, depth=1), prior_variance=0.5), cache)
    other = build_task(TaskSpec("digits", ModelSpec(channels=8, depth=2)), cache)  # same data, shared arrays
    assert other.splits is task.splits and build_task(task.spec) is not task
    assert task.spec.name == "digits/cnn-c4-d1" and task.data_size == 1150 and task.input_shape == (8, 8, 1)
    params = task.init_params(jax.random.key(0))
    assert "params" not in params and "conv_0" in params
    x, y = task.train_data
    assert task.logits(params, x[:3]).shape == (3, 10)
    nll = jax.jit(task.nll)(params, (x[:64], y[:64]))
    assert nll.shape == () and np.isfinite(nll) and nll > 0
    # zero params → uniform logits → nll = log C
    zeros = jax.tree.map(jnp.zeros_like, params)
    np.testing.assert_allclose(task.nll(zeros, (x[:8], y[:8])), np.log(10), rtol=1e-6)
    hand = {"a": {"w": jnp.array([1.0, 2.0])}, "b": jnp.array([[3.0]])}
    np.testing.assert_allclose(task.log_prior(hand), -0.5 * 14.0 / 0.5, rtol=1e-6)
    post = task.posterior
    assert isinstance(post, Posterior) and post.data_size == task.data_size
    g, gu = jax.jit(post.potential_grad)(params, (x[:16], y[:16]))
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(gu))


def test_task_api_delegates_to_the_likelihood():
    task = build_task(iris_mlp(8))
    assert task.kind == "classification" and task.metric_keys == ("acc", "nll", "ece", "pairwise_kld")
    params = jax.vmap(task.init_params)(jax.random.split(jax.random.key(0), 3))
    x, y = task.splits.test
    out = jax.jit(task.predict)(params, x)
    assert out.shape == (3, x.shape[0], 3)
    first = jax.tree.map(lambda a: a[0], params)
    np.testing.assert_allclose(out[0], jax.nn.log_softmax(task.logits(first, x)), rtol=1e-6)
    out, y = np.asarray(out), np.asarray(y)
    assert set(task.metrics(out, y)) == set(task.metric_keys)
    assert task.score(out, y) == pytest.approx(task.metrics(out, y)["nll"], rel=1e-12)
    assert task.curve(out, y)["nll"][-1] == pytest.approx(task.score(out, y), rel=1e-12)
    err, nll = task.error_and_nll(out, y)
    assert err.shape == nll.shape == (3,)
    assert nll[0] == pytest.approx(float(task.nll(first, task.splits.test)), rel=1e-5)


def test_tabular_mlp_task():
    task = build_task(TaskSpec("iris", ModelSpec("mlp", hidden=(16,))))
    params = task.init_params(jax.random.key(0))
    assert task.logits(params, task.train_data[0]).shape == (96, 3)
    assert np.isfinite(task.nll(params, task.splits.test))
    with pytest.raises(ValueError, match="a CNN needs"):
        build_task(TaskSpec("iris", ModelSpec()))


def test_bad_prior_variance():
    with pytest.raises(ValueError, match="prior_variance must be > 0, got 0.0"):
        TaskSpec("digits", ModelSpec(), prior_variance=0.0)


def test_sample_batch_jit_deterministic():
    task = build_task(TaskSpec("digits", ModelSpec()))
    sample = jax.jit(task.sample_batch, static_argnums=2)
    b1 = sample(jax.random.key(3), task.train_data, 32)
    b2 = sample(jax.random.key(3), task.train_data, 32)
    b3 = sample(jax.random.key(4), task.train_data, 32)
    assert b1[0].shape == (32, 8, 8, 1) and b1[1].shape == (32,)
    np.testing.assert_array_equal(b1[0], b2[0])
    assert not np.array_equal(b1[1], b3[1])
    eager = task.sample_batch(jax.random.key(3), task.train_data, 32)
    np.testing.assert_array_equal(eager[1], b1[1])


# ----------------------------------------------------------------------------- distribution


def test_distribution_coverage_and_determinism():
    dist = TaskDistribution(("digits",))
    specs = dist.specs()
    assert len(specs) == 30 and len(set(specs)) == 30 and specs == dist.specs()
    assert all(s.dataset == "digits" and s.model.kind == "cnn" for s in specs)
    key = jax.random.key(42)
    assert dist.sample(key) == dist.sample(key)
    drawn = {dist.sample(k) for k in jax.random.split(jax.random.key(0), 600)}
    assert len(drawn) == 30
    both = TaskDistribution(("digits", "iris"), channels=(4,), depths=(1,), residual=(False,), mlp_hidden=((8,),))
    assert [s.name for s in both.specs()] == ["digits/cnn-c4-d1", "digits/mlp-8", "iris/mlp-8"]  # no CNN on tabular
    with pytest.raises(ValueError, match="needs mlp_hidden"):
        TaskDistribution(("iris",))
    with pytest.raises(DatasetError, match="unknown dataset"):
        TaskDistribution(("nope",))
