"""Meta-select a learned sampler's protocol choices — its sampling window (Transient-L2E's window_fraction, the freeze
at its start) and its chain count M — on the meta-training references, never the held-out ones.

The discrete, once-for-all-tasks stage of meta-learning that ES cannot do (a step count is not differentiable and the
window recompiles the chain): every candidate is a budget curve of the same checkpoint on the meta-training
references (`python -m evaluate curve`, one run directory per window fraction), and the choice is the (fraction, M)
with the smallest geometric mean, over the references, seeds and both fidelity measures (TV and the energy distance
E²), of the gradients to reach 1.1 × the K-draw floor with the dispersion ratios in band (the curve's
"gradients to floor", oracle choice) — a seed that does not reach it counts as 2 × the largest budget. That is the
issue's goal measure itself, so the selection optimises what the held-out evaluation reports.

    python -m bench.select_window --run 0.25=results/curve_window_0.25 --run 0.5=results/curve_meta_refs_merged \\
        --run 0.75=results/curve_window_0.75 [--method l2e_transient] [--json FILE]

Prints one row per (fraction, M): the score, seeds reached per measure, and the choice.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from evaluate.reference import META_TRAIN_REFERENCES

MEASURES = ("tv", "energy")


def _runs(specs: list[str]) -> dict[float, dict]:
    """{fraction: curve.json} of "FRACTION=DIR" arguments; SystemExit (one error line) on a bad one."""
    out = {}
    for spec in specs:
        fraction, sep, path = spec.partition("=")
        try:
            f = float(fraction)
        except ValueError:
            f = math.nan
        if not sep or not 0 < f < 1:
            raise SystemExit(f"error: --run must be FRACTION=DIR with 0 < FRACTION < 1, got {spec!r}")
        file = Path(path) / "curve.json"
        if not file.is_file():
            raise SystemExit(f"error: --run {spec!r}: no curve.json in {path}")
        out[f] = json.loads(file.read_text())
    return out


def scores(runs: dict[float, dict], method: str, tasks=META_TRAIN_REFERENCES) -> list[dict]:
    """One row per (fraction, M) present for every task: {"fraction", "chains", "score" (geometric-mean gradients,
    module doc), "reached": {measure: "r/n"}}."""
    rows = []
    for fraction, curve in sorted(runs.items()):
        cap = 2 * max(curve["curve"]["budgets"])
        names = set.intersection(*(set(curve["tasks"].get(t, {}).get("methods", {})) for t in tasks))
        for name in sorted(n for n in names if n == method or n.startswith(f"{method}@M=")):
            logs, reached = [], {m: [0, 0] for m in MEASURES}
            for task in tasks:
                row = curve["tasks"][task]["methods"][name]
                for measure in MEASURES:
                    for g in row["choices"]["oracle"]["to_floor"][measure]["per_seed"]:
                        logs.append(math.log(cap if g is None else g))
                        reached[measure][0] += g is not None
                        reached[measure][1] += 1
            rows.append({"fraction": fraction, "chains": row["chains"], "score": float(np.exp(np.mean(logs))),
                         "reached": {m: f"{r}/{n}" for m, (r, n) in reached.items()}})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.select_window", description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", required=True, help="FRACTION=DIR: a curve run at that window fraction")
    p.add_argument("--method", default="l2e_transient", help="the curve's method name (default: %(default)s)")
    p.add_argument("--json", default=None, help="write the rows and the choice here")
    args = p.parse_args(argv)
    rows = scores(_runs(args.run), args.method)
    if not rows:
        raise SystemExit(f"error: no run holds method {args.method!r} on every meta-training reference")
    best = min(rows, key=lambda r: r["score"])
    print("| window fraction | M | geometric-mean gradients to 1.1 × floor | TV reached | E² reached |")
    print("|---|---|---|---|---|")
    for r in rows:
        mark = " (chosen)" if r is best else ""
        print(f"| {r['fraction']:g} | {r['chains']} | {r['score']:,.0f}{mark} | {r['reached']['tv']} | "
              f"{r['reached']['energy']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "chosen": best}, indent=1))


if __name__ == "__main__":
    main()
