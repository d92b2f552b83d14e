"""One source of truth per method: a rival is its `l2e` sampler + its method module + one registry line.

A throw-away method written in a temporary package outside the repository (a `single_chain_method` over `l2e.sgld`
with its own grids, card builder, step-cost probe and audit flag) and registered by its one line — the
`L2E_METHODS` entry, the registry's line for a module outside evaluate/methods — appears in every table that lists
methods: the presets (`full`, `references`, `regression_1d` with its grids), the settings groups (`--set
settings.<name>.…`), the tests' smoke settings, the sampler card's builders, bench.step_cost's rows and
bench.defaults_audit's methods; and it runs end to end through `python -m evaluate`. A bad entry is one `error:`
line and a non-zero exit before anything is written.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

MODULE = '''
"""A throw-away rival: SGLD under another name."""
import dataclasses

import l2e
from evaluate.methods.base import always, check_grid, lr_grid
from evaluate.methods.factory import single_chain_method


@dataclasses.dataclass(frozen=True)
class ThrowawaySettings:
    lrs: tuple[float, ...] = (0.002, 0.004)

    def __post_init__(self):
        check_grid(self, "settings.throwaway", "lrs")


METHOD = single_chain_method(
    "throwaway", l2e.sgld, ThrowawaySettings, lr_grid, audit=True,
    grids=dict(every=dict(lrs=(0.001, 0.002)), full=dict(lrs=(0.001, 0.002, 0.004, 0.008)), smoke=dict(lrs=(0.003,))),
    card=lambda post, eps, c, smin, steps: (l2e.sgld(post, eps * smin * post.data_size), always),
    step_cost=lambda post, fpost: {"throwaway": l2e.sgld(post, 1e-3)})
'''

PROBE = '''
import json
from evaluate.config import PRESETS, apply_overrides
from evaluate.methods.registry import preset_grids
from evaluate.card.run import hand_designed
import bench.step_cost, bench.defaults_audit
cfg = apply_overrides(PRESETS["full"], ["settings.throwaway.lrs=0.5,0.25"])
print(json.dumps(dict(
    full=list(PRESETS["full"].methods), references=list(PRESETS["references"].methods),
    regression_1d=list(PRESETS["regression_1d"].methods),
    full_lrs=list(PRESETS["full"].settings.throwaway.lrs), every_lrs=list(PRESETS["regression_1d"].settings.throwaway.lrs),
    default_lrs=list(PRESETS["default"].settings.throwaway.lrs), override=list(cfg.settings.throwaway.lrs),
    smoke=preset_grids("smoke").get("throwaway"), card=list(hand_designed()),
    step_cost=list(bench.step_cost.BASELINES), audit=list(bench.defaults_audit.METHODS))))
'''


def _env(tmp_path, entry: str) -> dict:
    pkg = tmp_path / "theirs"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rival.py").write_text(textwrap.dedent(MODULE))
    env = dict(os.environ, L2E_METHODS=entry)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_a_method_outside_the_repository_is_in_every_table(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=_env(tmp_path, "theirs.rival"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for preset in ("full", "references", "regression_1d"):
        assert got[preset][-1] == "throwaway", preset  # registered after METHOD_MODULES
    assert got["full_lrs"] == [0.001, 0.002, 0.004, 0.008] and got["every_lrs"] == [0.001, 0.002]
    assert got["default_lrs"] == [0.002, 0.004]  # the settings' defaults where no grid is declared
    assert got["override"] == [0.5, 0.25]
    assert got["smoke"] == {"lrs": [0.003]}
    assert got["card"][-1] == "throwaway" and "sgld" in got["card"]
    assert "throwaway" in got["step_cost"] and got["step_cost"][0] == "sghmc"
    assert got["audit"][-1] == "throwaway"


def test_a_method_outside_the_repository_runs_through_the_evaluation(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evaluate", "--preset", "smoke", "--output", str(out), "--set", "methods=throwaway",
           "--set", "settings.throwaway.lrs=0.003", "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path, "theirs.rival"), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    (task,) = report["tasks"].values()
    row = task["methods"]["throwaway"]
    assert row["hyperparameters"]["learning_rate"] == 0.003 and row["divergent_chains"] == 0
    assert row["num_samples"] == report["config"]["num_samples"]


@pytest.mark.parametrize("entry, says", [
    ("theirs.missing", "No module named 'theirs.missing'"),
    ("theirs.rival:NOPE", "no METHOD_TABLE entry or attribute 'NOPE'"),
    ("os.path", "has no attribute 'METHOD'"),
])
def test_a_bad_method_entry_is_one_error_line_before_anything_is_written(tmp_path, entry, says):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "evaluate", "--preset", "smoke", "--output", str(out)], cwd=ROOT,
                          env=_env(tmp_path, entry), capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: L2E_METHODS"), proc.stderr
    assert says in lines[0] and not out.exists()


def test_the_cli_names_the_registry_variable():
    from evaluate.cli_common import METHODS_ENV
    from evaluate.methods.registry import ENV

    assert METHODS_ENV == ENV


SAMPLERS = '''
"""A user's samplers, written against l2e's interface only."""
import l2e
from l2e.types import SamplingAlgorithm


def my_sgld(posterior, learning_rate):
    return l2e.sgld(posterior, learning_rate)


my_sgld.grid = {"learning_rate": (0.003, 0.01)}


def fixed(posterior):
    return l2e.sgld(posterior, 0.003)


not_a_factory = 3


def wrong_args(a, b, c):
    return None


def wrong_return(posterior):
    return 42


def wrong_state(posterior):
    alg = l2e.sgld(posterior, 0.003)
    return SamplingAlgorithm(alg.init, lambda key, state, batch: (state.position, None))


def bad_grid(posterior, learning_rate):
    return l2e.sgld(posterior, learning_rate)


bad_grid.grid = "0.1"
'''


def _user_env(tmp_path) -> dict:
    env = _env(tmp_path, "")
    (tmp_path / "theirs" / "samplers.py").write_text(textwrap.dedent(SAMPLERS))
    return env


def test_a_users_sampler_factory_runs_through_the_evaluation(tmp_path):
    """`--method pkg.module:NAME` on a bare factory with a grid attribute: tuned over its grid beside the preset's
    methods, without editing the repository."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evaluate", "--preset", "smoke", "--output", str(out), "--set", "methods=sghmc",
           "--set", "settings.sghmc.lrs=0.03", "--method", "theirs.samplers:my_sgld", "--method=theirs.samplers:fixed",
           "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_user_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    (task,) = report["tasks"].values()
    assert set(task["methods"]) == {"sghmc", "my_sgld", "fixed"}
    mine = task["methods"]["my_sgld"]
    assert mine["hyperparameters"]["learning_rate"] in (0.003, 0.01) and mine["divergent_chains"] == 0
    assert mine["grad_evals"] == report["config"]["num_steps"]
    assert task["methods"]["fixed"]["num_samples"] == report["config"]["num_samples"]


