"""Meta-loss curves of the learned samplers under each meta-objective, at equal compute (issue 17).

    python -m bench.meta_loss_curves --output results/meta_loss_curves [--budget-steps 180000] [--runs a,b] \
        [--reference results/references] [--set key=value ...]

Every run meta-trains one (sampler, estimator, objective) combination (RUNS) from its SGHMC-like φ₀ (meta_init "sghmc") on one
task with a converged NUTS reference, digits/mlp-32 (`--task`), for the same number of **inner-chain steps**
(`--budget-steps`; the default 180,000 is the shipped presets' 300 iterations × 2 members × 300 steps):
antithetic ES spends population × inner.num_steps per outer iteration, truncated backprop
es.truncation (× objective.chains for the cross-chain Stein-KL) — a backprop step also pays its backward pass,
so the wall seconds are reported beside it.  Each run's own meta-loss is logged per iteration (its scale is the
objective's); at every checkpoint the current φ gets the **common yardstick**: the fidelity meta-loss (mean total
variation of the BMA of 10 samples spread over the 200 steps after 100 burn-in steps, against the NUTS reference's
predictive on the test split; meta_train.objectives "fidelity") and the kinetic temperature T_kin over that window,
averaged over `--yardstick-repeats` fixed chain keys (the same keys for every run and checkpoint).  The task the
yardstick measures is the task meta-trained on: the curve shows what each objective teaches in-task, not
generalisation.  Writes OUTPUT/curves.json (every run's per-iteration meta-loss, yardstick points, wall time), curves.md and
curves.png.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from l2e.checkpoint import committed_steps, load_meta_params
from meta_train.config import ObjectiveConfig, apply_overrides
from meta_train.es import ProgramCache, evaluate_population, outer_keys
from meta_train.estimators import ESTIMATORS
from meta_train.objectives import OBJECTIVES
from meta_train.presets import META_SGMCMC_SAMPLER, PRESETS
from meta_train.run_dir import read_log
from meta_train.train import initial_meta_params, meta_train

PAPER_FORM = ("sampler.learning_rate=0.5", "sampler.alpha_scale=0.1", "sampler.beta_scale=0.1")
"""The paper-form preset's sampler settings."""
KINETIC = ("kinetic.learning_rate=0.1", "kinetic.friction=10", "kinetic.mu_scale=1")
"""The kinetic preset's sampler settings (SGHMC's step and friction of the evaluation grids)."""
RUNS: dict[str, tuple[str, ...]] = {
    # name: overrides of the base config (the default preset's Mass-L2E, chain and window, on --task)
    "mass/bma": ("sampler_kind=mass",),
    "mass/ce": ("sampler_kind=mass", "objective.kind=ce"),
    "mass/ksd": ("sampler_kind=mass", "objective.kind=ksd"),
    "mass/fidelity": ("sampler_kind=mass", "objective.kind=fidelity"),
    "kinetic/bma": ("sampler_kind=kinetic", *KINETIC),
    "kinetic/fidelity": ("sampler_kind=kinetic", *KINETIC, "objective.kind=fidelity"),
    "paper-form/bma": ("sampler_kind=l2e", "hidden=32,32", *PAPER_FORM),
    "paper-form/fidelity": ("sampler_kind=l2e", "hidden=32,32", *PAPER_FORM, "objective.kind=fidelity"),
    "meta-sgmcmc/bma (ES)": ("sampler_kind=meta_sgmcmc", "hidden=10"),
    "meta-sgmcmc/stein_kl (backprop)": ("sampler_kind=meta_sgmcmc", "hidden=10", "objective.burn_in=0",
                                        "es.estimator=backprop", "objective.kind=stein_kl", "es.lr=0.001"),
    "meta-sgmcmc/stein_kl_cross (backprop)": ("sampler_kind=meta_sgmcmc", "hidden=10", "objective.burn_in=0",
                                              "es.estimator=backprop", "objective.kind=stein_kl_cross", "es.lr=0.001"),
}
YARDSTICK_SEED = 12345


