"""Report writers for evaluation results: JSON, Markdown tables, the plain-text table; PNGs via evaluate.plots.

Input is the plain dict of `evaluate.run.evaluate`::

    {"config": {...},
     "tasks": {task_name: {"kind": "classification" | "regression", "held_out": str,
                           "methods": {method: entry}, "reference": {...}?, "band": {...}?}}}

entry: classification "acc", "nll", "ece", "pairwise_kld", ["agreement", "total_variation"];
regression "lppd", "nll", "rmse", "calibration_error"; both "grad_evals", "gradient", "epochs", "seconds",
"num_samples", "divergent_chains", "hyperparameters", "curve" ({"num_samples", metric: [...]}), and
optionally "ess" ({"mean_ess", "ess_per_second", "ess_per_1k_grads", "frac_chainwise_rhat_below_1.1", …})
and "barrier" ({"lambdas", "error", "nll", "error_barrier", "nll_barrier", "pair"}).  The method "hmc" is the
reference posterior: shown in the tables, never bolded as best.  band (1-D regression): {"x_train", "y_train",
"x", "y", "methods": {method: {"mean", "lower", "upper"}}}.

A metric column appears when at least one method has it; missing entries are rendered as "—".  Curve keys
``<metric>_sd`` are drawn as ±1 sd bands.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from evaluate import plots
from l2e.io import atomic_write_bytes

__all__ = ["format_table", "probe_writable", "render_markdown", "write_json", "write_markdown", "write_report"]

TABLE_METRICS = {
    "classification": ("acc", "nll", "ece", "pairwise_kld", "agreement", "total_variation"),
    "regression": ("lppd", "nll", "rmse", "calibration_error"),
}
BUDGET_COLUMNS = ("gradient", "grad_evals", "epochs", "seconds")
_BEST = {"acc": max, "nll": min, "lppd": max, "rmse": min, "agreement": max, "total_variation": min,
         "calibration_error": min}
REFERENCE_METHOD = "hmc"
_MISSING = "—"


# --------------------------------------------------------------------------- utils
def probe_writable(out: Path, error) -> None:
    """Raise `error` unless `out` (or its nearest existing ancestor) is a directory where a file can really be
    created (os.access is not enough: root, read-only mounts)."""
    probe_dir = out
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise error(f"--output {out}: {probe_dir} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise error(f"--output {out} is not writable ({probe_dir}: {e.strerror})") from None


def _json_default(obj):
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__array__") and hasattr(obj, "shape")):
        return np.asarray(obj).tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _number(v):
    """Return v as a python float/int if it is a finite-or-nan real scalar, else None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (Integral, Real)):
        return v
    return None


def _fmt(metric: str, v) -> str:
    x = _number(v)
    if x is None:
        return _MISSING if v is None else str(v)
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if metric == "seconds":
        return f"{float(x):.1f}"
    if metric == "grad_evals":
        return f"{round(x)}" if math.isfinite(float(x)) else f"{x}"
    if metric == "epochs":
        return f"{float(x):.3g}"
    return f"{float(x):.4g}"


def _kind(task: dict) -> str:
    return task.get("kind") or "classification"


def _tasks(results: dict) -> dict:
    return results.get("tasks", {}) or {}


# --------------------------------------------------------------------------- JSON
def write_json(results: dict, path) -> Path:
    """Write ``results`` as indented JSON with sorted keys, atomically. Returns the path."""
    text = json.dumps(results, sort_keys=True, indent=2, default=_json_default)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"))


# --------------------------------------------------------------------------- Markdown
def _config_lines(config: dict) -> list[str]:
    if not config:
        return ["_No configuration recorded._"]
    lines = []
    for key in sorted(config):
        val = config[key]
        if isinstance(val, (dict, list, tuple)):
            val = f"`{json.dumps(val, sort_keys=True, default=_json_default)}`"
        lines.append(f"- **{key}**: {val}")
    return lines


def _best_values(methods: dict) -> dict:
    best = {}
    for metric, pick in _BEST.items():
        vals = [_number(m.get(metric)) for k, m in methods.items() if k != REFERENCE_METHOD]
        vals = [float(v) for v in vals if v is not None and not math.isnan(float(v))]
        if vals:
            best[metric] = pick(vals)
    return best


