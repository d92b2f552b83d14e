"""The Markdown tables of the evaluation report (evaluate.report): the per-task metric table with its bolding
rule (`bold_cells`, `beats`), and the diagnostics, cost and dispersion sections; number formatting.

Cells of entries aggregated over seeds (evaluate.seeds: "se", "n_seeds") read "mean ± se".
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

__all__ = ["BUDGET_COLUMNS", "COST_COLUMNS", "REFERENCE_METHOD", "TEMPERATURE_COLUMNS", "beats",
           "bold_cells", "columns", "cost_section", "diagnostics_section", "dispersion_section", "fmt", "metric_table", "multi_seed",
           "number"]

TEMPERATURE_COLUMNS = ("temperature", "t_kin")
BUDGET_COLUMNS = ("gradient", "grad_evals", "epochs", "seconds")
COST_COLUMNS = ("flops_per_step", "seconds_per_step", "tuning_runs", "tuning_grad_evals", "tuning_seconds",
                "budget_steps")
DISPERSION_COLUMNS = ("weight_norm", "pairwise_distance", "pairwise_distance_within_chain", "predictive_variance")
_HEADERS = {"temperature": "T", "t_kin": "T_kin"}
_BEST = {"acc": max, "nll": min, "lppd": max, "rmse": min, "agreement": max, "total_variation": min,
         "calibration_error": min}
REFERENCE_METHOD = "hmc"
_MISSING = "—"


def number(v):
    """Return v as a python float/int if it is a finite-or-nan real scalar, else None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (Integral, Real)):
        return v
    return None


def fmt(metric: str, v) -> str:
    x = number(v)
    if x is None:
        return _MISSING if v is None else str(v)
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if metric in ("seconds", "tuning_seconds"):
        return f"{float(x):.1f}"
    if metric in ("flops_per_step", "seconds_per_step"):
        return f"{float(x):.3g}"
    if metric == "grad_evals":
        return f"{round(x)}" if math.isfinite(float(x)) else f"{x}"
    if metric == "epochs":
        return f"{float(x):.3g}"
    return f"{float(x):.4g}"



def _se(entry: dict, metric: str):
    """The standard error of `metric` in an entry aggregated over seeds (evaluate.seeds), else None."""
    return number((entry.get("se") or {}).get(metric))


def multi_seed(methods: dict) -> bool:
    return any("n_seeds" in m for m in methods.values())


def beats(best: float, se_best, other: float, se_other) -> bool:
    """The bolding rule over seeds: |best − other| > 2·sqrt(se_best² + se_other²) (False without both s.e.)."""
    if se_best is None or se_other is None:
        return False
    return abs(best - other) > 2.0 * math.sqrt(float(se_best) ** 2 + float(se_other) ** 2)


def bold_cells(methods: dict) -> dict[str, set]:
    """{metric: methods whose value is bolded}.  One seed: every method at the best value.  Several seeds
    (entries with "n_seeds"): the single best method, only when it `beats` the next best (of several tied next
    best values, the one with the largest s.e.); alone it is bolded.  The reference row never is."""
    multi, out = multi_seed(methods), {}
    for metric, pick in _BEST.items():
        vals = {k: float(number(m.get(metric))) for k, m in methods.items()
                if k != REFERENCE_METHOD and number(m.get(metric)) is not None}
        vals = {k: v for k, v in vals.items() if not math.isnan(v)}
        if not vals:
            continue
        best = pick(vals.values())
        winners = {k for k, v in vals.items() if v == best}
        if not multi:
            out[metric] = winners
            continue
        others = {k: v for k, v in vals.items() if k not in winners}
        if len(winners) > 1:
            continue
        (w,) = winners
        if not others:
            out[metric] = winners
            continue
        nxt = pick(others.values())
        se_next = max((_se(methods[k], metric) for k, v in others.items() if v == nxt),
                      key=lambda x: -1.0 if x is None else float(x))
        if beats(best, _se(methods[w], metric), nxt, se_next):
            out[metric] = winners
    return out


def columns(methods: dict, names) -> list[str]:
    return [c for c in names if any(m.get(c) is not None for m in methods.values())]


def _cell(metric: str, entry: dict) -> str:
    """The formatted value, with " ± se" over seeds for the metrics, T_kin and a T that varies (tuned); the
    budget columns show their mean only (their s.e. stays in the JSON)."""
    cell = fmt(metric, entry.get(metric))
    se = _se(entry, metric)
    if se is None or metric in BUDGET_COLUMNS or (metric == "temperature" and se == 0):
        return cell
    return f"{cell} ± {fmt(metric, se)}"


def metric_table(methods: dict, cols: list[str], bold: dict | None = None) -> list[str]:
    bold = bold or {}
    lines = ["| method | " + " | ".join(_HEADERS.get(c, c) for c in cols) + " |",
             "|---|" + "|".join("---" if c == "gradient" else "---:" for c in cols) + "|"]
    for mname, m in methods.items():
        cells = []
        for metric in cols:
            cell = _cell(metric, m)
            if mname in bold.get(metric, ()):
                cell = f"**{cell}**"
            cells.append(cell)
        lines.append(f"| {mname} | " + " | ".join(cells) + " |")
    return lines + [""]