def base_config(task: str, reference: str):
    """The default preset (Mass-L2E, 300-step chains, 10 samples after 100 burn-in steps) on one task string, with
    the fidelity reference set and Meta-SGMCMC's sampler settings from its preset."""
    cfg = PRESETS["default"]
    cfg = dataclasses.replace(cfg, meta_sgmcmc=META_SGMCMC_SAMPLER,
                              objective=dataclasses.replace(cfg.objective, reference=reference))
    return apply_overrides(cfg, [f"tasks={task}"])


def steps_per_iteration(cfg) -> int:
    """Inner-chain steps one outer iteration simulates (module doc)."""
    estimator = ESTIMATORS[cfg.es.estimator]
    if not estimator.TRUNCATED:
        return cfg.es.population * cfg.inner.num_steps
    chains = cfg.objective.chains if OBJECTIVES[cfg.objective.kind].cross_chain else 1
    members = 1 if estimator.PATHWISE else cfg.es.population
    return cfg.es.truncation * chains * members


def yardstick(cfg, phi, cache, spec, repeats: int) -> dict:
    """Fidelity (mean TV to the reference) and T_kin of φ, each the mean over `repeats` fixed chain keys, with the
    base window (300 steps, 10 samples after 100 burn-in)."""
    ycfg = dataclasses.replace(cfg, es=PRESETS["default"].es, objective=ObjectiveConfig(kind="fidelity", burn_in=100, log_temperature=True,
                                                              reference=cfg.objective.reference),
                               inner=PRESETS["default"].inner)
    pop = jax.tree.map(lambda x: jnp.asarray(x)[None], phi)
    tv, tk = [], []
    for r in range(repeats):
        fit = evaluate_population(spec, pop, outer_keys(YARDSTICK_SEED, r), ycfg.sampler_config, ycfg.schedule,
                                  ycfg.meta_loss_examples, execution="sequential", cache=cache, objective="fidelity",
                                  log_temperature=True, reference=ycfg.objective.reference)
        tv.append(float(np.asarray(fit.fitness)[0]))
        tk.append(float(np.asarray(fit.t_kin)[0]) if fit.t_kin is not None else math.nan)
    tv_a = np.asarray(tv)
    return {"tv": float(np.mean(tv_a)) if np.all(np.isfinite(tv_a)) else None,
            "tv_se": float(np.std(tv_a, ddof=1) / math.sqrt(len(tv_a))) if len(tv_a) > 1 and np.all(
                np.isfinite(tv_a)) else None,
            "t_kin": float(np.nanmean(tk)) if np.any(np.isfinite(tk)) else None, "diverged": int(np.sum(~np.isfinite(tv_a)))}


