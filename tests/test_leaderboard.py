"""`python -m evaluate leaderboard` (evaluate.leaderboard).

- the aggregation on hand-made curve results whose answer is known: pair costs (the larger of the two
  gradients-to-floor, both needed), reach rate, per-task best (every seed; the one-pair fallback), the median ratio
  with unsolved tasks as infinity, the tuning-inclusive best, the family breakdown, the performance profile at a few
  τ, the bootstrap (a row that dominates everywhere: probability 1; same seed, same numbers);
- a task that no row solves, continued at the extend budget: points appended, gradients to floor re-read, a row whose
  extension chose other hyperparameters left as it was;
- the zoo's convergence rule and the task selection (skipped tasks with why; a meta-training task refused);
- bad input: one `error:` line, status 2, nothing written (unknown method, meta-training task without
  --allow-train, an output directory that is not ours, a resume of another configuration);
- end to end on a tiny reference built in tmp_path (slow): the files, and a rerun that skips the finished task;
- --merge of hand-made leaderboards: the union of rows on the common tasks; bad merges refused with one line.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evaluate.leaderboard.aggregate import (bootstrap_within, floor_distances, leaderboard, median_ratio, pair_costs,
                                            profile, task_best)

INF = math.inf


def _choice(per_seed: list, hp=None) -> dict:
    """A curve choice whose seeds reach the floors at the given (tv, e2) gradients (None: not reached)."""
    tv = [None if p is None else p[0] for p in per_seed]
    e2 = [None if p is None else p[1] for p in per_seed]
    seeds = {str(s): [{"budget": 100, "gradients": 100, "divergent_chains": s % 2, "tv": 0.1, "energy": 0.1,
                       "ratios": {"weight_norm": 1.0}, "t_kin": (1.05, 1.2, None)[s % 3]}]
             for s in range(len(per_seed))}
    return {"hp": hp or {"learning_rate": 0.1}, "seeds": seeds,
            "to_floor": {"tv": {"per_seed": tv}, "energy": {"per_seed": e2}}}


def _task(rows: dict) -> dict:
    """{row: (oracle per-seed (tv, e2), validation per-seed or None (= oracle), tuning gradients)} -> a task."""
    methods = {}
    for name, (oracle, validation, tuning) in rows.items():
        methods[name] = {"method": name.split("@")[0], "chains": int(name.split("=")[1]) if "@" in name else 1,
                         "tuning": {"gradients": tuning},
                         "choices": {"oracle": _choice(oracle), "validation": _choice(validation or oracle)}}
    return {"floors": {}, "methods": methods}


def _same(cost: float, seeds: int = 2) -> list:
    return [(cost, cost)] * seeds


def test_pair_cost_is_the_larger_gradients_to_floor_and_needs_both():
    task = _task({"a": ([(100.0, 300.0), (500.0, None)], None, 0)})
    costs = pair_costs(task)["a/oracle"]
    assert costs["costs"] == {"0": 300.0, "1": INF}
    assert costs["divergent"] == 1 and costs["runs"] == 2  # seed 1's point had one divergent chain
    assert costs["t_kin_runs"] == 2 and costs["t_kin_off"] == 1  # seed 0 at 1.05 is within 10 %, seed 1 at 1.2 is not


def test_t_kin_off_counts_runs_outside_ten_percent_and_skips_those_without_one():
    task = _task({"a": ([(100.0, 100.0)] * 3, None, 0)})  # seeds at T_kin 1.05, 1.2, None
    row = next(r for r in leaderboard({"t": task}, {"t": ("mlp",)})["rows"] if r["key"] == "a/oracle")
    assert (row["t_kin_off"], row["t_kin_runs"]) == (1, 2)


def test_reach_rate_median_ratio_and_unsolved_as_infinity():
    # three tasks, two seeds each; a is the best everywhere, b twice as slow on t1, t2 and misses t3 (one seed),
    # c solves only t1 (4x)
    tasks = {"t1": _task({"a": (_same(100.0), None, 0), "b": (_same(200.0), None, 0), "c": (_same(400.0), None, 0)}),
             "t2": _task({"a": (_same(100.0), None, 0), "b": (_same(200.0), None, 0), "c": ([None, None], None, 0)}),
             "t3": _task({"a": (_same(100.0), None, 0), "b": ([(50.0, 50.0), None], None, 0),
                          "c": ([None, None], None, 0)})}
    board = leaderboard(tasks, {t: ("mlp",) for t in tasks})
    rows = {r["key"]: r for r in board["rows"]}
    assert rows["a/oracle"]["reach"] == 1.0 and rows["a/oracle"]["median_ratio"] == 1.0
    assert rows["b/oracle"]["reach"] == pytest.approx(5 / 6) and rows["b/oracle"]["median_ratio"] == 2.0
    assert rows["b/oracle"]["ratios"] == {"t1": 2.0, "t2": 2.0, "t3": None}  # a missed seed: infinity
    assert rows["c/oracle"]["reach"] == pytest.approx(2 / 6) and rows["c/oracle"]["median_ratio"] is None
    # sorted by reach rate, then median ratio; validation rows are rows of their own
    assert [r["key"] for r in board["rows"]][:2] == ["a/oracle", "a/validation"]
    assert board["rows"][-1]["key"] in ("c/oracle", "c/validation")
    assert board["per_task"]["t3"]["best"] == {"rule": "every seed", "row": "a/oracle", "cost": 100.0, "seed": None}
    assert rows["a/oracle"]["families"]["mlp"] == {"tasks": 3, "pairs": 6, "solved": 6, "reach": 1.0,
                                                   "median_ratio": 1.0}


def test_median_ratio_counts_infinity_as_the_largest():
    assert median_ratio([1.0, 3.0, INF]) == 3.0
    assert median_ratio([1.0, INF, INF]) is None
    assert median_ratio([1.0, 2.0, 4.0, INF]) == 3.0
    assert median_ratio([]) is None


def test_a_task_no_row_solves_on_every_seed_has_a_one_pair_best_and_no_ratios():
    tasks = {"t1": _task({"a": (_same(100.0), None, 0), "b": (_same(300.0), None, 0)}),
             "t2": _task({"a": ([(80.0, 90.0), None], None, 0), "b": ([None, (40.0, 60.0)], None, 0)}),
             "t3": _task({"a": ([None, None], None, 0)})}
    board = leaderboard(tasks, {})
    assert board["per_task"]["t2"]["best"] == {"rule": "one pair", "row": "b/oracle", "cost": 60.0, "seed": "1"}
    assert board["per_task"]["t3"]["best"]["rule"] is None
    assert board["ratio_tasks"] == ["t1"]
    rows = {r["key"]: r for r in board["rows"]}
    assert rows["b/oracle"]["median_ratio"] == 3.0 and rows["a/oracle"]["reach"] == pytest.approx(3 / 6)


def test_tuning_inclusive_costs_have_their_own_best():
    # a needs fewer gradients but its grid costs 1,000; b is tuning-free
    tasks = {"t": _task({"a": (_same(100.0), None, 1000), "b": (_same(200.0), None, 0)})}
    board = leaderboard(tasks, {})
    rows = {r["key"]: r for r in board["rows"]}
    assert board["per_task"]["t"]["best"]["row"] == "a/oracle"
    assert board["per_task"]["t"]["best_tuning"] == {"rule": "every seed", "row": "b/oracle", "cost": 200.0,
                                                     "seed": None}
    assert rows["a/oracle"]["median_ratio"] == 1.0 and rows["a/oracle"]["median_ratio_tuning"] == 5.5
    assert rows["b/oracle"]["median_ratio"] == 2.0 and rows["b/oracle"]["median_ratio_tuning"] == 1.0
    assert task_best(pair_costs(tasks["t"]), True)["cost"] == 200.0


def test_performance_profile_at_a_few_tau():
    costs = np.array([[100.0, 200.0, INF, INF],
                      [150.0, 100.0, 300.0, INF]])  # the fourth pair is solved by neither
    rho = profile(costs, (1.0, 1.5, 2.0, 64.0))
    assert rho.tolist() == [[0.25, 0.25, 0.5, 0.5], [0.5, 0.75, 0.75, 0.75]]
    tasks = {"t": _task({"a": ([(100.0, 100.0), (200.0, 200.0)], None, 0),
                         "b": ([(150.0, 150.0), (100.0, 100.0)], [None, None], 0)})}
    prof = leaderboard(tasks, {}, taus=(1.0, 1.5, 2.0))["profiles"]
    assert prof["oracle"]["rho"] == [[0.5, 0.5, 1.0], [0.5, 1.0, 1.0]]
    assert prof["validation"]["rho"] == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]  # among the validation rows only
    assert prof["oracle"]["ratios"][1] == [1.0, 1.5]


def test_bootstrap_a_row_that_dominates_everywhere_has_probability_one():
    rng = np.random.default_rng(1)
    ratios = np.vstack([np.ones(9), 1.0 + rng.uniform(0.1, 3.0, 9), np.full(9, 10.0), np.full(9, INF)])
    p = bootstrap_within(ratios, resamples=200, seed=3)
    assert p[0] == 1.0 and p[2] == 0.0 and p[3] == 0.0 and 0.0 <= p[1] <= 1.0
    assert np.array_equal(p, bootstrap_within(ratios, resamples=200, seed=3))  # same seed, same numbers
    # a split decision: in a resample with three or more draws of the third and fourth tasks the second row leads
    # (median 1.2 against 2), else the first (1 against 2.4); exactly one of them is within 1.25x the best each time
    tie = np.vstack([np.array([1.0, 1.0, 2.0, 2.0, 1.0]), np.array([2.0, 2.0, 1.0, 1.0, 2.0]) * 1.2])
    q = bootstrap_within(tie, resamples=500, seed=0)
    assert 0.0 < q[1] < q[0] < 1.0 and q[0] + q[1] == pytest.approx(1.0)
    assert bootstrap_within(np.zeros((2, 0))).tolist() == [0.0, 0.0]


def test_extension_appends_points_and_rereads_the_floor():
    from evaluate.leaderboard.store import extend_result, solved_any

    floors = {"tv": {"median": 0.1}, "energy": {"median": 0.1}}

    def curve(points, hp):
        seeds = {"0": [{"budget": g, "gradients": g, "tv": v, "energy": v, "ratios": {"weight_norm": 1.0},
                        "divergent_chains": 0} for g, v in points]}
        c = {"hp": hp, "seeds": seeds, "to_floor": {}}
        return {"method": "m", "chains": 1, "tuning": {"gradients": 0}, "choices": {"oracle": c, "validation": c}}

    task = {"floors": floors, "methods": {"a": curve([(100, 0.5), (200, 0.3)], {"lr": 1}),
                                          "b": curve([(100, 0.5), (200, 0.3)], {"lr": 2})}}
    from evaluate.curve.fidelity import to_floor

    for row in task["methods"].values():
        row["choices"]["oracle"]["to_floor"] = to_floor(row["choices"]["oracle"]["seeds"], floors)
    assert not solved_any(task)
    ext = {"floors": floors, "methods": {"a": curve([(400, 0.05)], {"lr": 1}), "b": curve([(400, 0.05)], {"lr": 3})}}
    merged, info = extend_result(task, ext, 400)
    assert info == {"budget": 400, "rows": ["a"], "mismatched": ["b"]}
    a = merged["methods"]["a"]["choices"]["oracle"]
    assert [p["budget"] for p in a["seeds"]["0"]] == [100, 200, 400]
    # 0.3 at 200 -> 0.05 at 400 crosses 0.11 at t = 0.76: exp(log 200 + 0.76 log 2)
    assert a["to_floor"]["tv"]["per_seed"][0] == pytest.approx(200 * 2 ** 0.76)
    assert len(task["methods"]["a"]["choices"]["oracle"]["seeds"]["0"]) == 2  # the input is not modified
    assert merged["methods"]["b"] is task["methods"]["b"] and solved_any(merged)


def test_floor_distance_per_budget_geometric_mean_and_median():
    """A run's distance is max(TV ÷ TV floor, E² ÷ E² floor); per budget the geometric mean over the pairs (None when
    a run has no TV: every chain divergent) and the median (that run counted as infinity); budgets ascending; the
    leaderboard's rows carry it, and the report shows it per budget of the configuration."""
    from evaluate.leaderboard.report import leaderboard_markdown

    def run(budget, tv, e2):
        return {"budget": budget, "gradients": budget, "divergent_chains": 0, "tv": tv, "energy": e2}

    seeds = {"0": [run(200, 0.1, 0.01), run(100, 0.2, 0.01)], "1": [run(100, 0.1, 0.03), run(200, 0.15, 0.01)],
             "2": [run(100, 0.3, 0.03), run(200, None, None)]}
    task = {"floors": {"tv": {"median": 0.1}, "energy": {"median": 0.01}},
            "methods": {"a": {"method": "a", "chains": 1, "tuning": {"gradients": 0}, "choices": {"oracle": {
                "hp": {}, "seeds": seeds, "to_floor": {"tv": {"per_seed": [None] * 3},
                                                       "energy": {"per_seed": [None] * 3}}}}}}}
    d = floor_distances({"t": task}, "a/oracle")
    assert [x["budget"] for x in d] == [100, 200] and [x["pairs"] for x in d] == [3, 3]
    assert d[0]["geomean"] == pytest.approx((2.0 * 3.0 * 3.0) ** (1 / 3), rel=1e-12) and d[0]["median"] == 3.0
    assert d[1]["geomean"] is None and d[1]["median"] == pytest.approx(1.5, rel=1e-12)  # 1.0, 1.5 and the divergent run's infinity
    assert floor_distances({"t": {**task, "floors": {}}}, "a/oracle") == []  # no floors, no distance
    doc = leaderboard({"t": task}, {"t": ("linear",)})
    assert doc["rows"][0]["distance"] == d
    conf = {"methods": ["a"], "budgets": [100, 200, 400], "extend": 0, "chains": [1], "seeds": [0, 1, 2],
            "tune_budget": 100, "k": 10, "preset": "references", "reference": "ref"}
    md = leaderboard_markdown({"configuration": conf, "tasks": ["t"], "skipped": {}, "extended": {}, "left_out": {},
                               "seconds": {}, "task_seconds": {}, "command": "c", "partial": None, **doc}, [])
    assert "| a | oracle | 2.62 / 3.00 | ∞ / 1.50 | — |" in md.split("## Distance to the floor by budget")[1]


