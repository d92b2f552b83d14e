"""PNG plots of evaluation results (the results dict of `evaluate.run.evaluate`, schema in evaluate.report):
BMA curves, ESS bars, loss barriers, the 1-D regression band.  Drawn on the Agg canvas (no pyplot state) and
written atomically."""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from base.io import atomic_write_bytes
from tasks.likelihoods import likelihood_of

__all__ = ["band_tasks", "has_entry", "plot_band", "plot_barriers", "plot_curves", "plot_ess"]



def _tasks(results: dict) -> dict:
    return results.get("tasks", {}) or {}


def _likelihood(task: dict):
    """The likelihood of a report's task entry (by its "kind" label; classification when absent)."""
    return likelihood_of(task.get("kind") or "classification")


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _label(v) -> str:
    return "—" if v is None else f"{float(v):.4g}"


def _figure(nrows: int, ncols: int, width: float, height: float):
    """A (Figure, axes (nrows, ncols)) on the Agg canvas (no pyplot global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * nrows))
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig, path) -> Path:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return atomic_write_bytes(path, buf.getvalue())


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def plot_curves(results: dict, path) -> Path:
    """BMA metric versus number of samples, one row per task (accuracy and NLL; regression: LPPD and RMSE)."""
    from matplotlib.ticker import MaxNLocator

    names = sorted(_tasks(results))
    fig, axes = _figure(max(1, len(names)), 2, 11, 3.6)
    if not names:
        for ax in axes[0]:
            _empty(ax, "no tasks")
    for row, name in enumerate(names):
        task = _tasks(results)[name]
        methods = task.get("methods", {}) or {}
        for col, (key, label) in enumerate(_likelihood(task).curve_plot):
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
                _empty(ax, "no curves")
    return _save(fig, path)


def has_entry(results: dict, key: str) -> bool:
    return any(m.get(key) for t in _tasks(results).values() for m in (t.get("methods") or {}).values())


def plot_ess(results: dict, path) -> Path:
    """Bar charts per task: ESS per second of sampler wall time and ESS per 1000 gradient evaluations, in weight
    space (mean over coordinates) and function space (mean over test points)."""
    names = sorted(_tasks(results))
    fig, axes = _figure(max(1, len(names)), 4, 20, 3.4)
    panels = (("ess_per_second", "weight ESS / s"), ("ess_per_1k_grads", "weight ESS / 1000 grads"),
              ("fs_ess_per_second", "function ESS / s"), ("fs_ess_per_1k_grads", "function ESS / 1000 grads"))
    for row, name in enumerate(names):
        methods = {k: m["ess"] for k, m in (_tasks(results)[name].get("methods") or {}).items() if m.get("ess")}
        for col, (key, label) in enumerate(panels):
            ax = axes[row, col]
            vals = [(k, e.get(key)) for k, e in methods.items()]
            vals = [(k, float(v)) for k, v in vals if _is_real(v) and math.isfinite(float(v))]
            if not vals:
                _empty(ax, "no ESS")
            else:
                ax.bar([k for k, _ in vals], [v for _, v in vals], color="tab:blue", alpha=0.8)
                ax.tick_params(axis="x", labelrotation=30)
                ax.grid(True, axis="y", alpha=0.3)
            ax.set_title(f"{name}: {label}", fontsize="small")
    return _save(fig, path)


def plot_barriers(results: dict, path) -> Path:
    """Loss along the linear path between two samples, per task: test error (regression: RMSE) and NLL."""
    names = sorted(_tasks(results))
    fig, axes = _figure(max(1, len(names)), 2, 11, 3.4)
    for row, name in enumerate(names):
        task = _tasks(results)[name]
        err_label = _likelihood(task).error_label
        for col, (key, label) in enumerate((("error", err_label), ("nll", "NLL"))):
            ax = axes[row, col]
            drawn = 0
            for mname, m in (task.get("methods") or {}).items():
                bar = m.get("barrier") or {}
                if not bar.get(key):
                    continue
                ax.plot(bar["lambdas"], bar[key], marker=".", label=f"{mname} (B={_label(bar.get(f'{key}_barrier'))})")
                drawn += 1
            ax.set_title(f"{name}: {label} along θ(λ) = (1−λ)θ_a + λθ_b")
            ax.set_xlabel("λ")
            ax.grid(True, alpha=0.3)
            if drawn:
                ax.legend(fontsize="x-small")
            else:
                _empty(ax, "no barriers")
    return _save(fig, path)


def band_tasks(results: dict) -> list[str]:
    return sorted(n for n, t in _tasks(results).items() if (t.get("band") or {}).get("methods"))


def plot_band(results: dict, path) -> Path:
    """1-D regression: predictive mean and 95 % band per method (one panel each), training data as dots."""
    names = band_tasks(results)
    panels = [(n, m) for n in names for m in _tasks(results)[n]["band"]["methods"]]
    ncols = min(3, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, axes = _figure(nrows, ncols, 4.2 * ncols, 3.4)
    for ax in axes.ravel()[len(panels):]:
        ax.set_axis_off()
    for ax, (name, mname) in zip(axes.ravel(), panels):
        band = _tasks(results)[name]["band"]
        b = band["methods"][mname]
        x = np.asarray(band["x"], dtype=float)
        ax.fill_between(x, np.asarray(b["lower"], float), np.asarray(b["upper"], float), alpha=0.3,
                        label="95 % predictive")
        ax.plot(x, np.asarray(b["mean"], float), lw=1.5, label="mean")
        if band.get("y") is not None:
            ax.plot(x, np.asarray(band["y"], float), ".", ms=2, color="gray", alpha=0.5, label="test")
        ax.plot(np.asarray(band["x_train"], float), np.asarray(band["y_train"], float), "k.", ms=3, label="train")
        ax.set_title(f"{mname} ({name})", fontsize="small")
        ax.grid(True, alpha=0.3)
    if panels:
        axes.ravel()[0].legend(fontsize="x-small")
    else:
        _empty(axes[0, 0], "no 1-D regression task")
    return _save(fig, path)
