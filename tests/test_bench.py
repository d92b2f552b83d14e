"""Smoke test of the benchmark harness (bench/): tiny configurations, finite positive ratios (not the goals)."""
import math

import pytest

from tasks import ModelSpec, TaskSpec

from conftest import ROOT


def _ok(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def meta_params():
    from bench.inner_loop import default_meta_params

    return default_meta_params()


@pytest.fixture(scope="module")
def tiny_task():
    from bench.inner_loop import make_task

    return make_task("digits", channels=4, depth=1, max_train=200)


@pytest.mark.slow
def test_b1_b2_step_costs(tiny_task, meta_params):
    from bench.inner_loop import step_costs

    r = step_costs(tiny_task, steps=4, repeats=1, batch_size=16, scan=True, meta_params=meta_params,
                   variants=("nomlp",))
    for k in ("B1", "B2", "sghmc chunked/standalone"):
        assert _ok(r[k]), (k, r[k])
    assert all(_ok(v) for v in r["ms"].values())


@pytest.mark.slow
def test_fused_step_matches_generic_step(tiny_task, meta_params):
    from bench.inner_loop import check_fused

    assert check_fused(tiny_task, steps=1, meta_params=meta_params) < 1e-4


@pytest.mark.slow
def test_b3_es_throughput():
    from bench.es_throughput import es_throughput

    r = es_throughput((2,), steps=10, repeats=1, spec=TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1)))
    assert _ok(r["B3 P=2 sequential"]) and _ok(r["B3 P=2 vmap"])


def test_goal_lines():
    from bench.__main__ import line

    assert line("B1", 1.2).endswith("PASS")
    assert "MISS" in line("B3", 0.5)


@pytest.mark.slow
def test_b5_ess_both_definitions():
    from bench.ess import ess_per_second

    r = ess_per_second(chains=2, steps=40, spec=TaskSpec("digits", ModelSpec("cnn", channels=4, depth=1),
                                                         max_train=200))
    assert _ok(r["B5"]) and _ok(r["B5 function space"])
    for m in ("l2e", "csghmc"):
        assert len(r[m]["weight_ess_per_chain"]) == 2 and all(0 < e for e in r[m]["weight_ess_per_chain"])


@pytest.mark.slow
def test_step_cost_per_family_harness():
    """B1 per family (bench.step_cost) on a tiny MLP: finite ratios, SGHMC's exactly 1, a meta-model row for the
    learned samplers, and a paper-form L2E MLP variant compared with the f32 reference."""
    from bench.step_cost import Family, markdown, measure_family
    from tasks.models import MLP

    fam = Family("tiny-mlp", lambda: MLP(10, (16,)), (8, 8, 1), 16, 100)
    r = measure_family(fam, samplers=("sgld", "learned"), calls=2, repeats=1, variants=("bf16", "chunk512"))
    rows = {row["sampler"]: row for row in r["rows"]}
    assert rows["sghmc"]["time_ratio"] == 1.0 and rows["sghmc"]["flop_ratio"] == 1.0
    assert {"sghmc", "sgld", "l2e (paper-form)", "kinetic"} <= set(rows)
    for row in rows.values():
        assert _ok(row["time_ratio"]) and _ok(row["flop_ratio"]) and _ok(row["ms"]), row
    assert _ok(rows["l2e (paper-form)"]["meta_gflops"]) and _ok(rows["kinetic"]["meta_share"])
    bf16 = next(v for v in r["variants"] if v["variant"] == "bf16")
    assert _ok(bf16["ratio_to_f32"]) and 0 < bf16["alpha rel_l2"] < 0.05
    chunked = next(v for v in r["variants"] if v["variant"] == "chunk512")  # d = 1,210: 3 chunks, same numbers
    assert chunked["alpha rel_l2"] < 1e-6 and chunked["beta2 rel_l2"] < 1e-6
    assert "| tiny-mlp |" in markdown([r], {"n": 1, "median": 1.0, "best": 1.0})


def test_runner_donated_continues_the_chain_and_leaves_the_callers_state():
    """bench.step_cost.runner with donate: each round continues from the last round's state, and the caller's state
    stays usable; without donate every round restarts from the caller's state."""
    import jax
    import jax.numpy as jnp

    from bench.step_cost import runner

    def step(key, s, b):
        return {"x": s["x"] * 0.5 + b, "y": s["y"]}, ()

    s0 = {"x": jnp.ones(3), "y": jnp.zeros(3)}
    run, _ = runner(step, (jax.random.PRNGKey(0), s0, 1.0), 2, chained=True, donate=True)
    first = float(run()["x"][0])  # read now: the next round donates this state
    second = float(run()["x"][0])  # warm-up 1 call, then 2 per round: x after 3 and 5 calls of x/2 + 1
    assert first == pytest.approx(2.0 - 0.5**3) and second == pytest.approx(2.0 - 0.5**5)
    assert jnp.allclose(s0["x"], 1.0)  # not donated away
    plain, _ = runner(step, (jax.random.PRNGKey(0), s0, 1.0), 2, chained=True)
    assert jnp.allclose(plain()["x"], 1.75) and jnp.allclose(plain()["x"], 1.75)  # each round restarts: 2 calls
    assert run.temp_bytes is not None and run.temp_bytes >= 0 and plain.temp_bytes is not None


