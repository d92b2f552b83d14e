"""Report writers for benchmark results (JSON, Markdown tables, BMA-curve plot).

Input is a plain dict::

    {"config": {...},
     "tasks": {task_name: {"held_out": str,
                           "methods": {method: {"acc", "nll", "ece", "pairwise_kld",
                                                "grad_evals", "seconds", "num_samples",
                                                "hyperparameters", "divergent_chains",
                                                "curve": {"num_samples", "acc", "nll"}}}}}}

Missing entries are rendered as "—" / skipped.  Optional curve keys ``acc_sd`` /
``nll_sd`` (same length as ``acc``) are drawn as ±1 sd bands.
"""
from __future__ import annotations

import io
import json
import math
import os
import tempfile
from numbers import Integral, Real
from pathlib import Path

import numpy as np

__all__ = ["write_json", "render_markdown", "write_markdown", "plot_curves", "write_report"]

TABLE_METRICS = ("acc", "nll", "ece", "pairwise_kld", "grad_evals", "seconds")
_BEST = {"acc": max, "nll": min}
_MISSING = "—"


# --------------------------------------------------------------------------- utils
def _atomic_write_bytes(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


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
        return f"{int(round(x))}" if math.isfinite(float(x)) else f"{x}"
    return f"{float(x):.4g}"


def _tasks(results: dict) -> dict:
    return results.get("tasks", {}) or {}


# --------------------------------------------------------------------------- JSON
def write_json(results: dict, path) -> Path:
    """Write ``results`` as indented JSON with sorted keys, atomically. Returns the path."""
    text = json.dumps(results, sort_keys=True, indent=2, default=_json_default)
    return _atomic_write_bytes(path, (text + "\n").encode("utf-8"))


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
        vals = [_number(m.get(metric)) for m in methods.values()]
        vals = [float(v) for v in vals if v is not None and not math.isnan(float(v))]
        if vals:
            best[metric] = pick(vals)
    return best


def _task_section(name: str, task: dict) -> list[str]:
    methods = task.get("methods", {}) or {}
    lines = [f"## {name}", ""]
    if task.get("held_out") is not None:
        lines += [f"Held out: {task['held_out']}", ""]
    if not methods:
        return lines + ["_No methods._", ""]
    best = _best_values(methods)
    header = "| method | " + " | ".join(TABLE_METRICS) + " |"
    sep = "|---|" + "|".join("---:" for _ in TABLE_METRICS) + "|"
    lines += [header, sep]
    for mname in sorted(methods):
        m = methods[mname]
        cells = []
        for metric in TABLE_METRICS:
            cell = _fmt(metric, m.get(metric))
            x = _number(m.get(metric))
            if metric in best and x is not None and float(x) == best[metric]:
                cell = f"**{cell}**"
            cells.append(cell)
        lines.append(f"| {mname} | " + " | ".join(cells) + " |")
    lines.append("")
    counts = {k: m.get("num_samples") for k, m in sorted(methods.items())
              if m.get("num_samples") is not None}
    if counts:
        lines.append("Samples per method: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if len(set(counts.values())) > 1:
            lines[-1] += " (**sample counts differ**)"
        lines.append("")
    divergent = {k: m.get("divergent_chains") for k, m in sorted(methods.items())
                 if (_number(m.get("divergent_chains")) or 0) > 0}
    if divergent:
        lines.append("Methods with divergent chains: "
                     + ", ".join(f"{k} ({v})" for k, v in divergent.items()))
        lines.append("")
    return lines


def render_markdown(results: dict) -> str:
    """Render the results as Markdown: title, config summary, one table per task."""
    title = (results.get("config") or {}).get("title", "Benchmark report")
    lines = [f"# {title}", "", "## Configuration", ""]
    lines += _config_lines(results.get("config") or {})
    lines += ["", f"Best accuracy (max) and best NLL (min) per task in **bold**; "
              f"metrics to 4 significant digits, seconds to 0.1 s.", ""]
    for name in sorted(_tasks(results)):
        lines += _task_section(name, _tasks(results)[name])
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(results: dict, path) -> Path:
    """Write ``render_markdown(results)`` to ``path`` atomically. Returns the path."""
    return _atomic_write_bytes(path, render_markdown(results).encode("utf-8"))


# --------------------------------------------------------------------------- plot
def plot_curves(results: dict, path) -> Path:
    """Plot BMA accuracy and NLL versus number of samples (row per task) to a PNG.

    Uses the Agg canvas directly (no pyplot global state). Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    names = sorted(_tasks(results))
    nrows = max(1, len(names))
    fig = Figure(figsize=(11, 3.6 * nrows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, 2, squeeze=False)
    if not names:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no tasks", ha="center", va="center", transform=ax.transAxes)
    for row, name in enumerate(names):
        methods = _tasks(results)[name].get("methods", {}) or {}
        for col, (key, label) in enumerate((("acc", "BMA accuracy"), ("nll", "BMA NLL"))):
            ax = axes[row, col]
            drawn = 0
            for mname in sorted(methods):
                curve = methods[mname].get("curve") or {}
                ys = curve.get(key)
                if not ys:
                    continue
                ys = np.asarray(ys, dtype=float)
                xs = np.asarray(curve.get("num_samples") or np.arange(1, len(ys) + 1), dtype=float)
                (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=mname)
                sd = curve.get(f"{key}_sd")
                if sd is not None and len(sd) == len(ys):
                    sd = np.asarray(sd, dtype=float)
                    ax.fill_between(xs, ys - sd, ys + sd, alpha=0.2, color=line.get_color())
                drawn += 1
            ax.set_title(f"{name}: {label}")
            ax.set_xlabel("number of samples")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            if drawn:
                ax.legend(fontsize="small")
            else:
                ax.text(0.5, 0.5, "no curves", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return _atomic_write_bytes(path, buf.getvalue())


# --------------------------------------------------------------------------- all
def write_report(results: dict, out_dir) -> dict[str, Path]:
    """Write report.json, report.md and bma_curves.png into ``out_dir``.

    Returns {"json": Path, "markdown": Path, "curves": Path}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json(results, out / "report.json"),
        "markdown": write_markdown(results, out / "report.md"),
        "curves": plot_curves(results, out / "bma_curves.png"),
    }
