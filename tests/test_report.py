"""Tests for evaluate.report and evaluate.plots on a fake results dict."""
import json

import numpy as np

from evaluate import plots as P
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
    out = P.plot_curves(fake_results(), tmp_path / "c.png")
    assert out == tmp_path / "c.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = P.plot_curves({"config": {}, "tasks": {}}, tmp_path / "e.png")
    assert empty.read_bytes()[:4] == b"\x89PNG"


def _regression_results():
    lam = [i / 20 for i in range(21)]

    def entry(lppd, rmse, cal, grads, gradient="minibatch (B=32)", ess=None, barrier=True):
        return {"lppd": lppd, "nll": -lppd, "rmse": rmse, "calibration_error": cal, "grad_evals": grads,
                "gradient": gradient, "epochs": grads * 32 / 200, "seconds": 1.0, "num_samples": 4,
                "divergent_chains": 0,
                "curve": {"num_samples": [1, 2, 3, 4], "lppd": [lppd - 0.3, lppd - 0.2, lppd - 0.1, lppd],
                          "rmse": [rmse + 0.1, rmse + 0.05, rmse, rmse]},
                "ess": ess,
                "barrier": {"lambdas": lam, "error": [rmse + 0.1 * (1 - abs(2 * t - 1)) for t in lam],
                            "nll": [1 + 0.2 * (1 - abs(2 * t - 1)) for t in lam], "error_barrier": 0.1,
                            "nll_barrier": 0.2, "pair": "first and last sample of chain 0"} if barrier else None}

    xs = [i / 10 for i in range(-20, 21)]
    band = {"x_train": xs[::3], "y_train": [x ** 3 for x in xs[::3]], "x": xs, "y": [x ** 3 for x in xs],
            "methods": {m: {"mean": [x ** 3 for x in xs], "lower": [x ** 3 - w for x in xs],
                            "upper": [x ** 3 + w for x in xs]} for m, w in (("l2e", 0.3), ("hmc", 0.5))}}
    ess = {"estimator": "Geyer", "chains": 1, "draws_per_chain": 4, "mean_ess": 3.5, "median_ess": 3.6,
           "ess_per_second": 3.5, "ess_per_1k_grads": 1.75, "frac_chainwise_rhat_below_1.1": 0.9,
           "fs_function": "the predicted mean", "fs_mean_ess": 2.5, "fs_ess_per_second": 2.5,
           "fs_ess_per_1k_grads": 1.25}
    return {"config": {"title": "reg"}, "tasks": {"synthetic_1d/mlp-16x16": {
        "kind": "regression", "held_out": "demo", "band": band,
        "reference": {"path": "/tmp/ref"},
        "methods": {"l2e": entry(0.5, 0.30, 0.05, 2000, ess=ess), "deep_ensemble": entry(0.2, 0.28, 0.09, 2000),
                    "hmc": entry(0.9, 0.20, 0.01, 50000, "full-batch (N=200)", barrier=False)}}}}


def test_regression_table_reference_row_and_diagnostics():
    md = R.render_markdown(_regression_results())
    header = next(line for line in md.splitlines() if line.startswith("| method |"))
    assert header == "| method | lppd | nll | rmse | calibration_error | gradient | grad_evals | epochs | seconds |"
    sec = "synthetic_1d/mlp-16x16"
    # best among the methods, never the reference row (it has the better lppd 0.9 and rmse 0.2)
    assert _row(md, sec, "l2e").startswith("| l2e | **0.5** | **-0.5** | 0.3 | **0.05** | minibatch (B=32) | 2000 |")
    assert _row(md, sec, "deep_ensemble").startswith("| deep_ensemble | 0.2 | -0.2 | **0.28** | 0.09 |")
    assert "**" not in _row(md, sec, "hmc")
    assert "Reference posterior" in md and "/tmp/ref" in md
    assert "Diagnostics" in md and "| l2e | 1 | 4 | 3.5 | 3.5 | 1.75 | 2.5 | 2.5 | 1.25 | 0.9 | 0.1 | 0.2 |" in md
    assert "fs_* = function-space ESS, of the predicted mean" in md


def test_write_report_writes_diagnostic_plots(tmp_path):
    paths = R.write_report(_regression_results(), tmp_path)
    assert set(paths) == {"json", "markdown", "curves", "ess", "barriers", "band"}
    for key in ("curves", "ess", "barriers", "band"):
        data = paths[key].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, key


def test_temperature_cost_and_dispersion_sections():
    res = fake_results()
    methods = res["tasks"]["toy/mlp"]["methods"]
    methods["l2e"].update(flops_per_step=1.0e7, seconds_per_step=0.001, temperature=1.0, t_kin=0.2912,
                          tuning={"runs": 4, "grad_evals": 400, "seconds": 2.04})
    methods["sghmc"].update(flops_per_step=1.2e6, seconds_per_step=0.0004, temperature=1.0, t_kin=1.013,
                            dispersion={"ratios": {"weight_norm": 0.5, "pairwise_distance": 0.1,
                                                   "predictive_variance": 0.3},
                                        "flagged": ["pairwise_distance", "predictive_variance"]})
    md = R.render_markdown(res)
    section = md.split("## toy/mlp")[1]
    header = next(line for line in section.splitlines() if line.startswith("| method |"))
    assert header == "| method | acc | nll | ece | pairwise_kld | T | T_kin | grad_evals | seconds |"
    assert _row(md, "toy/mlp", "l2e") == "| l2e | 0.7 | 0.9 | 0.1 | 0.2 | 1 | 0.2912 | 100 | 1.0 |"
    assert "| l2e | 1e+07 | 0.001 | 4 | 400 | 2.0 |" in section and "| sghmc | 1.2e+06 | 0.0004 | — | — | — |" in section
    assert "| sghmc | 0.5 | 0.1 | 0.3 | pairwise_distance, predictive_variance |" in section
    assert "Dispersion" not in md.split("## toy/mlp")[0]  # only the task that has dispersion blocks


def test_budget_columns_show_means_only_over_seeds():
    entry = {"nll": 0.5, "grad_evals": 60.0, "temperature": 1.0, "t_kin": 0.9,
             "se": {"nll": 0.01, "grad_evals": 0.0, "temperature": 0.0, "t_kin": 0.02}, "n_seeds": 3}
    md = R.render_markdown({"config": {"seeds": [0, 1, 2]}, "tasks": {"t": {"methods": {"a": entry}}}})
    assert _row(md, "t", "a") == "| a | **0.5 ± 0.01** | 1 | 0.9 ± 0.02 | 60 |"
