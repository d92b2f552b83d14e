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

Prints one row per (fraction, M): the score, seeds reached per measure, and the choice. Every input is checked before
anything is scored or written (each curve.json against evaluate.curve.schema, one run per fraction, --json a file in
a writable directory): a bad one is one `error:` line and exit status 2.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from base.io import ConfigError, atomic_write_text, one_line, read_json
from evaluate.reference import META_TRAIN_REFERENCES

MEASURES = ("tv", "energy")


def _fraction(spec: str) -> tuple[float, str]:
    """(fraction, DIR) of a "FRACTION=DIR" argument; ConfigError on a bad one."""
    fraction, sep, path = spec.partition("=")
    try:
        f = float(fraction)
    except ValueError:
        f = math.nan
    if not sep or not path or not 0 < f < 1:
        raise ConfigError(f"--run must be FRACTION=DIR with 0 < FRACTION < 1, got {spec!r}")
    return f, path


def _runs(specs: list[str]) -> dict[float, dict]:
    """{fraction: curve.json} of "FRACTION=DIR" arguments, each file checked against the curve result's schema
    (evaluate.curve.schema) before anything is scored; ConfigError on a bad argument, a fraction given twice or a
    file that is missing, unreadable, not JSON or not a curve result."""
    from evaluate.curve.schema import check_curve_result

    parsed = [_fraction(spec) for spec in specs]
    seen: dict[float, str] = {}
    for (f, path), spec in zip(parsed, specs):
        if f in seen:
            raise ConfigError(f"--run: window fraction {f:g} given twice ({seen[f]!r} and {spec!r}); one run per "
                              "fraction")
        seen[f] = spec
    out = {}
    for f, path in parsed:
        file = Path(path) / "curve.json"
        out[f] = check_curve_result(read_json(file, f"--run {f:g}={path}", shown=str(file)), str(file))
    return out


def scores(runs: dict[float, dict], method: str, tasks=META_TRAIN_REFERENCES) -> list[dict]:
    """One row per (fraction, M) present for every task: {"fraction", "chains", "score" (geometric-mean gradients,
    module doc), "reached": {measure: "r/n"}}."""
    if not tasks:
        raise ConfigError("no task to score the runs on")
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


def _json_output(path: str | None) -> Path | None:
    """--json FILE checked before anything is read: not a directory, nor anything but a regular file, in an existing
    writable directory (evaluate.report.probe_writable)."""
    from evaluate.report import probe_writable

    if path is None:
        return None
    out = Path(path)
    if out.is_dir() or (out.exists() and not out.is_file()):
        raise ConfigError(f"--json {path}: {'a directory' if out.is_dir() else 'not a regular file'}, expected a file")
    if not out.parent.is_dir():
        raise ConfigError(f"--json {path}: no directory {out.parent}")
    probe_writable(out.parent, ConfigError)
    return out


def _main(argv: list[str]) -> int:
    from cli import OneLineErrorParser

    p = OneLineErrorParser(prog="python -m bench.select_window", description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", required=True, help="FRACTION=DIR: a curve run at that window fraction "
                   "(repeatable, one per fraction)")
    p.add_argument("--method", default="l2e_transient", help="the curve's method name (default: %(default)s)")
    p.add_argument("--json", default=None, help="write the rows and the choice here")
    args = p.parse_args(argv)
    try:
        out = _json_output(args.json)
        rows = scores(_runs(args.run), args.method)
        if not rows:
            raise ConfigError(f"no run holds method {args.method!r} on every meta-training reference "
                              f"({', '.join(META_TRAIN_REFERENCES)})")
    except ConfigError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    best = min(rows, key=lambda r: r["score"])
    print("| window fraction | M | geometric-mean gradients to 1.1 × floor | TV reached | E² reached |")
    print("|---|---|---|---|---|")
    for r in rows:
        mark = " (chosen)" if r is best else ""
        print(f"| {r['fraction']:g} | {r['chains']} | {r['score']:,.0f}{mark} | {r['reached']['tv']} | "
              f"{r['reached']['energy']} |")
    if out is not None:
        try:
            atomic_write_text(out, json.dumps({"rows": rows, "chosen": best}, indent=1))
        except OSError as e:
            print(f"error: --json {out}: cannot write ({e.strerror or one_line(e)})", file=sys.stderr)
            return 2
    return 0


def main(argv=None) -> int:
    """`python -m bench.select_window ...` under the CLI guard (cli.guard: whatever escapes is one `error:` line);
    returns the exit status (2: an input error, one `error:` line, nothing written)."""
    from cli import guarded

    return guarded(_main, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    raise SystemExit(main())
