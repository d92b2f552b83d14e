"""Budget curves (evaluate.curve) and chain allocation (EvalConfig.chains).

- the energy distance E² (V-statistic) is 0 between a set and itself, ≥ 0, and a collapsed set of K copies of the
  reference mean scores above K exact draws: under-dispersion cannot win it (TV can);
- the K-draw floors are positive, their quantiles ordered, and deterministic (default_rng(0));
- the regression TV of two unit-scale Gaussians one apart is 2Φ(½) − 1 to 1e-4 (the 400-point grid);
- split_total_variations (the floors' fast path) equals bma_total_variation of each split to 1e-9, both likelihoods;
- gradients_to_floor interpolates linearly in log G, needs the dispersion ratios in band, returns the first budget
  when it already qualifies and None when no budget does;
- the predictive-variance band is calibrated to K exact draws: its divisor is their median ratio (within 0.06 of
  (K − 1)/K on iid draws), and fresh K-draw subsets of the reference (other resamples than the floors') fall in band
  in ≥ 85 % of 400 tries (the calibration is 90 %: 5–95 %), where the fixed [0.8, 1.25] band admits fewer than
  75 % of them on a predictive that varies along two directions; a ratio of 0.75 counts with that spread and not
  without it;
- --merge DIR --reference re-reads one run: the floors recomputed (E² unchanged, the spread added), every row's
  gradients to floor recomputed against them (evaluate.curve.fidelity.to_floor); one DIR without --reference is
  refused;
- the TV floor is what a method's K independent draws face: K reference draws against the BMA of the other S − K,
  whose median is within 4 % of the median TV of K fresh draws against the BMA of all S (S = 60, K = 10: against all
  S it would read sqrt(50/70) = 0.85 of it);
- chain allocation: M chains of G/M updates with K/M draws each, the gradients summed to G, chain ids 0..M−1, the
  first chain's keys folded (so M = 1 and M > 1 runs differ);
- the command end to end on the committed digits/mlp-32 reference (slow).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from evaluate.curve.fidelity import energy_distance, floors, gradients_to_floor
from tasks.likelihoods.categorical import Classification
from tasks.likelihoods.gaussian import GaussianRegression


def test_energy_distance_sees_under_dispersion_tv_does_not():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(400, 20))
    assert energy_distance(ref, ref) == pytest.approx(0.0, abs=1e-9)
    good, collapsed = [], []
    for _ in range(20):
        x = rng.normal(size=(10, 20))
        good.append(energy_distance(x, ref))
        collapsed.append(energy_distance(ref.mean(0) + 1e-3 * rng.normal(size=(10, 20)), ref))
    assert min(good) >= 0 and min(collapsed) > max(good)
    # TV of the BMA cannot tell: K copies of the reference BMA have TV 0 to it
    lp = np.log(rng.dirichlet(np.ones(4), size=(50, 30)))
    bma = np.log(np.exp(lp).mean(0))
    assert Classification.bma_total_variation(np.repeat(bma[None], 10, 0), lp) == pytest.approx(0.0, abs=1e-12)
    assert energy_distance(Classification.draw_vectors(np.repeat(bma[None], 10, 0)),
                           Classification.draw_vectors(lp)) > 0


def test_floors_positive_ordered_and_deterministic():
    rng = np.random.default_rng(2)
    lp = np.log(rng.dirichlet(np.ones(3), size=(60, 40)))
    a, b = floors(Classification, lp, 10, resamples=30), floors(Classification, lp, 10, resamples=30)
    assert a == b
    for key in ("tv", "energy"):
        assert 0 < a[key]["q10"] <= a[key]["median"] <= a[key]["q90"]
    with pytest.raises(ValueError, match="more reference draws"):
        floors(Classification, lp[:10], 10)


def test_tv_floor_is_what_independent_draws_face():
    rng = np.random.default_rng(5)
    base = rng.dirichlet(np.ones(3), size=40) * 6 + 0.5  # per test point, a Dirichlet law of the draws' probabilities

    def draws(n):
        return np.log(np.stack([np.stack([rng.dirichlet(b) for b in base]) for _ in range(n)]))

    ref = draws(60)
    floor = floors(Classification, ref, 10, resamples=200)["tv"]["median"]
    fresh = np.median([Classification.bma_total_variation(draws(10), ref) for _ in range(200)])
    assert floor == pytest.approx(fresh, rel=0.04), (floor, fresh)


@pytest.mark.parametrize("lik", [Classification, GaussianRegression])
def test_split_total_variations_equal_the_direct_tv(lik):
    rng = np.random.default_rng(4)
    if lik is Classification:
        out = np.log(rng.dirichlet(np.ones(4), size=(30, 70)))
    else:
        out = np.stack([rng.normal(size=(30, 70)), np.exp(0.3 * rng.normal(size=(30, 70)))], -1)
    subsets = [rng.choice(30, 5, replace=False) for _ in range(4)]
    direct = [lik.bma_total_variation(out[i], out[np.setdiff1d(np.arange(30), i)]) for i in subsets]
    np.testing.assert_allclose(lik.split_total_variations(out, subsets), direct, rtol=1e-9, atol=1e-12)


def test_regression_tv_matches_two_gaussians():
    a = np.stack([np.zeros((4, 5)), np.ones((4, 5))], -1)
    b = np.stack([np.ones((3, 5)), np.ones((3, 5))], -1)
    expected = 2 * norm.cdf(0.5) - 1
    assert GaussianRegression.bma_total_variation(a, b) == pytest.approx(expected, abs=1e-4)
    assert GaussianRegression.bma_total_variation(a, a) == pytest.approx(0.0, abs=1e-12)


def _pt(g, v, ratio=1.0):
    return {"gradients": g, "tv": v, "ratios": {"weight_norm": ratio, "predictive_variance": ratio}}


def test_gradients_to_floor_interpolates_in_log_budget():
    pts = [_pt(250, 0.2), _pt(1000, 0.05), _pt(4000, 0.01)]
    # threshold 1.1 × 0.05 = 0.055 between 250 (0.2) and 1000 (0.05): t = (0.2 − 0.055)/(0.2 − 0.05)
    t = (0.2 - 0.055) / 0.15
    assert gradients_to_floor(pts, "tv", 0.05) == pytest.approx(math.exp(math.log(250) + t * math.log(4)))
    assert gradients_to_floor(pts, "tv", 0.5) == 250.0  # the first budget already qualifies
    assert gradients_to_floor(pts, "tv", 0.001) is None
    out_of_band = [_pt(250, 0.2), _pt(1000, 0.05, ratio=0.5), _pt(4000, 0.04)]
    assert gradients_to_floor(out_of_band, "tv", 0.05) == 4000.0  # 1000 is below the threshold but out of band


def test_predictive_variance_band_is_calibrated_to_exact_draws():
    from evaluate.curve.fidelity import dispersion_band
    from evaluate.dispersion import predictive_variance

    rng = np.random.default_rng(3)
    s, k = 300, 10
    z = rng.normal(size=(s, 2))  # a predictive varying along two directions (like a small linear model's)
    loc = z @ rng.normal(size=(2, 40))
    ref = np.stack([loc, np.ones_like(loc)], -1)
    f = floors(GaussianRegression, ref, k, resamples=200)
    div, lo, hi = dispersion_band(f)["predictive_variance"]
    assert div == pytest.approx((k - 1) / k, abs=0.06) and lo <= 0.8 and hi >= 1.25
    full = predictive_variance(ref, "regression")
    ratios = np.array([predictive_variance(ref[rng.choice(s, k, replace=False)], "regression") / full
                       for _ in range(400)])
    assert np.mean((ratios / div >= lo) & (ratios / div <= hi)) >= 0.85
    assert np.mean((ratios >= 0.8) & (ratios <= 1.25)) < 0.75
    pts = [{"gradients": 100, "tv": 0.01, "ratios": {"weight_norm": 1.0, "predictive_variance": 0.75}}]
    assert gradients_to_floor(pts, "tv", 0.05, band=dispersion_band(f)) == 100.0
    assert gradients_to_floor(pts, "tv", 0.05) is None  # the fixed band (a run read without the spread)
    assert dispersion_band()["default"] == (1.0, 0.8, 1.25) and "predictive_variance" not in dispersion_band({})


def test_chain_allocation_splits_the_budget():
    import dataclasses

    from conftest import iris_mlp, tiny_eval_config
    from evaluate.methods import CompileCache, run_method
    from tasks import TaskCache, build

    cfg = tiny_eval_config(iris_mlp(8), ["sghmc"], thinning=None, tune=False)
    task = build(cfg.tasks[0], TaskCache())
    cache = CompileCache()
    hp = {"learning_rate": 0.1, "friction": 10.0}
    one = run_method("sghmc", task, (np.uint32([0, 1]), np.uint32([0, 2])), hp, cfg, "test", cache)
    two = run_method("sghmc", task, (np.uint32([0, 1]), np.uint32([0, 2])), hp,
                     dataclasses.replace(cfg, chains=2), "test", cache)
    assert (one.num_chains, two.num_chains) == (1, 2) and one.grad_evals == two.grad_evals == 40
    assert sorted(set(two.chain_ids.tolist())) == [0, 1] and two.num_finite == 4
    assert two.hyperparameters["chains"] == 2 and len(two.t_kin) == 2
    assert not np.allclose(one.outputs, two.outputs)
    with pytest.raises(Exception, match="chains must be a positive integer dividing num_samples"):
        dataclasses.replace(cfg, chains=3)


@pytest.mark.slow
def test_curve_command_end_to_end(tmp_path):
    from conftest import ROOT, run_cli

    out = tmp_path / "curve"
    proc = run_cli("evaluate", "curve", "--reference", ROOT / "results" / "references", "--task", "digits/mlp-32",
                   "--output", out, "--set", "methods=sghmc,l2e_mass,nuts_bde", "--set", "settings.sghmc.lrs=0.03,0.1",
                   "--set", "settings.sghmc.frictions=10", "--set", "settings.l2e_mass.lrs=0.1", "--budgets", "100,400", "--chains", "1,10",
                   "--tune-budget", "200", "--seeds", "0", "--quiet")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "curve.json").read_text())
    task = res["tasks"]["digits/mlp-32"]
    assert set(task["methods"]) == {"sghmc", "sghmc@M=10", "l2e_mass", "l2e_mass@M=10"}
    assert task["floors"]["tv"]["median"] > 0 and task["floors"]["energy"]["median"] > 0
    # a one-point grid (tuning-free here) is not run and costs nothing; a real grid costs its runs
    one_point = task["methods"]["l2e_mass"]["tuning"]
    assert one_point["gradients"] == 0 and one_point["grid"] == [] and one_point["runs"] == 0
    assert task["methods"]["sghmc"]["tuning"]["gradients"] >= 2 * 200
    for row in task["methods"].values():
        for choice in row["choices"].values():
            pts = choice["seeds"]["0"]
            assert [p["budget"] for p in pts] == [100, 400] and [p["gradients"] for p in pts] == [100, 400]
            assert all(p["tv"] is not None and 0 <= p["tv"] <= 1 for p in pts)
    # each row records the settings that ran and each choice its first run's record: what ran, not what was asked
    assert task["methods"]["sghmc"]["settings"] == {"lrs": [0.03, 0.1], "frictions": [10.0]}
    for name in ("sghmc", "sghmc@M=10"):
        for choice in task["methods"][name]["choices"].values():
            assert choice["ran"]["learning_rate"] == choice["hp"]["learning_rate"] > 0
    for name, m in (("l2e_mass", 1), ("l2e_mass@M=10", 10)):  # the window rule set the freeze inside G / M = 100 / m
        ran = task["methods"][name]["choices"]["oracle"]["ran"]
        assert ran["learning_rate"] == 0.1 and 0 < ran["sampler"]["freeze_step"] < 100 // m
    assert (out / "curve.md").is_file() and (out / "curve_digits_mlp-32.png").is_file()
    # a full-batch method with no curve budget is named as left out, in the output and the report, not dropped silently
    assert list(res["off_curve"]) == ["nuts_bde"] and "nuts_bde left out" in proc.stdout
    md = (out / "curve.md").read_text()
    assert "Not on the curves: nuts_bde" in md
    # findings first: the task's table and its plot come before the protocol, which is the last section
    assert md.index("| method | choice |") < md.index("![curve_digits_mlp-32.png]") < md.index("\n## Configuration\n")
    assert "Budgets G = 100, 400" in md.split("\n## Configuration\n")[1]


def _part(methods: dict, floors=None, budgets=(100, 200)) -> dict:
    def row(mean, reached=3):
        s = {"reached": reached, "seeds": 3, "mean": mean, "se": 1.0}
        return {"tuning": {"gradients": 800}, "choices": {"oracle": {"to_floor": {"tv": s, "energy": s}}}}

    return {"k": 10, "curve": {"budgets": list(budgets), "chains": [1], "seeds": [0, 1, 2], "tune_budget": 200,
                               "tune_seed": 0},
            "methods": list(methods), "tasks": {"t": {"floors": floors or {"tv": 1}, "seconds": 1.0,
                                                      "methods": {m: row(v) for m, v in methods.items()}}}}


def test_merge_pools_rows_and_compares_the_learned_sampler_with_the_bar():
    from evaluate.curve.report import learned_vs_bar, merge_results

    merged = merge_results([_part({"sghmc": 4000.0, "baoab": 3000.0}), _part({"l2e_transient": 1000.0})])
    task = merged["tasks"]["t"]
    assert set(task["methods"]) == {"sghmc", "baoab", "l2e_transient"} and task["seconds"] == 2.0
    assert learned_vs_bar(task, "tv") == [("l2e_transient", "0.33 × baoab's gradients")]
    with pytest.raises(ValueError, match="more than one run"):
        merge_results([_part({"sghmc": 1.0}), _part({"sghmc": 2.0})])
    replaced = merge_results([_part({"sghmc": 1.0, "baoab": 3.0}), _part({"sghmc": 2.0})], replace=True)["tasks"]["t"]
    assert replaced["replaced"] == ["sghmc"] and set(replaced["methods"]) == {"sghmc", "baoab"}
    assert replaced["methods"]["sghmc"] == _part({"sghmc": 2.0})["tasks"]["t"]["methods"]["sghmc"]
    with pytest.raises(ValueError, match="floors differ"):
        merge_results([_part({"sghmc": 1.0}), _part({"baoab": 1.0}, floors={"tv": 2})])
    # the same reference's floors from another CPU's BLAS kernel (≈ 1e-6 relative) merge; 1e-4 relative does not
    near = {"tv": 0.0308, "energy": {"median": 0.025438900676}, "k": 10}
    other = {"tv": 0.0308, "energy": {"median": 0.025438900676 * (1 + 1e-6)}, "k": 10}
    assert "t" in merge_results([_part({"sghmc": 1.0}, floors=near), _part({"baoab": 1.0}, floors=other)])["tasks"]
    far = {"tv": 0.0308, "energy": {"median": 0.025438900676 * (1 + 1e-4)}, "k": 10}
    with pytest.raises(ValueError, match="floors differ"):
        merge_results([_part({"sghmc": 1.0}, floors=near), _part({"baoab": 1.0}, floors=far)])
    with pytest.raises(ValueError, match="floors differ"):
        merge_results([_part({"sghmc": 1.0}, floors=near), _part({"baoab": 1.0}, floors={**near, "k": 20})])
    with pytest.raises(ValueError, match="must share"):
        merge_results([_part({"sghmc": 1.0}), _part({"baoab": 1.0}, budgets=(100, 400))])


ENERGY_FLOOR_RTOL = 1e-5
"""Relative tolerance between a stored energy floor and the same floor recomputed from the same reference draws. The
energy distance 2E‖X−Y‖ − E‖X−X′‖ − E‖Y−Y′‖ is computed from ‖x‖² + ‖y‖² − 2x·y in float64 (numpy's matmul, i.e.
OpenBLAS, which picks its kernel for the CPU it runs on): the cancellation turns the kernel's summation order into
relative changes of the floor far above float64's 1e-16. Measured on curve_power_plant_long_merged's floors over
OpenBLAS's kernels (OPENBLAS_CORETYPE = SkylakeX, Zen, Haswell, Sandybridge, Prescott; the stored run equals
SkylakeX's bit for bit): up to 1.05e-6 relative (q10); 1e-5 is ~10x that. The TV and predictive-variance floors were
equal across the kernels."""
FLOAT16_FLOOR_RTOL = 3e-3
"""The same, where the stored run's floors came from float32 draws and the committed reference now stores them as
float16 (the zoo, tasks.reference.files): power plant's energy-floor quantiles moved by 1.24e-3 (median), 1.20e-3
(q10), -5.3e-4 (q90); 3e-3 is 2.4x the largest, and 300x ENERGY_FLOOR_RTOL, the rounding it also covers."""


def test_merge_with_reference_rereads_a_run_against_the_recomputed_floors(tmp_path):
    from conftest import ROOT, run_cli
    from evaluate.curve.fidelity import to_floor

    run = ROOT / "results" / "curve_power_plant_long_merged"
    proc = run_cli("evaluate", "curve", "--merge", run, "--output", tmp_path / "x")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --merge needs at least two")
    out = tmp_path / "reread"
    proc = run_cli("evaluate", "curve", "--merge", run, "--reference", ROOT / "results" / "references",
                   "--output", out)
    assert proc.returncode == 0, proc.stderr
    old = json.loads((run / "curve.json").read_text())
    new = json.loads((out / "curve.json").read_text())
    for name, task in new["tasks"].items():
        f = task["floors"]
        for q, want in old["tasks"][name]["floors"]["energy"].items():  # float16 draws since the zoo, + BLAS rounding
            assert f["energy"][q] == pytest.approx(want, rel=FLOAT16_FLOOR_RTOL, abs=0), (q, f["energy"][q], want)
            assert f["energy"][q] != pytest.approx(want, rel=ENERGY_FLOOR_RTOL, abs=0)  # the draws did change
        assert "predictive_variance" in f
        assert f["predictive_variance"]["q05"] < f["predictive_variance"]["median"] < 1.0
        for row in task["methods"].values():
            for c in row["choices"].values():
                assert c["to_floor"] == to_floor(c["seeds"], f)
    assert "Predictive-variance ratio of K exact draws" in (out / "curve.md").read_text()


def test_method_extra_gives_each_method_what_it_reads():
    from evaluate.run import method_extra

    def sampler(tag):
        return {"meta_params": tag, "sampler": tag, "path": tag}

    samplers = {"released": sampler("authors"), "transient": sampler("shipped"), "l2e": sampler("mine")}
    assert method_extra("l2e_released", samplers)["meta_params"] == "authors"
    assert method_extra("l2e_transient", samplers)["checkpoint"] == "shipped"
    assert method_extra("l2e", samplers)["sampler"] == "mine"
    assert method_extra("sghmc", samplers) == {}


def test_curve_refuses_a_missing_released_file_before_anything_runs(tmp_path):
    from conftest import ROOT, run_cli

    out = tmp_path / "curve"
    proc = run_cli("evaluate", "curve", "--reference", ROOT / "results" / "references", "--task", "digits/mlp-32",
                   "--set", "methods=sghmc,l2e_released", "--released", tmp_path / "missing", "--output", out)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: released meta-parameters not found") and "--released" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_curve_runs_the_released_sampler(tmp_path):
    from conftest import DATA_DIR, ROOT, run_cli

    released = DATA_DIR / "l2e_released"
    if not (released / "meta_params.pickle").is_file():
        pytest.skip(f"released meta-parameters not found at {released}")
    out = tmp_path / "curve"
    proc = run_cli("evaluate", "curve", "--reference", ROOT / "results" / "references", "--task", "breast_cancer/mlp-16",
                   "--set", "methods=l2e_released", "--set", "settings.l2e_released.lrs=0.5", "--released", released,
                   "--budgets", "100", "--chains", "1", "--tune-budget", "100", "--seeds", "0", "--output", out,
                   "--quiet")
    assert proc.returncode == 0, proc.stderr
    row = json.loads((out / "curve.json").read_text())["tasks"]["breast_cancer/mlp-16"]["methods"]["l2e_released"]
    point = row["choices"]["oracle"]["seeds"]["0"][0]
    assert point["gradients"] == 100 and 0 <= point["tv"] <= 1


def test_a_curve_of_only_off_curve_methods_is_refused(tmp_path):
    from conftest import ROOT, run_cli
    from evaluate.curve.run import off_curve

    assert list(off_curve(["sghmc", "nuts_bde", "mile", "l2e_transient"])) == ["nuts_bde"]
    out = tmp_path / "curve"
    proc = run_cli("evaluate", "curve", "--reference", ROOT / "results" / "references", "--task", "digits/mlp-32",
                   "--set", "methods=nuts_bde", "--output", out)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: no method with a budget curve: nuts_bde is full-batch")
    assert not out.exists()


def test_load_samplers_leaves_out_an_optional_method_whose_file_is_missing(tmp_path, monkeypatch):
    import dataclasses

    from evaluate.config import get_preset
    from evaluate.run import load_samplers
    from base.io import ConfigError

    monkeypatch.setenv("L2E_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = dataclasses.replace(get_preset("references"), methods=("sghmc", "l2e_released", "l2e_transient"))
    assert "l2e_released" in cfg.optional_methods
    kept, skipped, samplers = load_samplers(cfg)
    assert kept.methods == ("sghmc", "l2e_transient") and list(skipped) == ["l2e_released"]
    assert "released meta-parameters not found" in skipped["l2e_released"]
    assert set(samplers) == {"transient"}  # the shipped checkpoint its method names, loaded once
    with pytest.raises(ConfigError, match="pass --released PATH"):
        load_samplers(cfg, released_path=tmp_path / "missing")


def test_a_curve_whose_every_point_diverged_is_still_drawn(tmp_path):
    """Mass-L2E at lr 0.1 on power plant: every point of every seed diverged (results/curve_mass_dropin_power_plant).
    Its plot has no finite value on a log axis; it used to fail there ('Data cannot be log-scaled'), after every run
    had finished, and the run's report was lost."""
    import json
    import warnings

    from evaluate.curve.report import plot_curves
    from tests.conftest import ROOT

    results = json.loads((ROOT / "results" / "curve_mass_dropin_power_plant" / "curve.json").read_text())
    (task,) = results["tasks"].values()
    assert all(p["tv"] is None for pts in task["methods"]["l2e_mass"]["choices"]["oracle"]["seeds"].values()
               for p in pts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "Mean of empty slice" either
        names = plot_curves(results, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == names and (tmp_path / names[0]).stat().st_size > 0
