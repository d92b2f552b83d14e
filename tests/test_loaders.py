"""Every dataset loader on files / arrays the tests generate (nothing downloads), including corrupt and
truncated files (one-line DatasetError). TFDS paths run against a fake `tensorflow_datasets` module."""
from __future__ import annotations

import gzip
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tasks import DatasetError, load_dataset, make_splits
from tasks.datasets import CIFAR10_MEAN, CIFAR10_STD, DATASETS, MEDMNIST_CLASSES, TFDS_SOURCES, check_dataset_name, read_npz

from conftest import DATA_DIR as SHARED


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def _idx_bytes(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 8, arr.ndim]) + np.array(arr.shape, ">u4").tobytes() + arr.astype(np.uint8).tobytes()


def _write_idx_dir(d: Path, n_train=20, n_test=8, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        for kind, arr in (("images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28))),
                          ("labels-idx1-ubyte", np.arange(n) % 10)):
            data = _idx_bytes(arr)
            name = f"{prefix}-{kind}" + (".gz" if gz else "")
            (d / name).write_bytes(gzip.compress(data) if gz else data)
    return d


# ----------------------------------------------------------------------------- MNIST / Fashion-MNIST (IDX)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_loaders(tmp_path, name, gz):
    d = _write_idx_dir(tmp_path / name, gz=gz)
    ds = load_dataset(name, data_dir=str(d))
    assert ds.x_train.shape == (20, 28, 28, 1) and ds.x_test.shape == (8, 28, 28, 1) and ds.num_classes == 10
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() and ds.x_train.max() <= 1
    # a data root holding <name>/ works too
    assert load_dataset(name, data_dir=str(tmp_path)).x_train.shape == (20, 28, 28, 1)


def test_idx_truncated_and_corrupt(tmp_path):
    d = _write_idx_dir(tmp_path / "m", gz=True)
    img = d / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(img.read_bytes())
    img.write_bytes(gzip.compress(raw[:-100]))  # truncated data
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", data_dir=str(d))
    assert "truncated IDX file" in one_line(e) and str(img) in str(e.value)
    img.write_bytes(gzip.compress(raw)[:50])  # truncated gzip stream
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", data_dir=str(d))
    assert "corrupt gzip" in one_line(e)
    img.write_bytes(b"garbage!" * 10)
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", data_dir=str(d))
    assert "bad IDX magic" in one_line(e)


def test_idx_label_out_of_range(tmp_path):
    d = _write_idx_dir(tmp_path / "m", gz=False)
    (d / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.full(8, 12)))
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", data_dir=str(d))
    assert "labels span [12, 12] but the dataset has 10 classes" in one_line(e)


def test_real_mnist_scaled_down():
    if not (SHARED / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("../shared/data/mnist not present")
    ds = load_dataset("mnist", data_dir=str(SHARED / "mnist"), max_train=300)
    assert ds.x_train.shape == (300, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)


# ----------------------------------------------------------------------------- KMNIST (.npz release)


def test_kmnist_npz(tmp_path):
    rng = np.random.default_rng(1)
    for split, n in (("train", 30), ("test", 10)):
        np.savez_compressed(tmp_path / f"kmnist-{split}-imgs.npz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        np.savez_compressed(tmp_path / f"kmnist-{split}-labels.npz", (np.arange(n) % 10).astype(np.uint8))
    ds = load_dataset("kmnist", data_dir=str(tmp_path))
    assert ds.x_train.shape == (30, 28, 28, 1) and ds.y_test.tolist() == list(range(10)) and ds.num_classes == 10
    good = (tmp_path / "kmnist-train-imgs.npz").read_bytes()
    (tmp_path / "kmnist-train-imgs.npz").write_bytes(good[: len(good) // 2])  # truncated archive
    with pytest.raises(DatasetError) as e:
        load_dataset("kmnist", data_dir=str(tmp_path))
    assert "not a readable npz file" in one_line(e) and "kmnist-train-imgs.npz" in str(e.value)
    (tmp_path / "kmnist-train-imgs.npz").unlink()
    with pytest.raises(DatasetError, match="missing train-images-idx3-ubyte.*or kmnist-train-imgs.npz"):
        load_dataset("kmnist", data_dir=str(tmp_path))


# ----------------------------------------------------------------------------- MedMNIST (.npz)


def _medmnist_file(path: Path, n=(40, 10, 12), channels=3, classes=8, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, k in zip(("train", "val", "test"), n):
        shape = (k, 28, 28, channels) if channels > 1 else (k, 28, 28)
        arrays[f"{split}_images"] = rng.integers(0, 256, shape, dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(k) % classes).astype(np.uint8)[:, None]
    np.savez_compressed(path, **arrays)
    return arrays


def test_bloodmnist_npz_and_official_validation_split(tmp_path):
    arrays = _medmnist_file(tmp_path / "bloodmnist.npz")
    ds = load_dataset("bloodmnist", data_dir=str(tmp_path))
    assert ds.num_classes == 8 and MEDMNIST_CLASSES["bloodmnist"] == 8
    assert ds.x_train.shape == (40, 28, 28, 3) and ds.x_valid.shape == (10, 28, 28, 3) and ds.x_test.shape[0] == 12
    np.testing.assert_allclose(ds.x_valid, arrays["val_images"] / 255.0, rtol=1e-6)
    s = make_splits(ds)  # the official validation split serves both validation roles (spec §5.5)
    assert s.train[0].shape[0] == 40 and s.inner_valid[0].shape[0] == 10
    np.testing.assert_array_equal(np.asarray(s.outer_valid[1]), ds.y_valid)
    small = load_dataset("bloodmnist", data_dir=str(tmp_path), max_train=5)
    assert small.x_train.shape[0] == 5 and small.x_valid.shape[0] == 10


def test_medmnist_errors(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_dataset("bloodmnist", data_dir=str(tmp_path))
    assert "file not found" in one_line(e)
    path = tmp_path / "bloodmnist.npz"
    _medmnist_file(path)
    path.write_bytes(path.read_bytes()[:-200])  # truncated: the zip directory at the end is gone
    with pytest.raises(DatasetError) as e:
        load_dataset("bloodmnist", data_dir=str(tmp_path))
    assert "not a readable npz file" in one_line(e)
    np.savez(path, train_images=np.zeros((3, 28, 28), np.uint8))
    with pytest.raises(DatasetError) as e:
        load_dataset("bloodmnist", data_dir=str(tmp_path))
    assert "missing key 'train_labels'" in one_line(e)
    _medmnist_file(path, classes=9)  # label 8 in an 8-class dataset
    with pytest.raises(DatasetError) as e:
        load_dataset("bloodmnist", data_dir=str(tmp_path))
    assert "labels span [0, 8] but the dataset has 8 classes" in one_line(e)


def test_real_breastmnist():
    if not (SHARED / "medmnist" / "breastmnist.npz").is_file():
        pytest.skip("../shared/data/medmnist/breastmnist.npz not present")
    ds = load_dataset("breastmnist", data_dir=str(SHARED / "medmnist"))
    assert (len(ds.x_train), len(ds.x_valid), len(ds.x_test)) == (546, 78, 156) and ds.num_classes == 2


def test_read_npz_not_an_archive(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(DatasetError, match="not an npz archive"):
        read_npz(tmp_path / "a.npy", ("arr_0",))


# ----------------------------------------------------------------------------- TFDS (fake module)


class _Label:
    def __init__(self, n):
        self.num_classes = n


def _fake_tfds(monkeypatch, tables: dict, calls: list):
    """A stand-in for tensorflow_datasets: tfds.load(name, split=[...], batch_size=-1, as_supervised=True, ...)
    returns small numpy arrays; split strings like "train[:N]" are honoured."""
    mod = types.ModuleType("tensorflow_datasets")

    def load(name, split, batch_size, as_supervised, data_dir, download, with_info):
        calls.append(dict(name=name, split=list(split), download=download, data_dir=data_dir))
        assert batch_size == -1 and as_supervised and with_info
        if name not in tables:
            raise RuntimeError(f"Dataset {name} not found.\nmore text")
        (x, y), nc = tables[name]
        out = []
        for sp in split:
            m = re.fullmatch(r"(\w+)(?:\[:(\d+)\])?", sp)
            stop = int(m.group(2)) if m.group(2) else None
            out.append((x[:stop], y[:stop]))
        info = types.SimpleNamespace(features={"label": _Label(nc)})
        return out, info

    mod.load = load
    mod.as_numpy = lambda t: t
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", mod)


def _imgs(n, h=32, c=3, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, h, h, c), dtype=np.uint8), (np.arange(n) % classes).astype(np.int64)


@pytest.mark.parametrize("name, tfds_name, classes, shape", [
    ("emnist", "emnist/byclass", 62, (28, 28, 1)),
    ("emnist_byclass", "emnist/byclass", 62, (28, 28, 1)),
    ("emnist_balanced", "emnist/balanced", 47, (28, 28, 1)),
    ("emnist_mnist", "emnist/mnist", 10, (28, 28, 1)),
])
def test_tfds_emnist_head_sized_to_true_classes(monkeypatch, name, tfds_name, classes, shape):
    calls = []
    _fake_tfds(monkeypatch, {tfds_name: (_imgs(3 * classes, 28, 1, classes), classes)}, calls)
    ds = load_dataset(name)
    assert ds.num_classes == classes and ds.x_train.shape[1:] == shape and ds.y_train.max() == classes - 1
    assert calls[0]["name"] == tfds_name and calls[0]["download"] is False


def test_tfds_cifar_protocol(monkeypatch):
    calls = []
    x, y = _imgs(50, seed=3)
    _fake_tfds(monkeypatch, {"cifar10": ((x, y), 10), "cifar100": (_imgs(60, classes=100), 100),
                             "svhn_cropped": (_imgs(20), 10)}, calls)
    ds = load_dataset("cifar10")
    assert calls[-1]["split"] == ["train[:40960]", "test"]
    assert ds.num_classes == 10 and ds.x_train.shape == (50, 32, 32, 3)
    expect = (x / 255.0 - np.array(CIFAR10_MEAN)) / np.array(CIFAR10_STD)
    np.testing.assert_allclose(ds.x_train, expect, rtol=1e-5, atol=1e-5)
    assert load_dataset("cifar100").num_classes == 100
    svhn = load_dataset("svhn_cropped")  # OOD set: in CIFAR-10's normalised input space
    assert svhn.num_classes == 10 and svhn.x_test.min() < 0


def test_tfds_cifar10_corrupted(monkeypatch):
    calls = []
    xc, yc = _imgs(12, seed=9)
    _fake_tfds(monkeypatch, {"cifar10": (_imgs(30), 10), "cifar10_corrupted/gaussian_noise_3": ((xc, yc), 10)},
               calls)
    ds = load_dataset("cifar10_corrupted/gaussian_noise_3")
    assert ds.x_train.shape == (30, 32, 32, 3) and ds.x_test.shape == (12, 32, 32, 3) and ds.num_classes == 10
    np.testing.assert_allclose(ds.x_test, (xc / 255.0 - np.array(CIFAR10_MEAN)) / np.array(CIFAR10_STD),
                               rtol=1e-5, atol=1e-5)
    assert {"name": "cifar10_corrupted/gaussian_noise_3", "split": ["test"]}.items() <= calls[0].items()
    with pytest.raises(DatasetError, match="cifar10_corrupted/<corruption>_<1-5>"):
        check_dataset_name("cifar10_corrupted/gaussian_noise_9")


def test_tfds_generic_and_errors(monkeypatch):
    calls = []
    _fake_tfds(monkeypatch, {"kmnist": (_imgs(10, 28, 1), 10), "emnist/byclass": (_imgs(10, 28, 1), 10)}, calls)
    assert load_dataset("tfds:kmnist", data_dir="/tfds_dir").x_train.shape == (10, 28, 28, 1)
    assert calls[-1]["data_dir"] == "/tfds_dir"
    with pytest.raises(DatasetError) as e:  # a missing / unprepared dataset: one line, with the download hint
        load_dataset("cifar100")
    assert "cifar100: tfds.load('cifar100') failed: RuntimeError: Dataset cifar100 not found." in one_line(e)
    assert "L2E_TFDS_DOWNLOAD=1" in str(e.value)
    with pytest.raises(DatasetError) as e:  # builder info disagrees with the registry's class count
        load_dataset("emnist")
    assert "tfds reports 10 classes for emnist/byclass, expected 62" in one_line(e)


def test_mnist_falls_back_to_tfds_without_local_copy(monkeypatch, tmp_path):
    calls = []
    _fake_tfds(monkeypatch, {"fashion_mnist": (_imgs(16, 28, 1), 10)}, calls)
    monkeypatch.setenv("L2E_DATA_DIR", str(tmp_path))  # no local fashion_mnist/ there
    ds = load_dataset("fashion_mnist")
    assert calls and calls[0]["name"] == "fashion_mnist" and ds.x_train.shape == (16, 28, 28, 1)
    _write_idx_dir(tmp_path / "fashion_mnist")  # a local copy wins over TFDS
    assert load_dataset("fashion_mnist").x_train.shape == (20, 28, 28, 1) and len(calls) == 1


def test_tfds_missing_everywhere(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    monkeypatch.setenv("L2E_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError) as e:
        load_dataset("cifar10")
    assert "pip install tensorflow-datasets" in one_line(e)


def test_registry_names_resolve_without_tfds():
    for name in ("mnist", "fashion_mnist", "emnist", "emnist_byclass", "bloodmnist", "cifar10", "cifar100",
                 "svhn_cropped", "kmnist", "cifar10_corrupted/frost_5"):
        check_dataset_name(name)
    assert set(TFDS_SOURCES) <= set(DATASETS) and set(MEDMNIST_CLASSES) <= set(DATASETS)