@pytest.mark.slow
def test_a_users_sampler_runs_on_the_curves(tmp_path):
    out = tmp_path / "curve"
    cmd = [sys.executable, "-m", "evaluate", "curve", "--reference", str(ROOT / "results" / "references"), "--task",
           "digits/mlp-32", "--output", str(out), "--set", "methods=sghmc", "--set", "settings.sghmc.lrs=0.03",
           "--set", "settings.sghmc.frictions=10", "--method", "theirs.samplers:my_sgld", "--budgets", "100,200",
           "--chains", "1", "--tune-budget", "100", "--seeds", "0", "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_user_env(tmp_path), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    task = json.loads((out / "curve.json").read_text())["tasks"]["digits/mlp-32"]
    assert set(task["methods"]) == {"sghmc", "my_sgld"}
    pts = task["methods"]["my_sgld"]["choices"]["validation"]["seeds"]["0"]
    assert [p["gradients"] for p in pts] == [100, 200] and all(0 <= p["tv"] <= 1 for p in pts)


@pytest.mark.parametrize("entry, says", [
    ("theirs.nowhere:my_sgld", "No module named 'theirs.nowhere'"),
    ("theirs.samplers:missing", "no METHOD_TABLE entry or attribute 'missing'"),
    ("theirs.samplers:not_a_factory", "not_a_factory is a int, neither an evaluate.methods.Method nor a sampler"),
    ("theirs.samplers:wrong_args", "wrong_args must be a factory (posterior, **hyperparameters) -> sampler"),
    ("theirs.samplers:wrong_return", "returned a int, not a sampler with init and step"),
    ("theirs.samplers:wrong_state", "wrong_state's step returns a state unlike its init's"),
    ("theirs.samplers:bad_grid", "bad_grid.grid must be a dict"),
    ("theirs.samplers:my_sgld --method theirs.samplers:my_sgld", "registered twice"),
])
def test_a_bad_user_sampler_is_one_error_line_before_anything_runs(tmp_path, entry, says):
    out = tmp_path / "run"
    flags = [x for e in entry.split(" --method ") for x in ("--method", e)]
    proc = subprocess.run([sys.executable, "-m", "evaluate", "--preset", "smoke", "--output", str(out), *flags],
                          cwd=ROOT, env=_user_env(tmp_path), capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert says in lines[0] and not out.exists(), lines[0]


def test_method_flags_leave_the_environment_and_other_subcommands_alone(monkeypatch):
    """`evaluate select --method sghmc` picks one of ours: nothing is registered; a plug-in --method in a process
    whose registry is already loaded is one ConfigError (not a silent no-op), and $L2E_METHODS is never changed."""
    import evaluate.methods.registry  # noqa: F401  (loaded, as in any in-process call after the first)
    from evaluate.cli_common import METHODS_ENV, register_method_flags
    from evaluate.config import ConfigError

    monkeypatch.delenv(METHODS_ENV, raising=False)
    register_method_flags(["select", "runs/x", "--method", "sghmc"])
    assert METHODS_ENV not in os.environ
    with pytest.raises(ConfigError, match="registry is already loaded"):
        register_method_flags(["--preset", "smoke", "--method", "theirs.samplers:my_sgld"])
    assert METHODS_ENV not in os.environ


def test_a_users_top_level_module_is_imported_as_given(tmp_path, monkeypatch):
    """`--method mysamplers:my_sgld` names a top-level module of the user's (no package): it is imported as given,
    not looked up among evaluate/methods/ (which a bare name of ours means)."""
    from evaluate.methods.registry import _load

    (tmp_path / "mysamplers_l2e_test.py").write_text(textwrap.dedent(SAMPLERS))
    monkeypatch.syspath_prepend(str(tmp_path))
    methods = _load(["mysamplers_l2e_test:my_sgld"], {}, ours=False)
    assert list(methods) == ["my_sgld"] and methods["my_sgld"].points(None) == [
        {"learning_rate": 0.003}, {"learning_rate": 0.01}]
    with pytest.raises(ModuleNotFoundError):
        _load(["mysamplers_l2e_test:my_sgld"], {})  # ours: a bare name is evaluate.methods.<name>