def test_t_kin_by_distance_to_the_floor():
    """The runs that report T_kin, by distance to the floor — at most 1.1 × (the reach's threshold), up to 2 ×, beyond
    (a divergent run's infinity) —, and of those the runs with |T_kin − 1| > 0.1; none reporting T_kin: []; the
    leaderboard's rows carry it and the report shows one cell per class."""
    from evaluate.leaderboard.aggregate import ARRIVAL_BOUNDS, t_kin_by_distance
    from evaluate.leaderboard.report import leaderboard_markdown

    def run(budget, tv, e2, t_kin):
        return {"budget": budget, "gradients": budget, "divergent_chains": 0, "tv": tv, "energy": e2, "t_kin": t_kin}

    assert ARRIVAL_BOUNDS == (1.1, 2.0)
    # distances 1.0 (T_kin 1.05: in), 1.05 (0.85: off), 1.5 (1.2: off), 3 (9: off), 2.0 (1.0: in), ∞ (None: no T_kin)
    seeds = {"0": [run(100, 0.1, 0.005, 1.05), run(200, 0.105, 0.01, 0.85)],
             "1": [run(100, 0.15, 0.01, 1.2), run(200, 0.3, 0.01, 9.0)],
             "2": [run(100, 0.1, 0.02, 1.0), run(200, None, None, None)]}
    task = {"floors": {"tv": {"median": 0.1}, "energy": {"median": 0.01}},
            "methods": {"a": {"method": "a", "chains": 1, "tuning": {"gradients": 0}, "choices": {"oracle": {
                "hp": {}, "seeds": seeds, "to_floor": {"tv": {"per_seed": [None] * 3},
                                                       "energy": {"per_seed": [None] * 3}}}}}}}
    d = t_kin_by_distance({"t": task}, "a/oracle")
    assert d == [{"within": 1.1, "runs": 2, "t_kin_off": 1}, {"within": 2.0, "runs": 2, "t_kin_off": 1},
                 {"within": None, "runs": 1, "t_kin_off": 1}]
    quiet = {k: [{**p, "t_kin": None} for p in v] for k, v in seeds.items()}
    task_q = {**task, "methods": {"a": {**task["methods"]["a"], "choices": {"oracle": {
        **task["methods"]["a"]["choices"]["oracle"], "seeds": quiet}}}}}
    assert t_kin_by_distance({"t": task_q}, "a/oracle") == []
    doc = leaderboard({"t": task}, {"t": ("linear",)})
    assert doc["rows"][0]["t_kin_distance"] == d
    conf = {"methods": ["a"], "budgets": [100, 200], "extend": 0, "chains": [1], "seeds": [0, 1, 2],
            "tune_budget": 100, "k": 10, "preset": "references", "reference": "ref"}
    md = leaderboard_markdown({"configuration": conf, "tasks": ["t"], "skipped": {}, "extended": {}, "left_out": {},
                               "seconds": {}, "task_seconds": {}, "command": "c", "partial": None, **doc}, [])
    section = md.split("## T_kin by distance to the floor")[1].split("##")[0]
    assert "| row | tuning | ≤ 1.1 × | 1.1–2 × | > 2 × |" in section and "| a | oracle | 1/2 | 1/2 | 1/1 |" in section


