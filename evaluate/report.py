"""Report writers for evaluation results: JSON, Markdown (tables from evaluate.tables), the plain-text table; PNGs
via evaluate.plots.

Input is the plain dict of `evaluate.run.evaluate`::

    {"config": {...},
     "tasks": {task_name: {"kind": "classification" | "regression", "held_out": str,
                           "methods": {method: entry}, "reference": {...}?, "band": {...}?}}}

entry: classification "acc", "nll", "ece", "pairwise_kld", ["agreement", "total_variation"];
regression "lppd", "nll", "rmse", "calibration_error"; both "grad_evals", "gradient", "epochs", "seconds",
"num_samples", "divergent_chains", "hyperparameters", "curve" ({"num_samples", metric: [...]}), and
optionally "ess" ({"mean_ess", "ess_per_second", "ess_per_1k_grads", their function-space "fs_" twins,
"frac_chainwise_rhat_below_1.1", …}),
"barrier" ({"lambdas", "error", "nll", "error_barrier", "nll_barrier", "pair"}), "temperature" / "t_kin"
(T and T_kin columns; T_kin the mean over the non-divergent chains, "t_kin_left_out" the chains it leaves out), "flops_per_step", "seconds_per_step", "tuning" ({"runs", "grad_evals", "seconds"}) and
"time_budget" ({"num_steps", …}) (the Cost section).  Over several seeds (evaluate.seeds) numbers are means,
"se" holds their standard errors ("mean ± se" cells, bold only by `beats`) and "n_seeds" is set.  The method
"hmc" is the reference posterior: shown in the tables, never bolded as best.  band (1-D regression):
{"x_train", "y_train", "x", "y", "methods": {method: {"mean", "lower", "upper"}}}.

A metric column appears when at least one method has it; missing entries are rendered as "—".  Curve keys
``<metric>_sd`` are drawn as ±1 sd bands.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from evaluate import plots
from evaluate.tables import (
    BUDGET_COLUMNS, REFERENCE_METHOD, TEMPERATURE_COLUMNS, beats, bold_cells, columns, cost_section,
    diagnostics_section, dispersion_section, fmt, metric_table, multi_seed, number,
)
from base.io import atomic_write_bytes
from cli import publish_dir
from tasks.likelihoods import likelihood_of

__all__ = ["REFERENCE_METHOD", "REPORT_ENTRIES", "beats", "bold_cells", "format_table",
           "probe_writable", "publish_report", "render_markdown", "write_json", "write_markdown", "write_report"]

REPORT_ENTRIES = ("report.json", "report.md", "bma_curves.png", "ess.png", "barriers.png", "regression_band.png",
                  "samples")
"""What one evaluation writes into its output directory: the report set, replaced as a whole."""


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


def _likelihood(task: dict):
    """The likelihood of a report's task entry (by its "kind" label; classification when absent)."""
    return likelihood_of(task.get("kind") or "classification")


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


def _task_section(name: str, task: dict) -> list[str]:
    methods = task.get("methods", {}) or {}
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
                      f"(function-space split R̂ max {fmt('x', rhat)}, divergent transitions "
                      f"{fmt('x', meta.get('num_divergent'))}).", ""]
    cols = columns(methods, _likelihood(task).table_metrics + TEMPERATURE_COLUMNS + BUDGET_COLUMNS)
    lines += metric_table(methods, cols, bold_cells(methods))
    counts = {k: m.get("num_samples") for k, m in methods.items() if m.get("num_samples") is not None}
    if counts:
        lines.append("Samples per method: " + ", ".join(f"{k} {v:g}" if number(v) is not None else f"{k} {v}"
                                                      for k, v in counts.items()))
        if len(set(counts.values())) > 1:
            lines[-1] += " (**sample counts differ**)"
        lines.append("")
    divergent = {k: m.get("divergent_chains") for k, m in methods.items()
                 if (number(m.get("divergent_chains")) or 0) > 0}
    if divergent:
        lines.append("Methods with divergent chains: "
                     + ", ".join(f"{k} ({v})" for k, v in divergent.items()))
        by_scale = {k: methods[k].get("scale_divergent_chains") for k in divergent
                    if (number(methods[k].get("scale_divergent_chains")) or 0) > 0}
        if by_scale:
            lines[-1] += ("; finite but judged divergent by prediction scale (left out of the BMA like non-finite "
                          "ones): " + ", ".join(f"{k} ({v})" for k, v in by_scale.items()))
        lines.append("")
    return lines + diagnostics_section(methods) + dispersion_section(methods) + cost_section(methods)