def cost_section(methods: dict) -> list[str]:
    """Cost per method: FLOPs and seconds per update, tuning runs and their cost, steps of a wall-time budget."""
    rows = {}
    for mname, m in methods.items():
        tuning, tb = m.get("tuning") or {}, m.get("time_budget") or {}
        row = {"flops_per_step": m.get("flops_per_step"), "seconds_per_step": m.get("seconds_per_step"),
               "tuning_runs": tuning.get("runs"), "tuning_grad_evals": tuning.get("grad_evals"),
               "tuning_seconds": tuning.get("seconds"), "budget_steps": tb.get("num_steps")}
        if any(v is not None for v in row.values()):
            rows[mname] = row
    if not rows:
        return []
    cols = columns(rows, COST_COLUMNS)
    lines = ["Cost: flops_per_step = XLA cost analysis of one compiled update on one minibatch (a learned "
             "sampler's meta-model included); seconds_per_step = final-run seconds / updates; tuning = the "
             "tuning runs (count, gradient evaluations, seconds); budget_steps = updates given by a wall-time "
             "budget.", ""]
    lines += ["| method | " + " | ".join(cols) + " |", "|---|" + "|".join("---:" for _ in cols) + "|"]
    for mname, r in rows.items():
        lines.append(f"| {mname} | " + " | ".join(fmt(c, r[c]) for c in cols) + " |")
    return lines + [""]


def diagnostics_section(methods: dict) -> list[str]:
    rows = []
    for mname, m in methods.items():
        ess, bar = m.get("ess") or {}, m.get("barrier") or {}
        if not ess and not bar:
            continue
        rows.append({"method": mname, "draws": ess.get("draws_per_chain"), "chains": ess.get("chains"),
                     "mean_ess": ess.get("mean_ess"), "ess_per_second": ess.get("ess_per_second"),
                     "ess_per_1k_grads": ess.get("ess_per_1k_grads"), "fs_mean_ess": ess.get("fs_mean_ess"),
                     "fs_ess_per_second": ess.get("fs_ess_per_second"),
                     "fs_ess_per_1k_grads": ess.get("fs_ess_per_1k_grads"),
                     "cR̂<1.1": ess.get("frac_chainwise_rhat_below_1.1"),
                     "error_barrier": bar.get("error_barrier"), "nll_barrier": bar.get("nll_barrier")})
    if not rows:
        return []
    cols = ["chains", "draws", "mean_ess", "ess_per_second", "ess_per_1k_grads", "fs_mean_ess", "fs_ess_per_second",
            "fs_ess_per_1k_grads", "cR̂<1.1", "error_barrier", "nll_barrier"]
    fs_function = next((m["ess"]["fs_function"] for m in methods.values() if (m.get("ess") or {}).get("fs_function")),
                       None)
    estimator = next((m["ess"].get("estimator") for m in methods.values() if m.get("ess")), None)
    lines = ["Diagnostics: ESS of the kept draws per chain" + (f" ({estimator})" if estimator else "")
             + (f"; fs_* = function-space ESS, of {fs_function}" if fs_function else "")
             + "; cR̂ = chainwise split R̂ (fraction of parameters below 1.1); loss barriers along the linear "
             "path between two samples (test error / RMSE, and NLL; docs/evaluation.md, Loss barrier).", ""]
    lines += ["| method | " + " | ".join(cols) + " |", "|---|" + "|".join("---:" for _ in cols) + "|"]
    se_keys = {"mean_ess": "mean_ess", "ess_per_second": "ess_per_second", "ess_per_1k_grads": "ess_per_1k_grads",
               "fs_mean_ess": "fs_mean_ess", "fs_ess_per_second": "fs_ess_per_second",
               "fs_ess_per_1k_grads": "fs_ess_per_1k_grads"}
    for r in rows:
        se = ((methods[r["method"]].get("se") or {}).get("ess") or {})

        def cell(c):
            s = number(se.get(se_keys[c])) if c in se_keys else None
            return fmt(c, r[c]) + ("" if s is None else f" ± {fmt(c, s)}")

        lines.append(f"| {r['method']} | " + " | ".join(cell(c) for c in cols) + " |")
    return lines + [""]


def _flag_text(flagged: list) -> str:
    """"a, b" for one run's flagged statistics; "a (2/3 seeds), b (1/3 seeds)" for per-seed lists (seed means)."""
    if all(isinstance(f, str) for f in flagged):
        return ", ".join(flagged)
    per_seed = [f if isinstance(f, list) else [] for f in flagged]
    names = sorted({n for f in per_seed for n in f})
    return ", ".join(f"{n} ({sum(n in f for f in per_seed)}/{len(per_seed)} seeds)" for n in names)


def dispersion_section(methods: dict) -> list[str]:
    """Dispersion ratios to the reference (evaluate.dispersion: method ÷ reference per statistic) and the
    statistics flagged outside [0.5, 2], for methods whose entry has a "dispersion" block."""
    rows = {k: m["dispersion"] for k, m in methods.items() if isinstance(m.get("dispersion"), dict)}
    if not rows:
        return []
    ratios = {k: dict(d.get("ratios") or {}) for k, d in rows.items()}
    cols = columns(ratios, DISPERSION_COLUMNS)
    lines = ["Dispersion ratios to the reference (method ÷ reference; evaluate.dispersion); flagged: outside "
             "[0.5, 2].", "", "| method | " + " | ".join(cols) + " | flagged |",
             "|---|" + "|".join("---:" for _ in cols) + "|---|"]
    for mname, d in rows.items():
        flagged = _flag_text(d.get("flagged") or [])
        se_all = ((methods[mname].get("se") or {}).get("dispersion") or {}).get("ratios") or {}
        se = {c: number(se_all.get(c)) for c in cols}
        cells = [fmt(c, ratios[mname].get(c)) + ("" if se[c] is None else f" ± {fmt(c, se[c])}") for c in cols]
        lines.append(f"| {mname} | " + " | ".join(cells) + f" | {flagged or '—'} |")
    return lines + [""]
