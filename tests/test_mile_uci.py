"""bench.mile_uci --quick end to end (yacht, 1 split, 2 chains, tiny budgets): finite metrics, and MILE's pooled
test LPPD beats (a) the marginal predictor N(0, 1) of the z-scored target (no features) by a clear margin and
(b) the mean LPPD of the single DE members it starts from."""
import json
import math

import numpy as np
import pytest

from conftest import DATA_DIR

UCI = DATA_DIR / "uci"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    if not (UCI / "yacht" / "data.txt").is_file():
        pytest.skip(f"UCI data not found at {UCI.resolve()} (needs ../shared/data/uci/yacht)")
    from bench.mile_uci import main

    tmp = tmp_path_factory.mktemp("mile_uci")
    out = main(["--quick", "--datasets", "yacht", "--data-dir", str(UCI), "--json", str(tmp / "r.json"),
                "--output", str(tmp / "r.md")])
    return out, tmp


@pytest.mark.slow
def test_quick_runs_and_writes_finite_numbers(quick):
    _, tmp = quick
    saved = json.loads((tmp / "r.json").read_text())
    assert len(saved["results"]) == 1 and "yacht" in (tmp / "r.md").read_text()
    r = saved["results"][0]
    for meth in ("de", "mile", "nuts"):
        for k in ("lppd", "rmse", "calibration_error"):
            assert math.isfinite(r[meth][k]), (meth, k, r[meth][k])
    assert r["mile"]["seconds"] > 0 and r["mile"]["nan_chains"] == 0
    assert r["mile"]["num_grad_evals_per_chain"] == 2 * (1000 + 200 + 200 + 100 * 5)


@pytest.mark.slow
def test_mile_beats_marginal_and_single_members(quick):
    out, _ = quick
    r = out["results"][0]
    from tasks.regression import RegressionSpec, build_regression_task

    task = build_regression_task(RegressionSpec("uci:yacht", protocol="mile", seed=1, data_dir=str(UCI)))
    y = np.asarray(task.splits.test[1], np.float64)
    marginal = float(np.mean(-0.5 * np.log(2 * np.pi) - 0.5 * y**2))  # N(0, 1): the z-scored target's marginal
    assert r["mile"]["lppd"] > marginal + 1.0, (r["mile"]["lppd"], marginal)
    assert r["mile"]["lppd"] > float(np.mean(r["de"]["member_lppd"])), (r["mile"]["lppd"], r["de"]["member_lppd"])
