"""python -m bench.defaults_audit — does every method finish at its default settings without a divergent chain and
with its kinetic temperature within 25 % of T?  (The budget-curve issue's "defaults that do not diverge".)

Runs `python -m evaluate --preset default` (its budgets and every method's default grid, tuned by validation NLL)
on the committed reference tasks and on README's own-data example (`npz:mine.npz/mlp-32x32`, written here with
README's code), for the given methods and seeds, then writes the audit: per task × method the divergent chains
(over all seeds), T_kin (mean over seeds, and the seeds' range) and the verdict:

  ok          no divergent chain and |T_kin − T| ≤ 0.25 T on every seed (ensembles: no T_kin, divergence only)
  divergent   a divergent chain on some seed (evaluate.methods.outputs: non-finite, or a prediction / parameter
              scale 100× the others')
  hot / cold  T_kin above 1.25 T / below 0.75 T on some seed

    python -m bench.defaults_audit --output results/defaults_audit [--methods sghmc,csghmc] [--seeds 0,1,2]
        [--tasks digits/mlp-32,...] [--summarise-only]

Needs $L2E_DATA_DIR for the UCI and MNIST references (tasks without their data are left out with a note).
Output: OUTPUT/eval (the evaluation), OUTPUT/audit.json, OUTPUT/audit.md.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TASKS = ("digits/mlp-32", "breast_cancer/mlp-16", "digits/mlp-16", "wine/mlp-16",
         "uci:power-plant/mlp-linear", "mnist/mlp-linear:max=10000", "npz:{mine}/mlp-32x32")
"""The committed converged references (results/references) and README's own-data example."""
def _audited() -> tuple[str, ...]:
    from evaluate.methods.registry import REGISTRY

    return tuple(name for name, m in REGISTRY.items() if m.audit)


METHODS = _audited()
"""The methods whose Method.audit is set (the default preset's methods and the budget-curve rivals), in registry
order."""
TOLERANCE = 0.25
"""|T_kin − T| ≤ TOLERANCE · T."""


def write_readme_example(path: Path) -> Path:
    """README's own-data example file (its exact code): 500 training and 100 test rows, 4 features."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 4)).astype(np.float32)
    y = (np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.normal(size=600)).astype(np.float32)
    np.savez(path, x_train=x[:500], y_train=y[:500], x_test=x[500:], y_test=y[500:])
    return path


def verdict(divergent: float, t_kins: list, temperature: float) -> str:
    """The audit's verdict of one task × method (module docstring)."""
    if divergent > 0:
        return "divergent"
    finite = [t for t in t_kins if t is not None and math.isfinite(t)]
    if any(t > (1 + TOLERANCE) * temperature for t in finite):
        return "hot"
    if any(t < (1 - TOLERANCE) * temperature for t in finite):
        return "cold"
    return "ok"


def summarise(report: dict) -> list[dict]:
    """One row per task × method of an evaluation report.json (several seeds or one)."""
    rows = []
    for task, entry in report["tasks"].items():
        for method, m in entry["methods"].items():
            seeds = m.get("seeds") or {"-": m}
            div = sum(float(s.get("divergent_chains") or 0) for s in seeds.values())
            chains = sum(float(s.get("num_chains") or 1) for s in seeds.values())
            t_kins = [s.get("t_kin") for s in seeds.values()]
            temp = m.get("temperature")
            temp = float(temp) if isinstance(temp, (int, float)) else 1.0  # "n/a (optimiser)": no T_kin either
            lrs = sorted({str(s.get("hyperparameters", {}).get("learning_rate")) for s in seeds.values()})
            rows.append(dict(task=task, method=method, seeds=len(seeds), divergent_chains=div, chains=chains,
                             t_kin=[None if t is None else float(t) for t in t_kins], temperature=temp,
                             learning_rates=lrs, verdict=verdict(div, t_kins, temp)))
    return rows


def markdown(rows: list[dict]) -> str:
    def tk(r):
        ts = [t for t in r["t_kin"] if t is not None]
        if not ts:
            return "—"
        return f"{np.mean(ts):.3g}" + (f" ({min(ts):.3g}–{max(ts):.3g})" if len(ts) > 1 else "")

    lines = ["| task | method | divergent chains | T_kin (range over seeds) | lr chosen | verdict |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['method']} | {r['divergent_chains']:g} / {r['chains']:g} | {tk(r)} | "
                     f"{', '.join(r['learning_rates'])} | {r['verdict']} |")
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("ok", "divergent", "hot", "cold")}
    return "\n".join(lines) + "\n\n" + ", ".join(f"{k}: {v}" for k, v in counts.items()) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.defaults_audit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", required=True)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="passed on to evaluate")
    ap.add_argument("--summarise-only", action="store_true", help="only (re)write the audit of OUTPUT/eval")
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not a.summarise_only:
        mine = write_readme_example(out / "mine.npz")
        tasks = [t.format(mine=mine) for t in a.tasks.split(",") if t]
        cmd = [sys.executable, "-m", "evaluate", "--preset", "default", "--seeds", a.seeds, "--quiet",
               "--output", str(out / "eval"), "--overwrite", "--set", f"methods={a.methods}"]
        for t in tasks:
            cmd += ["--task", t]
        for o in a.overrides:
            cmd += ["--set", o]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    rows = summarise(json.loads((out / "eval" / "report.json").read_text()))
    seconds = time.perf_counter() - t0
    (out / "audit.json").write_text(json.dumps({"rows": rows, "seconds": seconds, "tolerance": TOLERANCE},
                                               indent=1))
    text = markdown(rows)
    (out / "audit.md").write_text(f"# Defaults audit (python -m bench.defaults_audit)\n\n{text}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