def test_policy_step_cost_chunk_runs_the_step_n_times_with_folded_keys(capsys):
    """bench.policy_step_cost.chunked: a chunk of N updates is the step N times with the evaluation's keys
    (l2e.chains.make_chunk: update i's the second half of the split of the call's key folded with i), its infos
    stacked; N = 1 is the step itself. A --chunk below 1 is refused with one `error:` line."""
    import jax
    import jax.numpy as jnp

    from bench.policy_step_cost import chunked, main

    def step(key, s, b):
        return s * 2.0 + b + jax.random.uniform(key), key

    key = jax.random.PRNGKey(5)
    assert chunked(step, 1) is step
    out, keys = chunked(step, 3)(key, jnp.float32(1.0), 0.5)
    want, expected = jnp.float32(1.0), []
    for i in range(3):
        k = jax.random.split(jax.random.fold_in(key, i))[1]
        want, expected = want * 2.0 + 0.5 + jax.random.uniform(k), expected + [k]
    assert float(out) == pytest.approx(float(want), rel=1e-6)
    assert jnp.array_equal(keys, jnp.stack(expected))
    assert main(["--chunk", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: need --chains >= 2"), err


@pytest.mark.slow
def test_meta_loss_curves_harness(tmp_path):
    """bench.meta_loss_curves on a tiny budget: one ES run on digits/mlp-32 against the committed NUTS reference
    (skipped without it); the yardstick has φ₀ plus one point per checkpoint (every checkpoint kept, not only
    meta_train's newest 3), finite TVs in (0, 1] and the per-iteration meta-loss of every iteration."""
    import json

    ref = ROOT / "results" / "references"
    if not (ref / "digits_mlp-32" / "probs.txt").is_file():
        pytest.skip(f"no digits/mlp-32 NUTS reference under {ref}")
    from bench.meta_loss_curves import main

    out = tmp_path / "curves"
    assert main(["--output", str(out), "--reference", str(ref), "--runs", "mass/bma", "--budget-steps", "3000",
                 "--points", "5", "--yardstick-repeats", "1", "--set", "inner.num_steps=120",
                 "--set", "objective.burn_in=20"]) == 0
    (run,) = json.loads((out / "curves.json").read_text())["runs"]
    assert run["num_outer"] == 3000 // (2 * 120) and len(run["meta_loss"]) == run["num_outer"]
    steps = [p["iteration"] for p in run["yardstick"]]
    every = run["num_outer"] // 5
    assert steps == [0] + list(range(every, run["num_outer"] + 1, every)) + (
        [run["num_outer"]] if run["num_outer"] % every else []), steps
    assert all(0 < p["tv"] <= 1 for p in run["yardstick"])
    assert "| mass/bma | antithetic |" in (out / "curves.md").read_text() and (out / "curves.png").is_file()


def test_defaults_audit_verdicts_and_summary():
    """bench.defaults_audit: divergence wins over temperature; |T_kin − T| ≤ 25 % on every seed is ok; a report with
    seeds is summed over them; an ensemble without T_kin is judged by divergence alone."""
    from bench.defaults_audit import markdown, summarise, verdict

    assert verdict(1, [1.0], 1.0) == "divergent"
    assert verdict(0, [1.0, 1.24], 1.0) == "ok" and verdict(0, [1.0, 1.26], 1.0) == "hot"
    assert verdict(0, [0.74], 1.0) == "cold" and verdict(0, [None], 1.0) == "ok"
    report = {"tasks": {"t": {"methods": {
        "sghmc": {"temperature": 1.0, "seeds": {
            "0": {"divergent_chains": 0, "num_chains": 1, "t_kin": 1.1, "hyperparameters": {"learning_rate": 0.1}},
            "1": {"divergent_chains": 1, "num_chains": 1, "t_kin": None, "hyperparameters": {"learning_rate": 0.1}}}},
        "deep_ensemble": {"temperature": "n/a", "divergent_chains": 0, "num_chains": 10, "t_kin": None,
                          "hyperparameters": {"learning_rate": 0.3}}}}}}
    rows = {r["method"]: r for r in summarise(report)}
    assert rows["sghmc"]["divergent_chains"] == 1 and rows["sghmc"]["chains"] == 2
    assert rows["sghmc"]["verdict"] == "divergent" and rows["sghmc"]["seeds"] == 2
    assert rows["deep_ensemble"]["verdict"] == "ok" and rows["deep_ensemble"]["chains"] == 10
    assert "divergent: 1" in markdown(list(rows.values()))


def test_sghmc_heat_measures_the_per_example_gradient_variance():
    """bench.sghmc_heat's gradient-noise input: for ℓᵢ(θ) = ½(θ − xᵢ)², ∇ℓᵢ = θ − xᵢ, so the per-example gradient
    variance is Var x = 4 here (x ~ N(0, 2²)); measured on 1,024 examples drawn with replacement from 4,096 it is
    within 20 % (the sample variance's s.e. is sqrt(2/1024) ≈ 4.4 %)."""
    from types import SimpleNamespace

    import jax
    import jax.numpy as jnp

    import l2e
    from bench.sghmc_heat import gradient_noise

    x = 2.0 * jax.random.normal(jax.random.PRNGKey(0), (4096, 3))
    post = l2e.Posterior(lambda th, b: 0.5 * jnp.mean(jnp.sum((th - b) ** 2, -1)), lambda th: jnp.zeros(()), 4096)
    task = SimpleNamespace(posterior=post, train_data=x,
                           sample_batch=lambda k, d, b: d[jax.random.choice(k, d.shape[0], (b,))])
    v = gradient_noise(task, jnp.zeros(3), jax.random.PRNGKey(1))
    assert abs(v / 4.0 - 1.0) < 0.2, v


def test_select_window_scores_the_geometric_mean_with_misses_at_twice_the_largest_budget(tmp_path, capsys):
    """bench.select_window: per (fraction, M) the geometric mean over meta-training references, seeds, TV and E² of
    the gradients to floor, a miss counted as 2 × the largest budget; the smallest wins; a bad --run is refused."""
    import json

    from bench.select_window import main, scores
    from test_reference_schema import complete_curve

    def curve(per_seed_m1, per_seed_m10):
        rows = {}
        for name, chains, per in (("l2e_transient", 1, per_seed_m1), ("l2e_transient@M=10", 10, per_seed_m10)):
            to_floor = {m: {"per_seed": per} for m in ("tv", "energy")}
            rows[name] = {"chains": chains, "choices": {"oracle": {"to_floor": to_floor}}}
        return {"curve": {"budgets": [250, 8000]}, "tasks": {t: {"methods": rows} for t in ("digits/mlp-16",
                                                                                            "wine/mlp-16")}}

    runs = {0.25: curve([1000, None], [500, 500]), 0.5: curve([400, 400], [None, None])}
    got = {(r["fraction"], r["chains"]): r for r in scores(runs, "l2e_transient")}
    assert got[(0.25, 1)]["score"] == pytest.approx(math.sqrt(1000 * 16000))
    assert got[(0.5, 10)]["score"] == pytest.approx(16000) and got[(0.5, 10)]["reached"]["tv"] == "0/4"
    assert min(got.values(), key=lambda r: r["score"]) is got[(0.5, 1)]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "curve.json").write_text(json.dumps(complete_curve(runs[0.25])))  # a whole curve result
    assert main(["--run", f"0.25={tmp_path / 'a'}", "--json", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["chosen"]["chains"] == 10
    capsys.readouterr()
    assert main(["--run", "1.5=x"]) == 2
    assert capsys.readouterr().err.startswith("error: --run must be FRACTION=DIR")


def test_policy_head_ablation_zeroes_exactly_the_named_outputs():
    """bench.policy_head_ablation.variant: each variant zeroes its head's (or output's) last-layer columns and
    biases and nothing else; "rule" zeroes both heads' outputs (the hand-designed rule, l2e.policy)."""
    import jax
    import numpy as np

    from bench.policy_head_ablation import VARIANTS, variant
    from l2e import policy as P
    from l2e.meta_model import mlp_layers_names

    phi = P.init_meta_params(jax.random.PRNGKey(0), (4,), start="random")
    last = {h: mlp_layers_names(phi[h])[-1] for h in phi}

    def zero_columns(tree, head):
        k = np.asarray(tree[head][last[head]]["kernel"])
        return [c for c in range(k.shape[1]) if not k[:, c].any() and not np.asarray(tree[head][last[head]]["bias"])[c]]

    want = {"φ": ([], []), "mass head zeroed": ([0], []), "window head zeroed": ([], [0, 1]), "κ zeroed": ([], [0]),
            "δ zeroed": ([], [1]), "rule": ([0], [0, 1])}
    assert set(want) == set(VARIANTS)
    for name, (mass, window) in want.items():
        v = variant(phi, name)
        assert (zero_columns(v, "mass"), zero_columns(v, "window")) == (mass, window), name
        for head in phi:  # the hidden layers are φ's
            for layer in mlp_layers_names(phi[head])[:-1]:
                np.testing.assert_array_equal(v[head][layer]["kernel"], phi[head][layer]["kernel"])


def test_policy_head_ablation_refuses_bad_options_with_one_line(capsys):
    """bench.policy_head_ablation: an unknown variant, or a step bound below 1 (PolicyConfig.max_step_gain's
    range), is refused with one `error:` line and exit 2, before anything runs."""
    from bench.policy_head_ablation import main

    assert main(["--phi", "shipped", "--variants", "φ,no such head"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --variants: choose from φ"), err
    assert main(["--phi", "shipped", "--max-step-gain", "0.5"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: max_step_gain must be in"), err