def test_markdown_and_profile_pngs(tmp_path):
    from evaluate.leaderboard.report import leaderboard_markdown, plot_profiles

    tasks = {"t1": _task({"a": (_same(100.0), None, 0), "b": (_same(200.0), None, 600)}),
             "t2": _task({"a": (_same(100.0), None, 0), "b": ([None, None], None, 600)})}
    conf = {"methods": ["a", "b"], "budgets": [100, 200], "extend": 400, "chains": [1], "seeds": [0, 1],
            "tune_budget": 100, "k": 10, "preset": "references", "reference": "ref"}
    doc = {"configuration": conf, "tasks": list(tasks), "skipped": {"t3": "no reference in ref (not computed yet)"},
           "extended": {"t2": {"budget": 400, "rows": ["a"], "mismatched": ["b"]}}, "left_out": {},
           "seconds": {"curves": 12.0, "this_run": 3.0}, "task_seconds": {"t1": 5.0, "t2": 7.0},
           "command": "python -m evaluate leaderboard --output x", "partial": None,
           **leaderboard(tasks, {"t1": ("linear", "classification"), "t2": ("mlp", "regression")})}
    pngs = plot_profiles(doc, tmp_path)
    assert pngs == ["profile_oracle.png", "profile_validation.png"]
    assert all((tmp_path / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    md = leaderboard_markdown(doc, pngs)
    table = md.split("## Table")[1].split("## By family")[0]
    assert table.index("| 1 | a | 1 | oracle | 100 % (4/4) | 1.00 |") < table.index("| b | 1 | oracle | 50 % (2/4) |")
    assert "| b | 1 | oracle | 50 % (2/4) | — |" in table  # median of (2, infinity) is infinite: —
    assert table.split("| a | 1 | oracle |")[1].splitlines()[0].endswith("| 2/4 |")  # seed 1's T_kin 1.2, 2 tasks
    assert "| t2 | mlp, regression | 2 | a/oracle: 100 |" in md and "to 400 (not: b)" in md
    assert "- t3: no reference in ref (not computed yet)" in md and "![profile_oracle.png](profile_oracle.png)" in md
    assert md.rstrip().endswith("`python -m evaluate leaderboard --output x`")


def _meta(rhat=1.01, divergent=0, chains=4, finite=True) -> dict:
    return {"function_space": {"split_rhat": {"max": rhat}}, "num_divergent": divergent, "finite": finite,
            "sampler": {"chains": chains}, "created": "2026-01-01"}


def test_zoo_convergence_rule():
    from evaluate.leaderboard.select import zoo_verdict

    ok = {"converged": True}
    assert zoo_verdict(ok, _meta()) is None
    assert "1.070 >= 1.05" in zoo_verdict(ok, _meta(rhat=1.07))
    assert "divergent" in zoo_verdict(ok, _meta(divergent=3))
    assert "chains" in zoo_verdict(ok, _meta(chains=2))
    assert "non-finite" in zoo_verdict(ok, _meta(finite=False))
    assert "converged false" in zoo_verdict({"converged": False}, _meta())
    assert "cannot be read" in zoo_verdict(ok, None)


def _fake_reference(root, entries: dict) -> None:
    """A reference directory whose index holds `entries` ({task: metadata}); no draws (enough for the checks that
    run before the curve inputs are read)."""
    from tasks.reference.files import INDEX

    index = {}
    for i, (name, meta) in enumerate(entries.items()):
        (root / f"t{i}").mkdir(parents=True)
        (root / f"t{i}" / "metadata.json").write_text(json.dumps(meta))
        index[name] = {"dir": f"t{i}", "kind": "classification", "metadata": f"t{i}/metadata.json",
                       "converged": True}
    (root / INDEX).write_text(json.dumps(index))


def test_task_selection_skips_with_why_and_refuses_the_training_half(tmp_path):
    from base.io import ConfigError
    from evaluate.leaderboard.select import select_tasks
    from tasks.zoo import held_out_names, split

    held = held_out_names()
    train = next(n for n, h in split().items() if h == "train")
    _fake_reference(tmp_path, {held[0]: _meta(), held[1]: _meta(rhat=1.08), train: _meta()})
    names, skipped, created = select_tasks(tmp_path, [], False)
    assert names == [held[0]] and created == {held[0]: "2026-01-01"}
    assert "R-hat max 1.080" in skipped[held[1]] and "not computed yet" in skipped[held[2]] and train not in skipped
    with pytest.raises(ConfigError, match="meta-training half"):
        select_tasks(tmp_path, [train], False)
    assert select_tasks(tmp_path, [train], True)[0] == [train]
    with pytest.raises(ConfigError, match="no task to run"):
        select_tasks(tmp_path, [held[1]], False)


def _errors(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("extra, message", [
    (["--methods", "sghmc,nope"], "unknown method 'nope'"),
    (["--task", "iris/mlp-8-tanh"], "meta-training half"),
    (["--budgets", "100,205"], "budgets must be"),
    (["--extend", "150"], "--extend must be 0 or"),
    (["--set", "settings.nope.chains=4"], "nope"),
])
def test_bad_input_is_one_error_line_and_writes_nothing(tmp_path, extra, message):
    from conftest import run_cli
    from tasks.zoo import held_out_names

    _fake_reference(tmp_path / "ref", {held_out_names()[0]: _meta()})
    out = tmp_path / "out"
    proc = run_cli("evaluate", "leaderboard", "--reference", tmp_path / "ref", "--output", out, "--budgets",
                   "100,200", *extra)
    assert proc.returncode == 2 and len(_errors(proc)) == 1 and _errors(proc)[0].startswith("error: ")
    assert message in proc.stderr and not out.exists()


def test_an_output_that_is_not_ours_or_of_another_configuration_is_refused(tmp_path):
    from cli import write_marker
    from conftest import run_cli
    from evaluate.leaderboard.store import write_configuration
    from tasks.zoo import held_out_names

    _fake_reference(tmp_path / "ref", {held_out_names()[0]: _meta()})
    base = ["evaluate", "leaderboard", "--reference", tmp_path / "ref", "--budgets", "100,200", "--quiet"]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    proc = run_cli(*base, "--output", theirs)
    assert proc.returncode == 2 and len(_errors(proc)) == 1 and "not marked" in proc.stderr
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    curve = tmp_path / "curve"  # a `python -m evaluate curve` directory: marked, with curve.json, no configuration
    curve.mkdir()
    write_marker(curve, "curve")
    (curve / "curve.json").write_text("{}")
    proc = run_cli(*base, "--output", curve)
    assert proc.returncode == 2 and "not a leaderboard" in proc.stderr
    other = tmp_path / "other"  # a leaderboard of other seeds
    other.mkdir()
    write_marker(other, "leaderboard")
    write_configuration(other, {"format": 1, "seeds": [7]})
    proc = run_cli(*base, "--output", other)
    assert proc.returncode == 2 and len(_errors(proc)) == 1 and "another configuration" in proc.stderr
    assert json.loads((other / "configuration.json").read_text()) == {"format": 1, "seeds": [7]}


def test_set_overrides_a_setting_and_is_recorded_only_when_given(tmp_path):
    from evaluate.leaderboard.cli import build_parser, leaderboard_inputs
    from tasks.zoo import held_out_names

    _fake_reference(tmp_path / "ref", {held_out_names()[0]: _meta()})
    base = ["--reference", str(tmp_path / "ref"), "--output", str(tmp_path / "out"), "--methods", "policy_learned",
            "--budgets", "1000,2000"]
    plain = leaderboard_inputs(build_parser().parse_args(base))
    assert "overrides" not in plain["conf"] and plain["cfg"].settings.policy_learned.chains == 10
    state = leaderboard_inputs(build_parser().parse_args(base + ["--set", "settings.policy_learned.chains=4"]))
    assert state["conf"]["overrides"] == ["settings.policy_learned.chains=4"]
    assert state["cfg"].settings.policy_learned.chains == 4


def test_the_core_methods_exist_and_have_budget_curves():
    from evaluate.curve.run import has_curve
    from evaluate.leaderboard import CORE_METHODS

    assert len(set(CORE_METHODS)) == len(CORE_METHODS) and all(has_curve(m) for m in CORE_METHODS)


@pytest.mark.slow
def test_leaderboard_end_to_end_and_resume(tmp_path, monkeypatch):
    from conftest import run_cli

    ref, out = tmp_path / "ref", tmp_path / "board"
    proc = run_cli("evaluate", "reference", "--output", ref, "--task", "iris/mlp-linear", "--warmup", "50",
                   "--samples", "40", "--quiet")
    assert proc.returncode == 0, proc.stderr
    cmd = ["evaluate", "leaderboard", "--reference", ref, "--output", out, "--methods", "sghmc,psgld", "--budgets",
           "100,200", "--extend", "400", "--chains", "1", "--seeds", "0", "--tune-budget", "100", "--quiet"]
    proc = run_cli(*cmd)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} >= {"configuration.json", "leaderboard.json", "leaderboard.md",
                                              "profile_oracle.png", "profile_validation.png", "tasks"}
    record = json.loads((out / "tasks" / "iris_mlp-linear.json").read_text())
    board = json.loads((out / "leaderboard.json").read_text())
    assert board["tasks"] == ["iris/mlp-linear"] and board["partial"] is None
    assert {r["key"] for r in board["rows"]} == {f"{m}/{c}" for m in ("sghmc", "psgld")
                                                 for c in ("oracle", "validation")}
    assert all(r["pairs"] == 1 for r in board["rows"])
    budgets = [p["budget"] for p in record["result"]["methods"]["sghmc"]["choices"]["oracle"]["seeds"]["0"]]
    assert budgets == ([100, 200, 400] if record["extended"] else [100, 200])
    md = (out / "leaderboard.md").read_text()
    assert "## Skipped tasks" in md and "| rank | row |" in md and "![profile_oracle.png]" in md
    # a rerun of the same configuration runs nothing: the finished task is read back
    import evaluate.curve.cli

    def refuse(*a, **k):
        raise AssertionError("a finished task was run again")

    monkeypatch.setattr(evaluate.curve.cli, "run_curves", refuse)
    before = (out / "tasks" / "iris_mlp-linear.json").read_bytes()
    proc = run_cli(*cmd)
    assert proc.returncode == 0, proc.stderr
    assert (out / "tasks" / "iris_mlp-linear.json").read_bytes() == before
    again = json.loads((out / "leaderboard.json").read_text())
    assert again["rows"] == board["rows"] and again["per_task"] == board["per_task"]
    # --report-only runs nothing and rewrites the tables; the command it records is the run's
    (out / "leaderboard.md").unlink()
    proc = run_cli(*cmd, "--report-only")
    assert proc.returncode == 0, proc.stderr
    third = json.loads((out / "leaderboard.json").read_text())
    assert third["rows"] == board["rows"] and "--report-only" not in third["command"]
    assert (out / "leaderboard.md").is_file()


def _board(root, methods: list[str], rows: dict, created="c1", floors=None, **conf):
    """A leaderboard directory of hand-made task results (the --merge input)."""
    from cli import write_marker
    from evaluate.leaderboard.store import FORMAT, write_configuration, write_task

    root.mkdir()
    write_marker(root, "leaderboard")
    config = {"format": FORMAT, "preset": "references", "methods": methods, "user_methods": [], "budgets": [100],
              "extend": 0, "chains": [1], "seeds": [0, 1], "tune_budget": 100, "tune_seed": 0, "k": 10,
              "reference": "refs", **conf}
    write_configuration(root, config)
    for name, task_rows in rows.items():
        task = {**_task(task_rows), "floors": floors or {"tv": {"median": 0.1}}}
        write_task(root, {"format": FORMAT, "task": name, "configuration": config, "reference_created": created,
                          "result": task, "extended": None, "seconds": 10.0})
    return root


def test_merge_drops_an_extension_not_every_run_made(tmp_path):
    """A task run a extended (its rows reach the floor only at 400) and run b did not (b solved at 100): the merged
    rows run the same budgets, a's point at 400 dropped and its gradients to floor recomputed (none); where every run
    extended, the points stay. A run with --extend 0 merges with an extended one (the merged extend 0, the extension
    dropped); two different non-zero extension budgets are refused."""
    from evaluate.leaderboard.merge import merge_runs

    def points(tvs):  # tv per budget 100, 400 on seed 0; the floor 0.1 is reached where tv <= 0.11
        return [{"budget": g, "gradients": g, "divergent_chains": 0, "tv": v, "energy": v, "ratios": {}}
                for g, v in tvs]

    def board(name, method, tvs, extended):
        root = _board(tmp_path / name, [method], {}, extend=400)
        from evaluate.leaderboard.store import FORMAT, read_configuration, write_task
        seeds = {"0": points(tvs)}
        row = {"method": method, "chains": 1, "tuning": {"gradients": 0},
               "choices": {"oracle": {"hp": {}, "seeds": seeds, "to_floor": to_floor(seeds, floors)}}}
        write_task(root, {"format": FORMAT, "task": "digits/mlp-32", "configuration": read_configuration(root),
                          "reference_created": "c1", "result": {"floors": floors, "methods": {method: row}},
                          "extended": {"budget": 400, "rows": [method], "mismatched": []} if extended else None,
                          "seconds": 1.0})
        return root

    from evaluate.curve.fidelity import to_floor
    floors = {"tv": {"median": 0.1}, "energy": {"median": 0.1}}
    a = board("a", "a", [(100, 0.5), (400, 0.05)], True)
    b = board("b", "b", [(100, 0.05)], False)
    _, tasks = merge_runs([a, b])
    task = tasks["digits/mlp-32"]
    kept = task["result"]["methods"]["a"]["choices"]["oracle"]
    assert [p["budget"] for p in kept["seeds"]["0"]] == [100] and kept["to_floor"]["tv"]["per_seed"] == [None]
    assert task["extended"] is None and task["extension_dropped"] == 400
    c = board("c", "c", [(100, 0.5), (400, 0.05)], True)
    _, both = merge_runs([a, c])
    assert both["digits/mlp-32"]["extended"]["budget"] == 400 and "extension_dropped" not in both["digits/mlp-32"]
    assert [p["budget"] for p in both["digits/mlp-32"]["result"]["methods"]["a"]["choices"]["oracle"]["seeds"]["0"]
            ] == [100, 400]
    # a run that extends nothing (--extend 0) joins an extended one: the merged board extends nothing
    none = _board(tmp_path / "none", ["n"], {}, extend=0)
    from evaluate.leaderboard.store import FORMAT, read_configuration, write_task
    seeds = {"0": points([(100, 0.5)])}
    write_task(none, {"format": FORMAT, "task": "digits/mlp-32", "configuration": read_configuration(none),
                      "reference_created": "c1", "result": {"floors": floors, "methods": {"n": {
                          "method": "n", "chains": 1, "tuning": {"gradients": 0}, "choices": {"oracle": {
                              "hp": {}, "seeds": seeds, "to_floor": to_floor(seeds, floors)}}}}},
                      "extended": None, "seconds": 1.0})
    conf, joined = merge_runs([a, none])
    assert conf["extend"] == 0 and joined["digits/mlp-32"]["extension_dropped"] == 400
    assert [p["budget"] for p in joined["digits/mlp-32"]["result"]["methods"]["a"]["choices"]["oracle"]["seeds"]["0"]
            ] == [100]
    from base.io import ConfigError
    other = _board(tmp_path / "other", ["o"], {}, extend=800)
    with pytest.raises(ConfigError, match="extend"):
        merge_runs([a, other])


def test_merge_joins_disjoint_method_lists_on_common_tasks(tmp_path):
    """--merge: the union of rows on the tasks every run finished (a task one run lacks is left out), the seconds
    summed, the leaderboard over them; floors equal to float rounding (2e-9 relative) merge; a method in two runs,
    another configuration, another reference or other floors are refused with one line, nothing written."""
    import subprocess
    import sys

    t1, t2 = "digits/mlp-32", "iris/mlp-linear"
    a = _board(tmp_path / "a", ["a"], {t1: {"a": (_same(100.0), None, 0)}, t2: {"a": (_same(100.0), None, 0)}})
    b = _board(tmp_path / "b", ["b"], {t1: {"b": (_same(50.0), None, 0)}})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evaluate", "leaderboard", "--merge", str(a), "--merge", str(b), "--output"]
    proc = subprocess.run(cmd + [str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["tasks"] == [t1] and doc["configuration"]["methods"] == ["a", "b"]
    rows = {r["key"]: r for r in doc["rows"]}
    assert rows["b/oracle"]["median_ratio"] == 1.0 and rows["a/oracle"]["median_ratio"] == 2.0
    assert doc["task_seconds"] == {t1: 20.0}
    rounded = _board(tmp_path / "rounded", ["r"], {t1: {"r": (_same(50.0), None, 0)}},
                     floors={"tv": {"median": 0.1 * (1 + 2e-9)}})  # the same floors to float rounding
    proc = subprocess.run(cmd[:4] + ["--merge", str(a), "--merge", str(rounded), "--output", str(tmp_path / "o2")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = {"dup": "method a is in another run too", "conf": "seeds", "ref": "another reference",
                "floors": "other floors"}
    for name, kw in (("dup", dict(methods=["a"])), ("conf", dict(conf=dict(seeds=[0]))),
                     ("ref", dict(created="c2")), ("floors", dict(floors={"tv": {"median": 0.2}}))):
        methods = kw.pop("methods", ["c"])
        bad = _board(tmp_path / name, methods, {t1: {methods[0]: (_same(50.0), None, 0)}},
                     **kw.pop("conf", {}), **kw)
        target = tmp_path / f"out_{name}"
        proc = subprocess.run(cmd[:4] + ["--merge", str(a), "--merge", str(bad), "--output", str(target)],
                              capture_output=True, text=True)
        errors = _errors(proc)
        assert proc.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: --merge"), (name, errors)
        assert expected[name] in errors[0], (name, errors)
        assert not target.exists()