def _columns(methods: dict, names) -> list[str]:
    return [c for c in names if any(m.get(c) is not None for m in methods.values())]


def _table(methods: dict, columns: list[str], best: dict | None = None) -> list[str]:
    best = best or {}
    lines = ["| method | " + " | ".join(columns) + " |",
             "|---|" + "|".join("---" if c == "gradient" else "---:" for c in columns) + "|"]
    for mname, m in methods.items():
        cells = []
        for metric in columns:
            cell = _fmt(metric, m.get(metric))
            x = _number(m.get(metric))
            if mname != REFERENCE_METHOD and metric in best and x is not None and float(x) == best[metric]:
                cell = f"**{cell}**"
            cells.append(cell)
        lines.append(f"| {mname} | " + " | ".join(cells) + " |")
    return lines + [""]


def _diagnostics_section(methods: dict) -> list[str]:
    rows = []
    for mname, m in methods.items():
        ess, bar = m.get("ess") or {}, m.get("barrier") or {}
        if not ess and not bar:
            continue
        rows.append({"method": mname, "draws": ess.get("draws_per_chain"), "chains": ess.get("chains"),
                     "mean_ess": ess.get("mean_ess"), "ess_per_second": ess.get("ess_per_second"),
                     "ess_per_1k_grads": ess.get("ess_per_1k_grads"),
                     "cR̂<1.1": ess.get("frac_chainwise_rhat_below_1.1"),
                     "error_barrier": bar.get("error_barrier"), "nll_barrier": bar.get("nll_barrier")})
    if not rows:
        return []
    cols = ["chains", "draws", "mean_ess", "ess_per_second", "ess_per_1k_grads", "cR̂<1.1", "error_barrier",
            "nll_barrier"]
    estimator = next((m["ess"].get("estimator") for m in methods.values() if m.get("ess")), None)
    lines = ["Diagnostics: ESS of the kept draws per chain" + (f" ({estimator})" if estimator else "")
             + "; cR̂ = chainwise split R̂ (fraction of parameters below 1.1); loss barriers along the linear "
             "path between two samples (test error / RMSE, and NLL; METRICS §4).", ""]
    lines += ["| method | " + " | ".join(cols) + " |", "|---|" + "|".join("---:" for _ in cols) + "|"]
    for r in rows:
        lines.append(f"| {r['method']} | " + " | ".join(_fmt(c, r[c]) for c in cols) + " |")
    return lines + [""]


