"""The baselines of `python -m evaluate` beyond L2E/SGHMC/cSGHMC/DE (psgld, fsghmc, noisy_de, mile, nuts_bde), the
regression path (LPPD/RMSE/calibration, 1-D band), ESS / barrier fields, the HMC reference row, divergence and
determinism — all through `evaluate()` on tiny tasks with smoke-sized budgets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evaluate.config import METHODS, ConfigError, EvalConfig, apply_overrides, get_preset
from evaluate.entries import band, hmc_entry, mixture_interval
from evaluate.methods import REGISTRY
from evaluate.methods.registry import preset_grids
from evaluate.run import evaluate, load_l2e
from tasks import build
from tasks.regression import RegressionSpec

from conftest import TINY_EVAL, iris_mlp, tiny_eval_config

G, K, B = TINY_EVAL["num_steps"], TINY_EVAL["num_samples"], TINY_EVAL["batch_size"]  # 40, 4, 16
SETTINGS = preset_grids("smoke")
"""Every method's smoke settings (Method.grids["smoke"]: one grid point, tiny full-batch budgets)."""
MILE_STEPS, MILE_SAMPLES, MILE_THIN = (SETTINGS["mile"][k] for k in ("steps", "samples", "thinning"))
FULL_BATCH_METHODS = tuple(m for m in METHODS if REGISTRY[m].full_batch)
ENSEMBLES = ("deep_ensemble", "noisy_de")
COUPLED = ("policy", "policy_learned")
"""Policy-L2E: M chains in one run (the smoke settings: 2 chains of 2 draws): no single-chain ESS, a T_kin per chain,
no FLOPs count of its update (not built yet)."""
MOMENTUM_METHODS = ("l2e", "l2e_released", "l2e_mass", "l2e_kinetic", "meta_sgmcmc", "precond_l2e", "small_l2e", "sghmc",
                    "sghmc_tempered", "csghmc", "fsghmc", "sgnht", "baoab", "precond_rmsprop", "precond_fisher",
                    "adaptive_sghmc", "warm_sghmc", "l2e_transient", "sghmc_cv")
CLS = iris_mlp(8)
REG = RegressionSpec("synthetic_1d", hidden=(8,))
TIMING = {"seconds", "ess_per_second", "fs_ess_per_second", "seconds_per_step", "sghmc_seconds_per_step", "seconds_per_step_vs_sghmc"}


def tiny(spec, methods=METHODS, settings=None, **kw) -> EvalConfig:
    """conftest.tiny_eval_config with every method's SETTINGS (`settings` replace them per method); l2e_released
    optional (skipped without its file)."""
    return tiny_eval_config(spec, methods, {**SETTINGS, **(settings or {})},
                            **{"optional_methods": ("l2e_released",), **kw})


@pytest.fixture(scope="module")
def sampler():
    return load_l2e()


@pytest.fixture(scope="module")
def cls_results(sampler):
    return evaluate(tiny(CLS), None, progress=False, sampler=sampler)


@pytest.fixture(scope="module")
def reg_results(sampler):
    return evaluate(tiny(REG), None, progress=False, sampler=sampler)


