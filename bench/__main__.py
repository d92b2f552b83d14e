"""python -m bench [--quick] [--skip B4,B6] [--only step_cost] — run benchmarks B1–B6, one line per figure, and
the per-family step-cost table.

B1 L2E step ÷ SGHMC step (CPU CNN; goal ≤ 1.25)        bench/inner_loop.py
B2 step in the compiled inner loop ÷ standalone step (≤ 1.1) bench/inner_loop.py
B3 ES population throughput ÷ (P × single chain) (≥ 0.9)   bench/es_throughput.py
B4 peak RSS of meta-training, inner 3000 ÷ 500 (≤ 1.1)     bench/memory.py
B5 ESS/s of L2E ÷ cyclical SGHMC, held-out task (≥ 1.5)    bench/ess.py
B6 wall time of `python -m meta_train --preset default` (≤ 600 s)
step_cost: B1 per model family — every sampler's step time and XLA FLOPs ÷ SGHMC's, the learned samplers'
   meta-model throughput ÷ this machine's f32 GEMM throughput (a Markdown table)   bench/step_cost.py
   options --family, --samplers, --calls, --repeats, --variants (paper-form L2E MLP variants, bench/meta_variants.py)
Every ratio is measured side by side in one process (medians of per-round ratios); B6 is absolute.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench import step_cost
from bench.step_cost import LIMITS_HELP

GOALS = {  # name: (description, goal, "le"/"ge")
    "B1": ("l2e/sghmc step ratio", 1.25, "le"),
    "B2": ("chunked/standalone step ratio", 1.10, "le"),
    "B3": ("ES population throughput ratio", 0.90, "ge"),
    "B4": ("peak RSS ratio inner 3000/500", 1.10, "le"),
    "B5": ("ESS/s ratio l2e/csghmc", 1.50, "ge"),
    "B6": ("meta_train --preset default wall s", 600.0, "le"),
}


FIGURES = ("B1", "B2", "B3", "B4", "B5", "B6", "STEP_COST")


def line(fig: str, value: float, extra: str = "", label: str | None = None) -> str:
    desc, goal, op = GOALS[fig]
    ok = value <= goal if op == "le" else value >= goal
    sym = "≤" if op == "le" else "≥"
    return (f"{fig} {label or desc}: {value:.2f} (goal {sym} {goal:g}) {'PASS' if ok else 'MISS'}"
            + (f"  [{extra}]" if extra else ""))


def run_b6(quick: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "meta_train", "--preset", "smoke" if quick else "default", "--output",
               f"{tmp}/run", "--overwrite", "--no-progress"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0


def _b1_b2(q: bool, skip: set, results: dict, emit) -> None:
    from bench.inner_loop import default_meta_params, make_task, step_costs
    from tasks.data.base import local_dir

    phi = default_meta_params()
    cases = [("digits", 8, 2, 64, 20 if q else 100), ("mnist", 8, 2, 128, 10 if q else 50)]
    for ds, ch, dep, bs, steps in cases:
        if ds == "mnist" and (q or local_dir(None, "mnist") is None):  # $L2E_DATA_DIR/mnist or ~/.cache/l2e/mnist
            continue
        t0 = time.perf_counter()
        r = step_costs(make_task(ds, ch, dep), steps=steps, repeats=2 if q else 5, batch_size=bs, scan=False,
                       variants=("nomlp",), meta_params=phi)
        results[f"B1B2 {r['task']}"] = r
        tag = f"{r['task']} d={r['d']} batch {bs}"
        if "B1" not in skip:
            emit(line("B1", r["B1"], f"{tag}; without the meta-model MLP (α=0, β=r) "
                                     f"{r['nomlp/sghmc']:.2f}; {time.perf_counter() - t0:.0f} s"))
        if "B2" not in skip:
            emit(line("B2", r["B2"], f"{tag}; sghmc {r['sghmc chunked/standalone']:.2f}"))
    if "B1" not in skip:
        emit("B1 ResNet20-FRN/GPU (goal ≤ 1.10): not measured — no GPU lent to this task")


def _b3(q: bool, results: dict, emit) -> None:
    from bench.es_throughput import es_throughput

    t0 = time.perf_counter()
    r = es_throughput((2,) if q else (2, 4, 8), steps=10 if q else 100, repeats=2 if q else 3)
    results["B3"] = r
    for k, v in r.items():
        if k.startswith("B3 "):
            emit(line("B3", v, f"{r['task']}, {k[3:]}; {time.perf_counter() - t0:.0f} s",
                      label=f"ES population throughput ratio {k[3:]}"))


def _b4(q: bool, results: dict, emit) -> None:
    from bench.memory import memory_ratio

    r = memory_ratio(300 if q else 3000, 50 if q else 500, num_outer=1 if q else 2)
    results["B4"] = r
    emit(line("B4", r["B4"], f"{r['rss_long_mib']:.0f} / {r['rss_short_mib']:.0f} MiB, "
                             f"inner {r['long']}/{r['short']}; {r['seconds']:.0f} s",
              label=f"peak RSS ratio inner {r['long']}/{r['short']}"))


def _b5(q: bool, results: dict, emit) -> None:
    from bench.ess import ess_per_second

    t0 = time.perf_counter()
    r = ess_per_second(chains=2 if q else 3, steps=100 if q else 1000)
    results["B5"] = r
    lw, cw = r["l2e"], r["csghmc"]
    emit(line("B5", r["B5"], f"{r['task']}, {r['chains']} chains × {r['steps']} steps, 10 draws each; mean "
                             f"per-coordinate ESS per chain {np.mean(lw['weight_ess_per_chain']):.2f} in "
                             f"{lw['seconds']:.1f} s vs {np.mean(cw['weight_ess_per_chain']):.2f} in "
                             f"{cw['seconds']:.1f} s; {time.perf_counter() - t0:.0f} s",
              label="ESS/s ratio l2e/csghmc, weight space (paper's definition)"))
    emit(line("B5", r["B5 function space"], f"test log-predictive ESS {lw['ess']:.1f} vs {cw['ess']:.1f} "
                                            f"of {lw['samples']} draws",
              label="ESS/s ratio l2e/csghmc, function space"))


def _step_cost(q: bool, results: dict, emit, kw: dict) -> None:
    """The step-cost table; kw: step_cost.parse of the command line (checked before any figure ran)."""
    kw = dict(kw)
    if q:
        kw.update(families=kw["families"] or ["cnn-digits"], calls=min(kw["calls"], 2),
                  repeats=min(kw["repeats"], 2))
    r = step_cost.run(**kw, emit=emit)
    results["step_cost"] = {k: v for k, v in r.items() if k != "table"}


def _b6(q: bool, results: dict, emit) -> None:
    s = run_b6(q)
    results["B6"] = s
    emit(line("B6", s, "smoke preset (--quick)" if q else "default preset",
              label="meta_train --preset " + ("smoke" if q else "default") + " wall s"))


def main(argv=None) -> dict:
    from cli import OneLineErrorParser

    ap = OneLineErrorParser(prog="python -m bench", description=__doc__, epilog=LIMITS_HELP + ".",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny repeats / budgets (harness check, not the figures)")
    ap.add_argument("--skip", default="", help="comma-separated figures to skip, e.g. B4,B6")
    ap.add_argument("--only", default="", help="comma-separated figures to run (B1…B6, step_cost); default all")
    ap.add_argument("--json", default=None, help="also write all raw results to this JSON file")
    step_cost.add_arguments(ap)
    a = ap.parse_args(argv)
    try:
        step_cost_kw = step_cost.parse(a)  # flags checked before any figure runs
    except ValueError as e:
        ap.error(str(e))
    skip = {s.strip().upper() for s in a.skip.split(",") if s.strip()}
    only = {s.strip().upper() for s in a.only.split(",") if s.strip()}
    if only - set(FIGURES):
        ap.error(f"unknown figure(s) {sorted(only - set(FIGURES))} (known: {', '.join(FIGURES)})")
    if only:
        skip |= set(FIGURES) - only
    results, lines = {}, []
    t_all = time.perf_counter()

    def emit(s):
        lines.append(s)
        print(s, flush=True)

    if not {"B1", "B2"} <= skip:
        _b1_b2(a.quick, skip, results, emit)
    for fig, run in (("B3", _b3), ("B4", _b4), ("B5", _b5), ("B6", _b6)):
        if fig not in skip:
            run(a.quick, results, emit)
    if "STEP_COST" not in skip:
        _step_cost(a.quick, results, emit, step_cost_kw)
    total = time.perf_counter() - t_all
    emit(f"total {total:.0f} s")
    results["total_seconds"] = total
    results["lines"] = lines
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return results


def cli_main(argv=None) -> int:
    """`python -m bench ...` under the CLI guard (cli.guard: whatever escapes is one `error:` line)."""
    from cli import guarded

    def run(args: list[str]) -> int:
        main(args)
        return 0

    return guarded(run, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    raise SystemExit(cli_main())