def _preamble(results: dict) -> list[str]:
    """The sentences above the tables: bolding, formats; seeds, temperatures and skipped methods when the results
    have them."""
    lines = ["", "Best value per metric and task in **bold** (accuracy, LPPD, agreement: max; NLL, RMSE, total "
             "variation, calibration error: min; the `hmc` reference row is never bolded); metrics to 4 "
             "significant digits, seconds to 0.1 s. grad_evals counts the method's gradient evaluations of the "
             "kind in `gradient` (minibatch or full batch); epochs = per-example gradients / N.", ""]
    tasks = list(_tasks(results).values())
    if any(multi_seed(t.get("methods") or {}) for t in tasks):
        seeds = (results.get("config") or {}).get("seeds")
        lines += [f"Seeds {seeds}: every number is the mean over seeds ± its standard error (sd/√n); a best value "
                  "is bold only when it beats the next best by more than 2 combined standard errors "
                  "(|Δ| > 2·sqrt(se₁² + se₂²)). Every seed's entry is in report.json.", ""]
    if any(m.get("temperature") is not None for t in tasks for m in (t.get("methods") or {}).values()):
        lines += ["T: the temperature each method ran at (tuned for sghmc_tempered; the checkpoint's for L2E); "
                  "T_kin: its measured kinetic temperature ⟨Σ r·∇_rK⟩ / d over the sampling window, mean over "
                  "chains (1 for a correct sampler at T = 1; docs/sampling.md, Measuring whether a step samples).", ""]
    skipped = (results.get("config") or {}).get("skipped_methods") or {}
    if skipped:
        lines += ["Skipped methods: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()), ""]
    return lines


def _summary(results: dict) -> list[str]:
    """One line under the title saying what ran: methods, tasks, budget, samples, seeds."""
    config = results.get("config") or {}
    tasks = sorted(_tasks(results))
    methods = list(config.get("methods") or dict.fromkeys(
        m for t in _tasks(results).values() for m in (t.get("methods") or {})))

    def n(count, word):
        return f"{count} {word}{'' if count == 1 else 's'}"

    parts = [(f"{n(len(methods), 'method')} ({', '.join(map(str, methods))})" if methods else "no methods")
             + f" on {n(len(tasks), 'task')}" + (f" ({', '.join(tasks)})" if tasks else "")]
    if config.get("num_steps") is not None:
        parts.append(f"budget {config['num_steps']} ({config.get('budget') or 'steps'}) per run")
    if config.get("num_samples") is not None:
        parts.append(f"{config['num_samples']} samples per method")
    seeds = config.get("seeds") if config.get("seeds") is not None else config.get("seed")
    if seeds is not None:
        parts.append(f"seeds {seeds}" if isinstance(seeds, (list, tuple)) else f"seed {seeds}")
    return ["What ran: " + "; ".join(parts) + ". The results come first, one table per task, then the plots; "
            "the full configuration is the last section ([Configuration](#configuration))."]


def render_markdown(results: dict, plots: tuple[str, ...] | list[str] = ()) -> str:
    """Render the results as Markdown, findings first: the title and a line saying what ran, how to read the
    tables, one table per task, the plots (``plots``: file names beside report.md), and the full configuration
    last under "## Configuration"."""
    title = (results.get("config") or {}).get("title", "Benchmark report")
    lines = [f"# {title}", ""] + _summary(results)
    lines += _preamble(results)
    for name in sorted(_tasks(results)):
        lines += _task_section(name, _tasks(results)[name])
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += ["## Configuration", ""] + _config_lines(results.get("config") or {})
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(results: dict, path, plots: tuple[str, ...] | list[str] = ()) -> Path:
    """Write ``render_markdown(results, plots)`` to ``path`` atomically. Returns the path."""
    return atomic_write_bytes(path, render_markdown(results, plots).encode("utf-8"))


# --------------------------------------------------------------------------- all
def write_report(results: dict, out_dir) -> dict[str, Path]:
    """Write report.json, report.md and bma_curves.png into ``out_dir``, plus ess.png, barriers.png and
    regression_band.png when the results hold ESS, loss barriers or a 1-D regression band.

    Returns {"json", "markdown", "curves"[, "ess", "barriers", "band"]: Path}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"curves": ("bma_curves.png", plots.plot_curves)}
    if plots.has_entry(results, "ess"):
        figures["ess"] = ("ess.png", plots.plot_ess)
    if plots.has_entry(results, "barrier"):
        figures["barriers"] = ("barriers.png", plots.plot_barriers)
    if plots.band_tasks(results):
        figures["band"] = ("regression_band.png", plots.plot_band)
    paths = {
        "json": write_json(results, out / "report.json"),
        "markdown": write_markdown(results, out / "report.md", [name for name, _ in figures.values()]),
    }
    for key, (name, plot) in figures.items():
        paths[key] = plot(results, out / name)
    return paths


def publish_report(stage, out_dir) -> Path:
    """Swap the fully written report set in `stage` (cli.staging_dir) in as `out_dir`, atomically as a set
    (cli.publish_dir): a reader, a SIGINT or a full disk never leaves report.json of one run beside plots
    of another. Entries of an old `out_dir` that are not part of a report set (REPORT_ENTRIES) are kept; the set
    carries the report marker (cli.outputs) that makes `out_dir` ours."""
    return publish_dir(stage, out_dir, REPORT_ENTRIES, kind="report")


def format_table(results: dict) -> str:
    """A compact plain-text table per task kind: task, method, acc/lppd, nll, ece/rmse, kld/calibration,
    gradient evaluations (m = minibatch, f = full batch), epochs, samples, divergent chains, seconds, mean ESS."""
    def f(v, spec):
        return "—" if v is None else format(v, spec)

    lines = []
    for tname, task in results["tasks"].items():
        (c1, k1), (c3, k3), (c4, k4) = _likelihood(task).summary_columns
        header = (f"{'task':<34} {'method':<14} {c1:>7} {'nll':>7} {c3:>7} {c4:>7} {'grads':>8} {'epochs':>7} "
                  f"{'K':>4} {'div':>3} {'sec':>7} {'ess':>6} {'T_kin':>6}")
        lines += [header, "-" * len(header)]
        for mname, m in task["methods"].items():
            grads = "—" if m.get("grad_evals") is None else f"{round(m['grad_evals'])}{str(m.get('gradient', ' '))[0]}"
            ess = (m.get("ess") or {}).get("mean_ess")
            lines.append(
                f"{tname[:34]:<34} {mname:<14} {f(m.get(k1), '.4f'):>7} {f(m.get('nll'), '.4f'):>7} "
                f"{f(m.get(k3), '.4f'):>7} {f(m.get(k4), '.3f'):>7} {grads:>8} {f(m.get('epochs'), '.1f'):>7} "
                f"{f(m.get('num_samples'), 'g'):>4} {f(m.get('divergent_chains'), 'g'):>3} "
                f"{f(m.get('seconds'), '.2f'):>7} {f(ess, '.1f'):>6} {f(m.get('t_kin'), '.3f'):>6}")
        lines.append("")
    return "\n".join(lines).rstrip()