def strip_timing(x):
    if isinstance(x, dict):
        return {k: strip_timing(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [strip_timing(v) for v in x]
    return x


def _ran(results: dict) -> set:
    """Every registered method but those skipped for a missing input (l2e_released without its file)."""
    return set(METHODS) - set(results["config"].get("skipped_methods", {}))


def _check_common(task: dict, n_train: int, ran: set):
    assert set(task["methods"]) == ran
    for name, m in task["methods"].items():
        assert m["divergent_chains"] == 0, name
        assert m["seconds"] > 0
        if name in FULL_BATCH_METHODS:
            assert m["gradient"] == f"full-batch (N={n_train})" and m["budget"].startswith("own")
            assert m["epochs"] == pytest.approx(m["grad_evals"])
            assert m["num_samples"] == 2 * (MILE_SAMPLES if name == "mile" else 4)
            ess = m["ess"]
            assert ess["chains"] == 2 and ess["draws_per_chain"] == 4
            assert m["hyperparameters"]["warm_start"]["method"] == "deep_ensemble"
        else:
            split = m["hyperparameters"].get("gradients", {})  # a CV rival's; over budget when G < its data pass
            spent = split["total"] if split.get("over_budget") else G
            assert m["grad_evals"] == spent and (spent == G or spent < G + 2 * K + n_train / B + 1), name
            assert m["gradient"] == f"minibatch (B={B})"
            assert m["epochs"] == pytest.approx(spent * B / n_train)
            assert m["num_samples"] == K
            if name in ENSEMBLES + COUPLED:
                assert m["ess"] is None
            else:
                assert m["ess"]["chains"] == 1 and m["ess"]["draws_per_chain"] == K
        if m["ess"] is not None:
            e = m["ess"]
            assert e["estimator"].startswith("Geyer single-chain ESS")
            assert 0 < e["mean_ess"] and 0 < e["median_ess"] and e["ess_per_second"] > 0 and e["ess_per_1k_grads"] > 0
            assert 0.0 <= e["frac_chainwise_rhat_below_1.1"] <= 1.0 and e["rhat_splits"] == 2
            assert 0 < e["fs_mean_ess"] and e["fs_ess_per_second"] > 0 and e["fs_ess_per_1k_grads"] > 0
        assert m["temperature"] == ("n/a (optimiser)" if name == "deep_ensemble" else 0.001 if
                                    name == "l2e_released" else 1.0), name
        if name in COUPLED:  # T_kin of each of its 2 chains; no FLOPs count of its update yet
            assert len(m["t_kin_per_chain"]) == 2 and m["t_kin"] > 0 and m["flops_per_step"] is None, name
        elif name in MOMENTUM_METHODS:  # T_kin of one chain (the full-batch methods: no kinetic term reported)
            assert len(m["t_kin_per_chain"]) == 1 and m["t_kin"] > 0, name
        else:
            assert m["t_kin"] is None, name
        assert (m["flops_per_step"] is None) == (name in FULL_BATCH_METHODS + COUPLED), name
        b = m["barrier"]
        assert len(b["lambdas"]) == 21 and len(b["error"]) == 21 and len(b["nll"]) == 21
        assert math.isfinite(b["error_barrier"]) and math.isfinite(b["nll_barrier"]) and b["error_barrier"] >= -1e-9
        assert b["pair"] == ("members 0 and 1" if name in ENSEMBLES else "first and last sample of chain 0")
    mile = task["methods"]["mile"]
    assert mile["grad_evals"] == 2 * 2 * (sum(MILE_STEPS) + MILE_SAMPLES * MILE_THIN)
    assert task["methods"]["nuts_bde"]["grad_evals"] > 0
    assert task["methods"]["fsghmc"]["hyperparameters"]["seconds_per_step_vs_sghmc"] > 0
    assert task["methods"]["fsghmc"]["hyperparameters"]["cholesky_ok"] is True


@pytest.mark.slow
def test_classification_every_method(cls_results):
    (task,) = cls_results["tasks"].values()
    assert task["kind"] == "classification" and task["data"]["classes"] == 3
    _check_common(task, build(CLS).data_size, _ran(cls_results))
    for name, m in task["methods"].items():
        for key in ("acc", "nll", "ece", "pairwise_kld"):
            assert math.isfinite(m[key]), (name, key)
        assert m["curve"]["num_samples"] == list(range(1, m["num_samples"] + 1))
        assert len(m["curve"]["acc"]) == m["num_samples"]
        if REGISTRY[name].tuned:
            points = REGISTRY[name].points(getattr(tiny(CLS).settings, name))
            assert m["hyperparameters"]["tuned"] and len(m["hyperparameters"]["grid"]) == len(points)
    assert "band" not in task
    # the warm start is the reported deep ensemble: its lr is MILE's ε₀
    assert task["methods"]["mile"]["hyperparameters"]["step_size0"] == task["methods"]["deep_ensemble"][
        "hyperparameters"]["learning_rate"]


@pytest.mark.slow
def test_regression_every_method_and_band(reg_results):
    (task,) = reg_results["tasks"].values()
    assert task["kind"] == "regression" and "classes" not in task["data"]
    _check_common(task, build(REG).data_size, _ran(reg_results))
    for name, m in task["methods"].items():
        for key in ("lppd", "nll", "rmse", "calibration_error"):
            assert math.isfinite(m[key]), (name, key)
        assert m["nll"] == pytest.approx(-m["lppd"]) and len(m["coverage"]) == 4
        assert set(m["curve"]) == {"num_samples", "lppd", "rmse"} and len(m["curve"]["rmse"]) == m["num_samples"]
        assert "acc" not in m
    band = task["band"]
    n = task["data"]["test"]
    assert len(band["x"]) == len(band["y"]) == n and np.all(np.diff(band["x"]) >= 0)
    assert len(band["x_train"]) == len(band["y_train"]) == task["data"]["train"]
    assert set(band["methods"]) == _ran(reg_results)
    for m in band["methods"].values():
        lo, mean, hi = (np.asarray(m[k]) for k in ("lower", "mean", "upper"))
        assert lo.shape == (n,) and np.all(lo < hi) and np.all((lo <= mean + 1e-6) & (mean <= hi + 1e-6))


@pytest.mark.slow
def test_same_seed_same_numbers(cls_results, sampler):
    """Same seed, same numbers; the full-batch methods' warm start is the same DE whether or not it is reported."""
    methods = ("psgld", "fsghmc", "noisy_de", "mile", "nuts_bde")
    again = evaluate(tiny(CLS, methods=methods), None, progress=False, sampler=sampler)
    (first,) = cls_results["tasks"].values()
    (second,) = again["tasks"].values()
    for m in methods:
        a = strip_timing(first["methods"][m])
        b = strip_timing(second["methods"][m])
        assert a == b, m


@pytest.mark.slow
def test_divergent_new_methods_are_counted_and_excluded():
    cfg = tiny(CLS, methods=("psgld", "fsghmc", "noisy_de"), tune=False,
               settings=dict(psgld=dict(lrs=(1e6,)), fsghmc=dict(lrs=(1e8,), measurement_points=8),
                             noisy_de=dict(lrs=(1e8,))))
    (task,) = evaluate(cfg, None, progress=False)["tasks"].values()
    for name, m in task["methods"].items():
        assert m["divergent_chains"] > 0, name
        assert m["num_samples"] < m["num_samples_requested"], name
        assert m["grad_evals"] == G
        assert m["nll"] is None or math.isfinite(m["nll"])


def test_hmc_reference_row(tmp_path):
    """A classification reference gets its own "hmc" entry (acc / nll / ece of its probabilities)."""
    y = np.asarray(build(CLS).splits.test[1])
    n, c = y.shape[0], build(CLS).num_classes
    probs = np.full((n, c), 0.05 / (c - 1))
    probs[np.arange(n), y] = 0.95
    np.savetxt(tmp_path / "ref.txt", probs)
    cfg = tiny(CLS, methods=("sghmc",), tune=False)
    (task,) = evaluate(cfg, None, progress=False, references={None: tmp_path / "ref.txt"})["tasks"].values()
    hmc = task["methods"]["hmc"]
    assert hmc["acc"] == 1.0 and hmc["nll"] == pytest.approx(-math.log(0.95))
    assert hmc["gradient"].startswith("full-batch") and hmc["grad_evals"] is None  # a text file has no metadata
    assert hmc["source"] == str(tmp_path / "ref.txt")
    assert 0.0 <= task["methods"]["sghmc"]["agreement"] <= 1.0


def test_mixture_interval_single_gaussian():
    loc, scale = np.array([[0.0, 1.0]]), np.array([[1.0, 2.0]])
    mean, lo, hi = mixture_interval(loc, scale)
    assert np.allclose(mean, [0.0, 1.0]) and np.allclose(lo, [-1.959964, 1 - 2 * 1.959964], atol=1e-5)
    assert np.allclose(hi, [1.959964, 1 + 2 * 1.959964], atol=1e-5)
    mean, lo, hi = mixture_interval(np.array([[-5.0], [5.0]]), np.array([[1.0], [1.0]]))  # bimodal: wide
    assert mean[0] == 0.0 and lo[0] < -6 and hi[0] > 6


def test_presets_and_validation():
    full = get_preset("full")
    assert set(full.methods) == set(METHODS)
    kinds = {type(t).__name__ for t in full.tasks}
    assert kinds == {"TaskSpec", "RegressionSpec"}
    assert any(getattr(t, "dataset", "") == "uci:yacht" for t in full.tasks)
    assert get_preset("regression_1d").tasks[0].dataset == "synthetic_1d"
    assert get_preset("default").methods == ("l2e", "l2e_mass", "sghmc", "csghmc", "deep_ensemble")
    assert apply_overrides(full, ["settings.mile.steps=10,2,2"]).settings.mile.steps == (10, 2, 2)
    with pytest.raises(ConfigError, match="settings.mile.steps"):
        apply_overrides(full, ["settings.mile.steps=10,2"])
    with pytest.raises(ConfigError, match="settings.nuts_bde.chains"):
        apply_overrides(full, [f"settings.nuts_bde.chains={full.num_samples + 1}"])
    with pytest.raises(ConfigError, match="TaskSpec or RegressionSpec"):
        EvalConfig(tasks=("digits",))
    with pytest.raises(ConfigError, match="settings.psgld.lrs must hold positive"):
        apply_overrides(full, ["settings.psgld.lrs=-1"])
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        apply_overrides(full, ["methods=sghmc,nope"])


def test_regression_reference_row_and_band():
    """A regression reference ((S, n) loc / scale, as evaluate.reference returns) gets an "hmc" entry and band."""
    task = build(REG)
    y = np.asarray(task.splits.test[1])
    ref = {"path": "ref-dir", "kind": "regression", "loc": np.stack([y, y + 0.1]), "scale": np.full((2, y.size), 0.2),
           "metadata": {"num_grad_evals": 1234, "seconds": 5.0, "sampler": {"chains": 2, "total_draws": 2}}}
    e = hmc_entry(ref, task)
    assert e["grad_evals"] == 1234 and e["epochs"] == 1234 and e["seconds"] == 5.0 and e["num_samples"] == 2
    assert math.isfinite(e["lppd"]) and e["rmse"] == pytest.approx(0.05, abs=1e-6)
    b = band(task, {}, ref)
    assert set(b["methods"]) == {"hmc"} and len(b["methods"]["hmc"]["lower"]) == y.size


def test_scale_divergence_rule_judges_a_lone_chain_against_the_floor():
    """A run whose only chain blew up while staying finite (cSGHMC on the README's own-data example: RMSE 7,380
    standardised units) is divergent by scale; with several chains a member is judged against the others'
    median, and ordinary scales are not flagged."""
    from evaluate.methods.outputs import scale_divergent

    finite = np.ones(10, bool)
    lone = scale_divergent(np.full(10, 7380.0), np.zeros(10, int), finite)
    assert lone.all()
    assert not scale_divergent(np.full(10, 3.0), np.zeros(10, int), finite).any()
    scales = np.asarray([1.0, 2.0, 1.5, 1e4, 1.2, 0.8, 1.1, 2.5, 1.0, 1.3])
    members = np.arange(10)
    np.testing.assert_array_equal(scale_divergent(scales, members, finite), members == 3)
    # a member at 150 next to others at 3 (threshold 300) is kept; at 400 it is divergent
    assert not scale_divergent(np.asarray([3.0, 3.0, 150.0]), np.arange(3), np.ones(3, bool))[2]
    assert scale_divergent(np.asarray([3.0, 3.0, 400.0]), np.arange(3), np.ones(3, bool))[2]
    # an ensemble whose members all blew up (deep ensemble on UCI wine-red at the default grid: RMSE 2.6e5) is not
    # its own yardstick: the median is clipped at 100, so 10^4 is an absolute ceiling
    assert scale_divergent(np.asarray([2e5, 3e5, 2.5e5]), np.arange(3), np.ones(3, bool)).all()


def test_parameter_scale_rule_catches_weights_that_blew_up_behind_moderate_predictions():
    """A chain whose parameters grew to RMS 1e3 while every prediction stayed finite and moderate is divergent by
    parameter scale (finalise ORs it with the prediction-scale rule); draws within prior scale are not, and the
    yardstick's floor is max(1, prior standard deviation)."""
    from evaluate.methods.outputs import parameter_scale, scale_divergent

    rng = np.random.default_rng(0)
    samples = {"w": rng.normal(size=(4, 30, 5)), "b": rng.normal(size=(4, 5))}
    samples["w"][3] *= 1e3
    samples["b"][3] *= 1e3
    ps = parameter_scale(samples)
    assert ps[:3] == pytest.approx(1.0, rel=0.3) and ps[3] == pytest.approx(1e3, rel=0.3)
    finite = np.ones(4, bool)
    np.testing.assert_array_equal(scale_divergent(ps, np.arange(4), finite), [False, False, False, True])
    lone = parameter_scale({"w": np.full((2, 10), 150.0)})
    assert scale_divergent(lone, np.zeros(2, int), np.ones(2, bool), floor=1.0).all()
    assert not scale_divergent(lone, np.zeros(2, int), np.ones(2, bool), floor=2.0).any()  # ceiling 200
    assert parameter_scale({"w": np.array([[1.0, np.inf]])})[0] == np.inf


def test_failed_grids_are_rescued_with_smaller_learning_rates():
    """search(rescues=r): when no grid point scores finitely, the smallest lr ÷ the grid's ratio is tried, at most r
    times, stopping at the first finite score; a grid with a finite point is left alone."""
    from evaluate.tuning import search

    points = [{"learning_rate": lr, "friction": 10.0} for lr in (0.01, 0.03, 0.1)]
    tried = []

    def score(p):
        tried.append(p["learning_rate"])
        return float(p["learning_rate"]) if p["learning_rate"] < 0.002 else math.inf

    t = search(points, score, rescues=4)
    assert t.extended == ["rescue", "rescue"] and t.best["learning_rate"] == pytest.approx(0.01 / 9)
    assert t.best["friction"] == 10.0 and len(tried) == 5
    assert search(points, score, rescues=1).best == points[0]  # 0.0033 still fails: the first point, as before
    assert search(points, lambda p: 1.0, rescues=4).extended == []


def test_kinetic_tolerance_rejects_hot_chains_in_tuning():
    """kinetic_outside: a chain's T_kin outside [1 − tol, 1 + tol]·T (or missing) rejects the run; no tolerance, no
    numeric T or no T_kin record rejects nothing. Method.kinetic_check marks the correct fixed-step samplers only."""
    from evaluate.methods import get_method
    from evaluate.methods.outputs import MethodResult
    from evaluate.tuning import kinetic_outside

    def res(t_kin):
        return MethodResult(np.zeros((1, 1, 2)), 10, 0.0, 0, {}, t_kin=t_kin)

    assert not kinetic_outside(res([1.0, 1.24]), 1.0, 0.25)
    assert kinetic_outside(res([1.0, 1.26]), 1.0, 0.25) and kinetic_outside(res([1.0, None]), 1.0, 0.25)
    assert kinetic_outside(res([0.07]), 0.1, 0.25) and not kinetic_outside(res([0.09]), 0.1, 0.25)
    assert not kinetic_outside(res([5.0]), 1.0, None) and not kinetic_outside(res(None), 1.0, 0.25)
    assert not kinetic_outside(res([5.0]), "n/a (optimiser)", 0.25)
    checked = {m for m in ("sghmc", "baoab", "precond_fisher", "warm_sghmc", "l2e_mass", "l2e_transient", "l2e",
                           "csghmc", "deep_ensemble") if get_method(m).kinetic_check}
    assert checked == {"sghmc", "baoab", "precond_fisher", "warm_sghmc", "l2e_mass", "l2e_transient"}


def test_tuning_with_an_impossible_kinetic_band_rescues_then_falls_back():
    """End to end on a tiny task: with a kinetic band no short chain can meet (tol 1e-4), every SGHMC grid point and
    both rescue points are outside it, and the best validation score among them wins (as without the band); the
    report keeps the raw scores. Without the band the grid is tuned as before."""
    import jax

    from evaluate.methods.cache import CompileCache
    from evaluate.tuning import Progress, hp_label, search, tune

    task = build(iris_mlp(4))
    settings = {"sghmc": dict(lrs=(0.01, 0.03), frictions=(10.0,))}
    key = jax.random.PRNGKey(0)
    strict = tiny_eval_config(iris_mlp(4), ("sghmc",), settings, kinetic_tolerance=1e-4, failure_extensions=2)
    t = tune(task, key, "sghmc", strict, {}, CompileCache(), Progress())
    assert t.extended == ["rescue", "rescue"] and t.runs == 4 and len(t.kinetic_rejected) == 4
    assert all(v is not None and v < 1e6 for v in t.scores.values())
    best = min(t.scores, key=t.scores.get)
    assert best == hp_label(t.best)
    plain = tiny_eval_config(iris_mlp(4), ("sghmc",), settings)
    t = tune(task, key, "sghmc", plain, {}, CompileCache(), Progress())
    assert t.extended == [] and t.runs == 2 and t.kinetic_rejected == []
    # a point inside the band beats every point outside it, whatever their scores
    t = search([{"learning_rate": 0.1}, {"learning_rate": 0.03}], lambda p: 1e12 + 0.5 if p["learning_rate"] == 0.1
               else 3.0, rescues=2, acceptable=5e11)
    assert t.best == {"learning_rate": 0.03} and t.extended == []


def test_chain_allocation_validates_only_the_running_methods_settings():
    """With M = K chains a sub-run keeps one draw per chain; SMILE's 2 chains in the same config do not fit one draw,
    and must not stop SGHMC's allocated run (a curve with SMILE beside M = 10 methods once failed so)."""
    import jax

    from evaluate.methods.registry import run_method

    cfg = tiny_eval_config(iris_mlp(4), ("sghmc", "smile"), {"smile": {"chains": 2}}, chains=4)
    res = run_method("sghmc", build(iris_mlp(4)), tuple(jax.random.split(jax.random.PRNGKey(0))),
                     {"learning_rate": 0.01, "friction": 10.0}, cfg, "test")
    assert res.num_chains == 4 and res.num_requested == 4