def run_one(name: str, overrides: tuple[str, ...], base, budget: int, points: int, out: Path, repeats: int) -> dict:
    cfg = apply_overrides(base, list(overrides))
    per_it = steps_per_iteration(cfg)
    num_outer = max(points, budget // per_it)
    cfg = dataclasses.replace(cfg, num_outer=num_outer, checkpoint_every=max(1, num_outer // points))
    run_dir = out / "runs" / name.replace("/", "__").replace(" ", "_").replace("(", "").replace(")", "")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    summary = meta_train(cfg, run_dir, progress=False, keep_checkpoints=0)  # every checkpoint: a yardstick point each
    seconds = time.perf_counter() - t0
    rows = read_log(run_dir)
    cache = ProgramCache()
    spec = cfg.tasks.specs()[0]
    curve = [{"iteration": 0, "inner_steps": 0, **yardstick(cfg, initial_meta_params(cfg), cache, spec, repeats)}]
    for step in committed_steps(run_dir / "checkpoints"):
        phi, _, _ = load_meta_params(run_dir / "checkpoints" / str(step))
        curve.append({"iteration": step, "inner_steps": step * per_it, **yardstick(cfg, phi, cache, spec, repeats)})
    losses = [r.get("meta_loss") for r in rows]
    return {"name": name, "overrides": list(overrides), "sampler_kind": cfg.sampler_kind,
            "estimator": cfg.es.estimator, "objective": cfg.objective.kind, "num_outer": num_outer,
            "inner_steps_per_iteration": per_it, "inner_steps": num_outer * per_it, "meta_train_seconds": seconds,
            "final_meta_loss": summary["final_meta_loss"],
            "meta_loss": [None if v is None or not math.isfinite(v) else float(v) for v in losses],
            "diverged_members": int(sum(r.get("divergent_members", 0) or 0 for r in rows)), "yardstick": curve}


def _median_blocks(values: list, blocks: int = 5) -> list:
    v = [x for x in values]
    n = max(1, len(v) // blocks)
    out = []
    for i in range(0, len(v), n):
        chunk = [x for x in v[i:i + n] if x is not None]
        out.append(float(np.median(chunk)) if chunk else None)
    return out[:blocks + 1]


def render(results: list[dict], args) -> str:
    f = lambda v, p=4: "—" if v is None else f"{v:.{p}g}"  # noqa: E731
    lines = [f"# Meta-loss curves at equal compute ({args.budget_steps} inner-chain steps per run, task {args.task})",
             "", f"Command: `python -m bench.meta_loss_curves {' '.join(args.argv)}`", "",
             "Yardstick (the same for every run): mean TV of the BMA predictive to the NUTS reference on the test "
             "split (fidelity; 10 samples over the 200 steps after 100 burn-in) and T_kin, mean over "
             f"{args.yardstick_repeats} fixed chain keys, at φ₀ (SGHMC) and at every checkpoint. Own meta-loss: "
             "medians of the run's logged meta-loss over fifths of the run (each objective on its own scale).", "",
             "| run | estimator | iterations | wall s | own meta-loss (medians per fifth) | yardstick TV: φ₀ → final "
             "(best) | T_kin φ₀ → final | diverged members |", "|---|---|---:|---:|---|---|---|---:|"]
    for r in results:
        ys = r["yardstick"]
        tvs = [p["tv"] for p in ys if p["tv"] is not None]
        own = ", ".join(f(v, 3) for v in _median_blocks(r["meta_loss"]))
        lines.append(f"| {r['name']} | {r['estimator']} | {r['num_outer']} | {r['meta_train_seconds']:.0f} | {own} | "
                     f"{f(ys[0]['tv'])} ± {f(ys[0]['tv_se'], 2)} → {f(ys[-1]['tv'])} ± {f(ys[-1]['tv_se'], 2)} "
                     f"({f(min(tvs) if tvs else None)}) | {f(ys[0]['t_kin'], 3)} → {f(ys[-1]['t_kin'], 3)} | "
                     f"{r['diverged_members']} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.2))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    for r in results:
        ys = [p for p in r["yardstick"] if p["tv"] is not None]
        ax1.plot([p["inner_steps"] for p in ys], [p["tv"] for p in ys], marker="o", ms=3, label=r["name"])
        ax2.plot([p["inner_steps"] for p in r["yardstick"]], [p["t_kin"] for p in r["yardstick"]], marker="o", ms=3)
    ax1.set(xlabel="inner-chain steps", ylabel="TV to NUTS reference (yardstick)", title="fidelity of φ during meta-training")
    ax2.set(xlabel="inner-chain steps", ylabel="T_kin", title="kinetic temperature (1 = correct)")
    ax2.axhline(1.0, color="k", lw=0.8, ls="--")
    ax1.legend(fontsize="x-small")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    import sys

    p = argparse.ArgumentParser(prog="python -m bench.meta_loss_curves", description=__doc__.split("\n\n")[0])
    p.add_argument("--output", required=True)
    p.add_argument("--task", default="digits/mlp-32")
    p.add_argument("--reference", default="results/references")
    p.add_argument("--budget-steps", type=int, default=180_000)
    p.add_argument("--points", type=int, default=6, help="checkpoints (yardstick points) per run")
    p.add_argument("--yardstick-repeats", type=int, default=4)
    p.add_argument("--runs", default=",".join(RUNS), help="comma-separated names of RUNS")
    p.add_argument("--set", action="append", default=[], help="override of the base config, key=value")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        p.error(f"unknown run(s) {unknown}; known: {list(RUNS)}")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    base = apply_overrides(base_config(args.task, args.reference), args.set)
    results = []
    for name in names:
        t0 = time.perf_counter()
        results.append(run_one(name, RUNS[name], base, args.budget_steps, args.points, out, args.yardstick_repeats))
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
        (out / "curves.json").write_text(json.dumps({"argv": args.argv, "runs": results}, indent=1))
        (out / "curves.md").write_text(render(results, args))
    plot(results, out / "curves.png")
    shutil.rmtree(out / "runs", ignore_errors=True)
    print(render(results, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
