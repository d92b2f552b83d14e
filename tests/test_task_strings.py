"""Task strings (tasks.spec_parse / tasks.task_strings), the user's npz / csv loaders, --task / --model in
`python -m evaluate` and `evaluate reference`, meta-training task lists and the `mixed` preset, and the README's
"Evaluate on your own data" section.  Bad input: one `error:` line naming the file and the key or column, exit
status 2, nothing written."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks import RegressionSpec, TaskSpec
from tasks.data.base import DatasetError
from tasks.models import ModelSpec
from tasks.spec_parse import GRAMMAR, TaskStringError, parse_task_string
from tasks.task_strings import resolve_task

from conftest import DATA_DIR, ROOT

UCI_DIR = DATA_DIR / "uci"
TINY = ["--preset", "smoke", "--quiet", "--set", "methods=l2e,sghmc", "--set", "tune=false"]


def _npz(path: Path, n=60, m=20, d=3, classes=None, **replace) -> Path:
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.normal(size=(n, d)).astype(np.float32), "x_test": rng.normal(size=(m, d)).astype(np.float32)}
    if classes:
        arrays |= {"y_train": np.arange(n) % classes, "y_test": np.arange(m) % classes}
    else:
        arrays |= {"y_train": rng.normal(size=n).astype(np.float32), "y_test": rng.normal(size=m).astype(np.float32)}
    arrays.update(replace)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _table(n=40, label=False) -> str:
    rng = np.random.default_rng(1)
    rows = ["a,b,price"] + [f"{rng.normal():.4f},{rng.normal():.4f},{i % 3 if label else rng.normal():.4g}"
                            for i in range(n)]
    return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- the parser


@pytest.mark.parametrize("text, dataset, model, options", [
    ("uci:naval-propulsion-plant/mlp-50", "uci:naval-propulsion-plant", ModelSpec("mlp", hidden=(50,)), {}),
    ("kmnist/cnn-c8-d2-res", "kmnist", ModelSpec("cnn", channels=8, depth=2, residual=True), {}),
    ("breast_cancer/mlp-32x32-tanh", "breast_cancer", ModelSpec("mlp", hidden=(32, 32), activation="tanh"), {}),
    ("npz:data/mine.npz/mlp-64", "npz:data/mine.npz", ModelSpec("mlp", hidden=(64,)), {}),
    ("csv:data/mine.csv:target=price/mlp-32x32", "csv:data/mine.csv:target=price", ModelSpec("mlp", hidden=(32, 32)),
     {"target": "price"}),
    ("cifar10/resnet20-frn", "cifar10", ModelSpec("resnet20_frn"), {}),
    ("digits/mlp-linear:prior=0.5:valid=0.3:max=100", "digits", ModelSpec("mlp", hidden=()),
     {"prior": 0.5, "valid": 0.3, "max": 100}),
    ("kmnist/cnn-c4-d1:data=../x/kmnist", "kmnist", ModelSpec("cnn", channels=4, depth=1), {"data": "../x/kmnist"}),
    ("cifar10_corrupted/fog_3/resnet20-frn", "cifar10_corrupted/fog_3", ModelSpec("resnet20_frn"), {}),
    ("npz:data/mine.npz:likelihood=regression", "npz:data/mine.npz", None, {"likelihood": "regression"}),
])
def test_parse(text, dataset, model, options):
    p = parse_task_string(text)
    assert (p.dataset, p.model, p.options) == (dataset, model, options)


@pytest.mark.parametrize("text, words", [
    ("", "empty task string"),
    ("digits/foo", "'foo' is not a model"),
    ("digits/mlp-0", "'mlp-0' is not a model"),
    ("digits/mlp-32-sigmoidal", "is not a model"),
    ("digits/mlp-32:bogus=1", "unknown option 'bogus'"),
    ("digits/mlp-32:prior=-1", "bad value for prior"),
    ("digits/mlp-32:valid=1.5", "bad value for valid"),
    ("digits/mlp-32:prior=1:prior=2", "given twice"),
    ("digits/mlp-32:prior", "is not KEY=VALUE"),
    ("csv:a.csv/mlp-8", "needs :target=COLUMN"),
    ("uci:yacht/mlp-50:valid=0.1", "valid= applies only to"),
    ("digits/mlp-8:target=y", "target= applies only to csv:"),
])
def test_parse_errors(text, words):
    with pytest.raises(TaskStringError, match=re.escape(words)):
        parse_task_string(text)


def test_resolve_specs_and_likelihoods():
    r = resolve_task("uci:yacht/mlp-50-tanh:protocol=standard:split=2:prior=0.5")
    assert r.spec == RegressionSpec("uci:yacht", hidden=(50,), prior_variance=0.5, split=2, protocol="standard",
                                    activation="tanh")
    assert r.likelihood == "regression" and r.spec.name == "uci:yacht[standard-2]/mlp-50-tanh"
    r = resolve_task("digits/cnn-c4-d1:valid=0.3:max=200")
    assert r.spec == TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1), max_train=200, valid=0.3)
    assert "classification" in r.note
    for text, words in (("digits/mlp-8:likelihood=regression", "is a registered classification set"),
                        ("uci:yacht/cnn-c4-d1", "takes an MLP"), ("uci:yacht/mlp-8:split=1", "needs protocol=standard"),
                        ("digits/mlp-8:weight=2", "weight= is for meta-training"), ("digits", "names no model")):
        with pytest.raises(TaskStringError, match=re.escape(words)):
            resolve_task(text)


def test_grammar_is_in_help_and_docs():
    from evaluate.__main__ import build_parser, build_reference_parser

    assert GRAMMAR in build_parser().format_help() and GRAMMAR in build_reference_parser().format_help()
    assert GRAMMAR in (ROOT / "docs" / "data.md").read_text()
    assert "../shared" not in GRAMMAR


# ----------------------------------------------------------------------------- the loaders


def test_npz_classification_and_regression(tmp_path):
    import tasks

    cls = _npz(tmp_path / "c.npz", classes=3)
    r = resolve_task(f"npz:{cls}/mlp-8:valid=0.4")
    assert r.likelihood == "classification" and "integer targets in key 'y_train'" in r.why
    task = tasks.build(r.spec)
    assert task.num_classes == 3 and task.data_size == 36 and task.splits.test[0].shape == (20, 3)
    np.testing.assert_allclose(np.asarray(task.splits.train[0]).mean(0), 0, atol=0.3)  # z-scored (train split)
    reg = _npz(tmp_path / "r.npz")
    r = resolve_task(f"npz:{reg}/mlp-8:max=40")
    assert r.likelihood == "regression" and "non-integer targets" in r.why
    task = tasks.build(r.spec)
    assert task.data_size == 40 and task.splits.inner_valid[0].shape == (6, 3)  # valid 0.1 of 60, then max 40
    ambiguous = _npz(tmp_path / "a.npz", y_train=np.zeros(60, np.float32))
    with pytest.raises(DatasetError, match="add :likelihood=classification or :likelihood=regression"):
        resolve_task(f"npz:{ambiguous}/mlp-8")
    assert resolve_task(f"npz:{ambiguous}/mlp-8:likelihood=regression").likelihood == "regression"


def test_csv_classification_and_regression(tmp_path):
    import tasks

    reg = _csv(tmp_path / "r.csv", _table())
    r = resolve_task(f"csv:{reg}:target=price:test=0.25/mlp-8")
    assert r.likelihood == "regression"
    task = tasks.build(r.spec)
    assert task.input_shape == (2,) and task.splits.test[0].shape == (10, 2) and task.data_size == 27
    assert abs(float(np.mean(task.data.y_train))) < 1e-5 and abs(float(np.std(task.data.y_train)) - 1) < 1e-5
    lab = _csv(tmp_path / "c.csv", _table(label=True))
    task = tasks.build(resolve_task(f"csv:{lab}:target=price/mlp-8").spec)
    assert task.kind == "classification" and task.num_classes == 3


# ----------------------------------------------------------------------------- bad input: one line, nothing written


def _bad_cases(tmp: Path):
    n = 60
    yield f"npz:{_npz(tmp / 'k.npz', y_test=None)}/mlp-8", "k.npz: missing key 'y_test'"
    yield f"npz:{_npz(tmp / 's.npz', y_train=np.zeros(n - 1))}/mlp-8", "'x_train' has 60 examples, 'y_train' 59"
    yield f"npz:{_npz(tmp / 'f.npz', x_test=np.ones((20, 4), np.float32))}/mlp-8", "key 'x_test' has examples of shape (4,)"
    x = np.zeros((n, 3), np.float32)
    x[7, 1] = np.nan
    yield f"npz:{_npz(tmp / 'n.npz', x_train=x)}/mlp-8", "n.npz: key 'x_train' holds NaN or inf (first in example 7)"
    yield f"npz:{_npz(tmp / 'i.npz', y_test=np.full(20, np.inf, np.float32))}/mlp-8", "key 'y_test' holds NaN or inf"
    yield (f"npz:{_npz(tmp / 'l.npz', classes=3, y_test=np.arange(20) % 5)}/mlp-8",
           "l.npz: key 'y_test' has label 4 outside the class range [0, 3)")
    yield f"npz:{_npz(tmp / 'c.npz', classes=3)}:classes=2/mlp-8", "key 'y_train' has label 2 outside the class range [0, 2)"
    yield f"npz:{_npz(tmp / 'o.npz', y_train=np.array(['a'] * n))}/mlp-8", "o.npz: key 'y_train' is not numeric"
    yield f"npz:{tmp / 'absent.npz'}/mlp-8", "absent.npz: file not found"
    lines = _table().splitlines()
    red = [lines[0], "red," + lines[1].split(",", 1)[1]] + lines[2:]
    yield f"csv:{_csv(tmp / 'x.csv', chr(10).join(red))}:target=price/mlp-8", "x.csv: column 'a' is not numeric (line 2: 'red')"
    lines[5] = lines[5].split(",")[0] + ",nan," + lines[5].split(",")[2]
    yield f"csv:{_csv(tmp / 'y.csv', chr(10).join(lines))}:target=price/mlp-8", "y.csv: column 'b' has a non-finite value (line 6"
    yield f"csv:{_csv(tmp / 'z.csv', _table())}:target=cost/mlp-8", "z.csv: no column 'cost' for :target= (columns: a, b, price)"
    lines[3] = "1,2"
    yield f"csv:{_csv(tmp / 'w.csv', chr(10).join(lines))}:target=price/mlp-8", "w.csv: line 4 has 2 values"
    yield "digits/mlp-8:bogus=1", "unknown option 'bogus'"


def _one_error_line(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_bad_input_is_one_line_before_anything_is_written(tmp_path, capsys):
    from evaluate.__main__ import main

    out = tmp_path / "out"
    for spec, words in _bad_cases(tmp_path):
        for argv in (["--task", spec, "--output", str(out), *TINY],
                     ["reference", "--task", spec, "--output", str(out), "--chains", "1", "--samples", "4"]):
            assert main(argv) == 2, (spec, argv[0])
            line = _one_error_line(capsys)
            assert words in line, (words, line)
            assert not out.exists(), spec


@pytest.mark.slow
def test_bad_input_exit_status_and_model_errors(tmp_path):
    """The real process: exit status 2, one stderr line, no output directory (also for --model problems)."""
    reg = _npz(tmp_path / "r.npz")
    (tmp_path / "usermodels.py").write_text(
        "import flax.linen as nn\n"
        "def wrong(input_shape, num_outputs):\n    return nn.Dense(num_outputs + 1)\n")
    out = tmp_path / "out"
    for args, words in ((["--task", f"npz:{reg}", "--model", "usermodels:wrong"], "outputs (2, 3) for a batch of 2"),
                        (["--task", f"npz:{reg}", "--model", "nosuchmodule:f"], "cannot import 'nosuchmodule'"),
                        (["--task", f"npz:{reg}/mlp-4", "--model", "usermodels:wrong"], "--model usermodels:wrong is not used"),
                        (["--model", "usermodels:wrong"], "--model needs --task"),
                        (["--task", f"npz:{tmp_path / 'none.npz'}/mlp-4"], "none.npz: file not found")):
        proc = subprocess.run([sys.executable, "-m", "evaluate", *args, "--output", str(out), *TINY], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], proc.stderr
        assert not out.exists()


# ----------------------------------------------------------------------------- runs


@pytest.mark.slow
def test_user_model_and_mlp_tasks_evaluate(tmp_path, monkeypatch, capsys):
    """--model for the tasks without /MODEL, an MLP for the other; the report states each likelihood."""
    import json

    from evaluate.__main__ import main

    (tmp_path / "usermodels.py").write_text(
        "import flax.linen as nn\n"
        "class Net(nn.Module):\n    k: int\n"
        "    @nn.compact\n    def __call__(self, x):\n        return nn.Dense(self.k)(nn.tanh(nn.Dense(4)(x)))\n"
        "def small(input_shape, num_outputs):\n    return Net(num_outputs)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg, cls = _npz(tmp_path / "r.npz"), _npz(tmp_path / "c.npz", classes=2)
    out = tmp_path / "out"
    argv = ["--task", f"npz:{reg}", "--task", f"npz:{cls}/mlp-4", "--model", "usermodels:small", "--output", str(out),
            *TINY, "--set", "num_steps=30"]
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    entries = report["tasks"]
    assert set(entries) == {f"npz:{reg}/usermodels:small", f"npz:{cls}/mlp-4"}
    assert entries[f"npz:{reg}/usermodels:small"]["kind"] == "regression"
    assert "likelihood regression (inferred" in entries[f"npz:{reg}/usermodels:small"]["held_out"]
    assert "likelihood classification (inferred" in (out / "report.md").read_text()


@pytest.mark.slow
def test_meta_training_task_lists(tmp_path, monkeypatch):
    """`--set tasks=...` (comma list and @file), weights, a regression task among them, config round trip."""
    import jax

    from meta_train.config import from_dict
    from meta_train.presets import PRESETS
    from meta_train.train import meta_train
    from base.io import ConfigError
    from cli import apply_overrides

    reg = _npz(tmp_path / "r.npz")
    listing = tmp_path / "tasks.txt"
    listing.write_text(f"# my tasks\nnpz:{reg}/mlp-4:weight=3\ndigits/mlp-8:max=200\n")
    for value in (f"npz:{reg}/mlp-4:weight=3,digits/mlp-8:max=200", f"@{listing}"):
        cfg = apply_overrides(PRESETS["smoke"], [f"tasks={value}", "num_outer=2", "checkpoint_every=1"])
        assert cfg.tasks.weights == (3.0, 1.0) and from_dict(cfg.to_dict()) == cfg
    draws = [cfg.tasks.sample(jax.random.PRNGKey(i)).name for i in range(200)]
    assert 0.6 < draws.count(f"npz:{reg}/mlp-4") / 200 < 0.9
    for bad, words in (("tasks=digits/mlp-8,digits/mlp-8", "names the same task twice"),
                       ("tasks=digits", "names no model"), (f"tasks=@{tmp_path / 'none.txt'}", "cannot read")):
        with pytest.raises(ConfigError, match=words):
            apply_overrides(PRESETS["smoke"], [bad])
    summary = meta_train(cfg, tmp_path / "mt", progress=False)
    rows = (tmp_path / "mt" / "log.jsonl").read_text().splitlines()
    assert summary["iterations"] == 2 and len(rows) == 2 and np.isfinite(summary["final_meta_loss"])


def test_mixed_preset_resolves_and_loads(tmp_path):
    from meta_train.presets import PRESETS

    mixed = PRESETS["mixed"].tasks
    specs, weights = mixed.specs(), mixed.weights
    kinds = {"cnn": 0.0, "mlp-cls": 0.0, "regression": 0.0}
    for spec, w in zip(specs, weights):
        key = "regression" if isinstance(spec, RegressionSpec) else ("cnn" if spec.model.kind == "cnn" else "mlp-cls")
        kinds[key] += w / sum(weights)
    assert all(abs(v - 1 / 3) < 1e-9 for v in kinds.values()), kinds
    names = " ".join(s.name for s in specs)
    assert not any(h in names for h in ("breast_cancer", "naval", "power-plant", "wine-quality-red"))
    if not UCI_DIR.is_dir():
        pytest.skip(f"UCI data not present at {UCI_DIR}: the mixed preset's tasks are not loaded")
    from meta_train.es import ProgramCache
    from meta_train.train import check_inputs

    check_inputs(PRESETS["mixed"], ProgramCache())  # every task of the preset builds (data present, shapes fit)


@pytest.mark.slow
def test_readme_section_runs(tmp_path, monkeypatch, capsys):
    """The README's "Evaluate on your own data" commands: the data snippet verbatim, the evaluate command verbatim
    plus TINY (the smoke preset's budget, two methods, no tuning; the command itself is run verbatim by hand)."""
    from evaluate.__main__ import main

    text = (ROOT / "README.md").read_text().split("## Evaluate on your own data", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    snippet = block.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    command = block.split("\nEOF\n", 1)[1].strip()
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "README.md (the data snippet)", "exec"), {"__name__": "__main__"})  # python - <<'EOF'
    argv = shlex.split(command)
    assert argv[:3] == [".venv/bin/python", "-m", "evaluate"], argv
    assert main(argv[3:] + TINY) == 0, capsys.readouterr().err
    out = tmp_path / argv[argv.index("--output") + 1]
    report = (out / "report.md").read_text()
    assert "likelihood regression (inferred: non-integer targets in key 'y_train')" in report
    assert "runs/mine/report.md" in text and "Held out:" in report


def test_seed_curves_of_different_lengths_average_their_common_points():
    """A seed whose divergent sample was dropped has a shorter BMA curve (found with --task uci:... --seeds 0,1)."""
    from evaluate.seeds import _curve

    c = _curve([{"num_samples": [1], "lppd": [-1.0]}, {"num_samples": [1, 2], "lppd": [-2.0, -3.0]}])
    assert c["num_samples"] == [1] and c["lppd"] == [-1.5] and len(c["lppd_sd"]) == 1
