"""`python -m evaluate --preset paper`: the paper's CIFAR-10 comparison (ResNet20-FRN-Swish, HMC reference
probabilities) end to end, on small generated stand-ins for the TFDS data (nothing is downloaded)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from evaluate.__main__ import main
from evaluate.config import get_preset
from test_loaders import _fake_tfds, _imgs


@pytest.fixture
def fake_paper_data(monkeypatch):
    calls = []
    _fake_tfds(monkeypatch, {"cifar10": (_imgs(48, seed=1), 10), "fashion_mnist": (_imgs(48, 28, 1, seed=2), 10)},
               calls)
    return calls  # tasks and data are cached per evaluation (tasks.TaskCache), so nothing global to clear


def test_paper_preset_is_the_papers_protocol():
    cfg = get_preset("paper")
    assert [s.name for s in cfg.tasks] == ["cifar10/resnet20-frn", "fashion_mnist/fmnist-1conv"]
    assert cfg.tasks[0].prior_variance == pytest.approx(0.2) and cfg.batch_size == 128
    assert cfg.methods == ("l2e", "csghmc", "deep_ensemble")
    # 600 epochs of 40960/128 = 320 steps; samples at the end of epochs 150, 200, …, 600
    assert cfg.schedule("l2e").sample_steps == tuple(320 * e for e in range(150, 601, 50))
    assert cfg.settings.l2e.lrs == (2.0,) and not cfg.tune


@pytest.mark.slow
def test_paper_cifar10_comparison_with_hmc_reference(fake_paper_data, tmp_path):
    """The preset (budget scaled down by --set) runs L2E, cSGHMC and the deep ensemble on CIFAR-10 with
    ResNet20-FRN and reports agreement / TV against a reference file aligned with the test labels."""
    from tasks.datasets import load_dataset

    y_test = load_dataset("cifar10").y_test
    probs = np.full((len(y_test), 10), 0.1 / 9)
    probs[np.arange(len(y_test)), y_test] = 0.9
    ref = tmp_path / "probs.txt"
    np.savetxt(ref, probs, fmt="%.18e")
    out = tmp_path / "report"
    rc = main(["--preset", "paper", "--output", str(out), "--quiet",
               "--set", "num_samples=2", "--set", "settings.csghmc.cycles=2", "--set", "thinning=2",
               "--set", "num_steps=8", "--set", "batch_size=8", "--set", "chunk=1", "--set", "eval_batch=16",
               "--set", "barrier_examples=8",
               "--reference", f"cifar10/resnet20-frn={ref}"])
    assert rc == 0
    assert {"name": "cifar10", "split": ["train[:40960]", "test"]}.items() <= fake_paper_data[0].items()
    report = json.loads((out / "report.json").read_text())
    methods = report["tasks"]["cifar10/resnet20-frn"]["methods"]
    assert report["tasks"]["cifar10/resnet20-frn"]["reference"]["accuracy"] == pytest.approx(1.0)
    assert methods["hmc"]["acc"] == pytest.approx(1.0)
    for method in ("l2e", "csghmc", "deep_ensemble"):
        m = methods[method]
        assert 0.0 <= m["agreement"] <= 1.0 and 0.0 < m["total_variation"] < 1.0, m
        assert m["grad_evals"] == 8 and np.isfinite(m["nll"])
    assert "fashion_mnist/fmnist-1conv" in report["tasks"]
