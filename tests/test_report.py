"""Tests for evaluate.report on a fake results dict."""
import json

import numpy as np

from evaluate import report as R


def _method(acc, nll, ece, kld, grad_evals, seconds, k=3, divergent=0):
    return {
        "acc": acc, "nll": nll, "ece": ece, "pairwise_kld": kld,
        "grad_evals": grad_evals, "seconds": seconds, "num_samples": k,
        "hyperparameters": {"lr": 0.1, "momentum": 0.9}, "divergent_chains": divergent,
        "curve": {"num_samples": list(range(1, k + 1)),
                  "acc": [acc - 0.01 * (k - i) for i in range(1, k + 1)],
                  "nll": [nll + 0.05 * (k - i) for i in range(1, k + 1)]},
    }


def fake_results():
    return {
        "config": {"seed": 0, "num_samples": 3, "tasks": ["digits/cnn-c8-d3", "toy/mlp"]},
        "tasks": {
            "digits/cnn-c8-d3": {
                "held_out": "architecture",
                "methods": {
                    "l2e": _method(0.91234, 0.31, 0.021, 0.1, 2000, 12.34),
                    "sghmc": _method(0.87, 0.25, 0.05, 0.02, 3000, 20.06, divergent=2),
                    "csghmc": _method(0.85, 0.40, 0.03, 0.3, 3000, 19.0),
                    "deep_ensemble": _method(0.90, 0.33, 0.04, 0.5, 6000, 40.0),
                },
            },
            "toy/mlp": {
                "held_out": "dataset",
                "methods": {
                    "l2e": _method(0.70, 0.9, 0.1, 0.2, 100, 1.0),
                    "sghmc": _method(0.75, 0.8, 0.1, 0.2, 100, 2.0),
                },
            },
        },
    }


def _row(md, section, method):
    part = md.split(f"## {section}")[1].split("\n## ")[0]
    return next(line for line in part.splitlines() if line.startswith(f"| {method} |"))


def test_write_report_files_and_json_roundtrip(tmp_path):
    res = fake_results()
    paths = R.write_report(res, tmp_path / "out")
    assert set(paths) == {"json", "markdown", "curves"}
    assert paths["json"].name == "report.json" and paths["json"].exists()
    assert paths["markdown"].name == "report.md" and paths["markdown"].exists()
    assert paths["curves"].name == "bma_curves.png"
    assert json.loads(paths["json"].read_text()) == res
    # no temporary files left behind by the atomic writes
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "bma_curves.png", "report.json", "report.md"]
    png = paths["curves"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 5000


def test_json_sorted_keys_and_numpy_values(tmp_path):
    res = {"tasks": {}, "config": {"b": np.float32(0.5), "a": np.arange(3), "c": np.int64(7)}}
    path = R.write_json(res, tmp_path / "r.json")
    text = path.read_text()
    assert text.index('"config"') < text.index('"tasks"')
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')
    assert json.loads(text)["config"] == {"a": [0, 1, 2], "b": 0.5, "c": 7}


def test_markdown_methods_bold_and_formatting():
    md = R.render_markdown(fake_results())
    assert md.startswith("# ")
    assert "seed" in md and "architecture" in md
    for m in ("l2e", "sghmc", "csghmc", "deep_ensemble"):
        assert f"| {m} |" in md
    header = next(l for l in md.splitlines() if l.startswith("| method |"))
    assert header == "| method | acc | nll | ece | pairwise_kld | grad_evals | seconds |"
    # task 1: best acc l2e (0.9123 to 4 significant digits), best nll sghmc
    assert _row(md, "digits/cnn-c8-d3", "l2e") == (
        "| l2e | **0.9123** | 0.31 | 0.021 | 0.1 | 2000 | 12.3 |")
    assert _row(md, "digits/cnn-c8-d3", "sghmc") == (
        "| sghmc | 0.87 | **0.25** | 0.05 | 0.02 | 3000 | 20.1 |")
    assert "**" not in _row(md, "digits/cnn-c8-d3", "csghmc")
    assert "**" not in _row(md, "digits/cnn-c8-d3", "deep_ensemble")
    # task 2: sghmc best on both
    assert _row(md, "toy/mlp", "sghmc").count("**") == 4
    assert "**" not in _row(md, "toy/mlp", "l2e")
    # divergent chains noted only in the task that has them
    task1 = md.split("## digits/cnn-c8-d3")[1].split("\n## ")[0]
    task2 = md.split("## toy/mlp")[1]
    assert "divergent" in task1 and "sghmc (2)" in task1
    assert "divergent" not in task2


def test_markdown_missing_values_and_write(tmp_path):
    res = {"config": {}, "tasks": {"t": {"held_out": "seed", "methods": {
        "a": {"acc": 0.5, "nll": None}, "b": {"acc": 0.6, "nll": 1.0}}}}}
    path = R.write_markdown(res, tmp_path / "x.md")
    md = path.read_text()
    assert md == R.render_markdown(res)
    assert _row(md, "t", "a").startswith("| a | 0.5 | — |")
    assert _row(md, "t", "b").startswith("| b | **0.6** | **1** |")


def test_plot_curves_returns_png_path(tmp_path):
    out = R.plot_curves(fake_results(), tmp_path / "c.png")
    assert out == tmp_path / "c.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = R.plot_curves({"config": {}, "tasks": {}}, tmp_path / "e.png")
    assert empty.read_bytes()[:4] == b"\x89PNG"