def _task_section(name: str, task: dict) -> list[str]:
    methods = task.get("methods", {}) or {}
    kind = _kind(task)
    lines = [f"## {name}", ""]
    if task.get("held_out") is not None:
        lines += [f"Held out: {task['held_out']}", ""]
    if not methods:
        return lines + ["_No methods._", ""]
    ref = task.get("reference") or {}
    if ref:
        lines += [f"Reference posterior (`{REFERENCE_METHOD}` row; agreement and total variation are against it): "
                  f"{ref.get('path', '?')}", ""]
        meta = ref.get("metadata") or {}
        if "converged" in meta:
            rhat = ((meta.get("function_space") or {}).get("split_rhat") or {}).get("max")
            state = "converged" if meta["converged"] else "**NOT converged**"
            lines += [f"Reference convergence: {state} by the rule '{meta.get('convergence_rule', '?')}' "
                      f"(function-space split R̂ max {_fmt('x', rhat)}, divergent transitions "
                      f"{_fmt('x', meta.get('num_divergent'))}).", ""]
    lines += _table(methods, _columns(methods, TABLE_METRICS[kind]) + _columns(methods, BUDGET_COLUMNS),
                    _best_values(methods))
    counts = {k: m.get("num_samples") for k, m in methods.items() if m.get("num_samples") is not None}
    if counts:
        lines.append("Samples per method: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if len(set(counts.values())) > 1:
            lines[-1] += " (**sample counts differ**)"
        lines.append("")
    divergent = {k: m.get("divergent_chains") for k, m in methods.items()
                 if (_number(m.get("divergent_chains")) or 0) > 0}
    if divergent:
        lines.append("Methods with divergent chains: "
                     + ", ".join(f"{k} ({v})" for k, v in divergent.items()))
        lines.append("")
    return lines + _diagnostics_section(methods)


def render_markdown(results: dict) -> str:
    """Render the results as Markdown: title, config summary, one table per task."""
    title = (results.get("config") or {}).get("title", "Benchmark report")
    lines = [f"# {title}", "", "## Configuration", ""]
    lines += _config_lines(results.get("config") or {})
    lines += ["", "Best value per metric and task in **bold** (accuracy, LPPD, agreement: max; NLL, RMSE, total "
              "variation, calibration error: min; the `hmc` reference row is never bolded); metrics to 4 "
              "significant digits, seconds to 0.1 s. grad_evals counts the method's gradient evaluations of the "
              "kind in `gradient` (minibatch or full batch); epochs = per-example gradients / N.", ""]
    for name in sorted(_tasks(results)):
        lines += _task_section(name, _tasks(results)[name])
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(results: dict, path) -> Path:
    """Write ``render_markdown(results)`` to ``path`` atomically. Returns the path."""
    return atomic_write_bytes(path, render_markdown(results).encode("utf-8"))


# --------------------------------------------------------------------------- all
def write_report(results: dict, out_dir) -> dict[str, Path]:
    """Write report.json, report.md and bma_curves.png into ``out_dir``, plus ess.png, barriers.png and
    regression_band.png when the results hold ESS, loss barriers or a 1-D regression band.

    Returns {"json", "markdown", "curves"[, "ess", "barriers", "band"]: Path}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": write_json(results, out / "report.json"),
        "markdown": write_markdown(results, out / "report.md"),
        "curves": plots.plot_curves(results, out / "bma_curves.png"),
    }
    if plots.has_entry(results, "ess"):
        paths["ess"] = plots.plot_ess(results, out / "ess.png")
    if plots.has_entry(results, "barrier"):
        paths["barriers"] = plots.plot_barriers(results, out / "barriers.png")
    if plots.band_tasks(results):
        paths["band"] = plots.plot_band(results, out / "regression_band.png")
    return paths


def format_table(results: dict) -> str:
    """A compact plain-text table per task kind: task, method, acc/lppd, nll, ece/rmse, kld/calibration,
    gradient evaluations (m = minibatch, f = full batch), epochs, samples, divergent chains, seconds, mean ESS."""
    def f(v, spec):
        return "—" if v is None else format(v, spec)

    lines = []
    for tname, task in results["tasks"].items():
        reg = task.get("kind") == "regression"
        c1, c3, c4 = ("lppd", "rmse", "cal") if reg else ("acc", "ece", "kld")
        k1, k3, k4 = ("lppd", "rmse", "calibration_error") if reg else ("acc", "ece", "pairwise_kld")
        header = (f"{'task':<34} {'method':<13} {c1:>7} {'nll':>7} {c3:>7} {c4:>7} {'grads':>8} {'epochs':>7} "
                  f"{'K':>4} {'div':>3} {'sec':>7} {'ess':>6}")
        lines += [header, "-" * len(header)]
        for mname, m in task["methods"].items():
            grads = "—" if m.get("grad_evals") is None else f"{m['grad_evals']}{str(m.get('gradient', ' '))[0]}"
            ess = (m.get("ess") or {}).get("mean_ess")
            lines.append(
                f"{tname[:34]:<34} {mname:<13} {f(m.get(k1), '.4f'):>7} {f(m.get('nll'), '.4f'):>7} "
                f"{f(m.get(k3), '.4f'):>7} {f(m.get(k4), '.3f'):>7} {grads:>8} {f(m.get('epochs'), '.1f'):>7} "
                f"{f(m.get('num_samples'), 'd'):>4} {f(m.get('divergent_chains'), 'd'):>3} "
                f"{f(m.get('seconds'), '.2f'):>7} {f(ess, '.1f'):>6}")
        lines.append("")
    return "\n".join(lines).rstrip()
