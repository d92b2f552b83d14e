"""`python -m evaluate select RUN_DIR --output OUT`: checkpoint selection over the committed steps of a
meta-training run (the L2E authors' rule, docs/meta_training.md, Checkpoint selection: checkpoints every 100 outer iterations, "the best
checkpoint on Fashion-MNIST and CIFAR-10", held-out evaluation tasks).

For every committed step RUN_DIR/checkpoints/<step>/ (a digit-named directory, renamed into place whole by
l2e.checkpoint.save_checkpoint; meta_train keeps the newest 3 unless run with --keep-checkpoints 0) the learned
sampler of that step is evaluated by the evaluation that exists (evaluate.run.evaluate) with a configuration
restricted to one method — the learned method of the checkpoint's sampler kind (KIND_METHODS, from the
learned-sampler registry: the method of the kind's own shipped checkpoint, e.g. mass → l2e_mass; `l2e`, the method of
`--sampler`, for the paper form and for kinds without one, over the kind's lr grid), tuned over its lr grid as in any
evaluation — on the
selection tasks (a preset's, or --task strings).  Every step gets the same configuration and seeds, hence the
same task keys, initial parameters and minibatch / noise keys (common random numbers: the steps differ only in
their meta-parameters).  Each step is scored by the selection metric averaged over the selection tasks (each task's
value its mean over the seeds; with several seeds each step also records each seed's score and their standard
error); the chosen step is the argmin (the earliest step among equal scores; a step with a task whose every sample
diverged scores +inf).

Metrics (METRICS):
  nll — the authors' rule: the test-set BMA NLL (regression tasks: −LPPD).  It rewards cold samplers
        (docs/sampling.md, What this means for meta-training / for evaluation): read T_kin and, with references, the dispersion ratios beside it.
  tv  — total variation of the BMA predictive to a NUTS reference's (`--reference`, as `python -m evaluate
        --reference`; classification tasks only, every selection task needs one).

Writes OUT/selection.json (every step's per-task numbers, the scores, the chosen step, the rule, the evaluation
configuration) and OUT/selection.md.  Bad input (a missing run directory, one without committed checkpoints, an
unknown metric, tv without a reference, an output that holds a selection, …) is one `error:` line, exit 2,
before anything is computed or written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

from tasks.likelihoods import likelihood_of

__all__ = ["KIND_METHODS", "METRICS", "SELECTION_FILES", "Selection", "learned_method_for", "metric_value",
           "prepare_selection", "run_checkpoints", "run_selection", "select_checkpoints", "selection_markdown",
           "write_selection"]  # the command line: evaluate.select_cli


def _kind_methods() -> dict[str, str]:
    from l2e.learned import REGISTRY

    return {kind: (entry.shipped[0].method if entry.shipped and entry.shipped[0].method else "l2e")
            for kind, entry in REGISTRY.items()}


KIND_METHODS = _kind_methods()
"""The learned evaluation method of each checkpoint sampler kind (l2e.learned.REGISTRY): the method of the kind's own
shipped checkpoint (its first `shipped` row), or `l2e` (the method of `--sampler`) where that has none."""

METRICS = {
    "nll": ("the L2E authors' rule (docs/meta_training.md, Checkpoint selection: the best checkpoint on held-out evaluation tasks): the lowest "
            "test-set BMA NLL (regression tasks: −LPPD) of the step's learned sampler, averaged over the selection "
            "tasks (each task: its mean over the seeds). NLL rewards cold samplers (docs/sampling.md, What this means for meta-training / for evaluation): read T_kin "
            "and the dispersion ratios beside it"),
    "tv": ("the lowest total variation between the step's BMA predictive and the NUTS reference's on the test "
           "set, averaged over the selection tasks (each task: its mean over the seeds); a sampler at the "
           "posterior, not a colder one, is what it rewards (up to the K-sample floor)"),
}
"""Selection metrics: name → the rule as stated in selection.json / selection.md."""

SELECTION_FILES = ("selection.json", "selection.md")
RUN_MARKERS = ("config.json", "log.jsonl", "checkpoints")
STEP_ITEMS = ("meta_params", "meta")
"""What evaluation reads of a step (es_state is meta-training's resume state only)."""


def _error(message: str):
    from base.io import ConfigError

    return ConfigError(message)


def run_checkpoints(run_dir) -> tuple[Path, list[int]]:
    """(checkpoint root, committed steps ascending) of a meta-training run directory (or its checkpoints/
    directory): its digit-named step directories (l2e.checkpoint.committed_steps' steps; es_state, meta-training's
    resume state, is not needed).  ConfigError for a missing directory or one without steps; CheckpointError for a
    step directory that lacks meta_params or meta (damage: never skipped silently)."""
    from l2e.checkpoint import check_complete

    run = Path(run_dir)
    if not run.exists():
        raise _error(f"run directory {run} not found")
    if not run.is_dir():
        raise _error(f"run directory {run} is not a directory")
    root = run / "checkpoints" if (run / "checkpoints").is_dir() else run
    steps = sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())
    for step in steps:  # committed by rename (l2e.checkpoint.save_checkpoint): a missing item is damage
        check_complete(root / str(step), STEP_ITEMS)
    if not steps:
        hint = " (it is one checkpoint step: pass the run directory holding checkpoints/)" \
            if (run / "meta_params").is_dir() else "; is it a meta-training run directory?"
        raise _error(f"{run} holds no committed checkpoint (no {root}/<step>/ directory){hint}")
    return root, steps


def learned_method_for(kind: str, method: str | None = None) -> tuple[str, str | None]:
    """(evaluation method, the shipped name it runs or None for `l2e`, the --sampler method) for checkpoints of
    sampler kind `kind`: KIND_METHODS[kind], or `method` when it is a learned method that can run them (`l2e` runs a
    checkpoint of any kind; a shipped sampler's method only checkpoints of its kind, l2e.learned's shipped rows)."""
    from evaluate.methods import METHODS, get_method
    from l2e.learned import shipped

    name = KIND_METHODS[kind] if method is None else method
    m = get_method(name)
    if m.needs_sampler is True:
        return name, None
    if not m.needs_sampler:
        learned = ", ".join(n for n in METHODS if get_method(n).needs_sampler)
        raise _error(f"--method {name} is not a learned-sampler method (learned: {learned})")
    shipped_kind = shipped()[m.needs_sampler][0].name
    if shipped_kind != kind:
        raise _error(f"--method {name} runs checkpoints of kind {shipped_kind!r}; the run's are of kind {kind!r} "
                     f"(its method: {KIND_METHODS[kind]})")
    return name, m.needs_sampler


def _load_steps(root: Path, steps: list[int]) -> tuple[str, list[dict]]:
    """(sampler kind, [load_l2e-style sampler dict per step]); CheckpointError for a damaged step or mixed kinds."""
    import l2e
    from l2e.checkpoint import CheckpointError, sampler_kind

    kinds, loaded = {}, []
    for step in steps:
        step_dir = root / str(step)
        meta_params, sampler, meta = l2e.load_meta_params(step_dir)
        kinds.setdefault(sampler_kind(meta, str(step_dir)), step)
        loaded.append({"meta_params": meta_params, "sampler": sampler, "path": str(step_dir), "meta": meta})
    if len(kinds) > 1:
        raise CheckpointError(f"{root}: checkpoints of different sampler kinds "
                              f"({', '.join(f'{k} at step {s}' for k, s in kinds.items())})")
    return next(iter(kinds)), loaded


def metric_value(entry: dict, kind: str, metric: str) -> float | None:
    """The selection metric of one method entry (None when the entry has none, e.g. every sample diverged)."""
    value = entry.get("total_variation") if metric == "tv" else likelihood_of(kind).score_from_metrics(entry)
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _learning_rate(hp: dict):
    if "per_seed" in hp:
        return [r.get("learning_rate") for r in hp["per_seed"].values()]
    return hp.get("learning_rate")


def _task_row(entry: dict, kind: str, metric: str) -> dict:
    """What selection.json keeps of one step's method entry on one task."""
    keys = ("nll", "acc", "ece", "lppd", "rmse", "calibration_error", "total_variation", "agreement", "t_kin",
            "temperature", "num_samples", "divergent_chains", "scale_divergent_chains", "seconds")
    row = {"metric": metric_value(entry, kind, metric)}
    row.update({k: entry[k] for k in keys if k in entry})
    se = entry.get("se") or {}
    if se:
        row["se"] = {k: se[k] for k in keys if k in se}
    disp = entry.get("dispersion")
    row["dispersion"] = None if not disp else disp.get("ratios")
    hp = entry.get("hyperparameters") or {}
    row["learning_rate"] = _learning_rate(hp)
    if "grid" in hp:
        row["tuning_scores"] = hp["grid"]
    elif "per_seed" in hp:
        row["tuning_scores"] = {s: r.get("grid") for s, r in hp["per_seed"].items()}
    return row


def _seed_scores(entries: dict, task_kinds: dict, metric: str, seeds) -> dict:
    """{seed: the mean over tasks of that seed's metric (None if a task has none)} from seed-aggregated entries
    (evaluate.seeds: entry["seeds"][str(seed)])."""
    out = {}
    for seed in seeds:
        values = [metric_value(entries[n]["seeds"][str(seed)], task_kinds[n], metric) for n in entries]
        out[str(seed)] = None if any(v is None for v in values) else sum(values) / len(values)
    return out


@dataclasses.dataclass
class Selection:
    """The checked inputs of a selection (`prepare_selection`): the run's checkpoint root and steps, their loaded
    samplers (load_l2e-style dicts) and kind, the learned method (and the shipped name it runs, None for `l2e`),
    the evaluation config restricted to it, the task names and kinds, the loaded references."""

    run_dir: str
    root: Path
    steps: list
    samplers: list
    kind: str
    method: str
    shipped: str | None
    cfg: object
    metric: str
    references: dict | None
    names: list
    task_kinds: dict
    refs: dict


def prepare_selection(cfg, run_dir, metric: str = "nll", references: dict | None = None,
                      method: str | None = None) -> Selection:
    """Check every input of a selection before anything runs: the metric (and tv's references), the run and its
    committed steps (each loaded), the learned method of their kind (or `method`), the config (its methods
    replaced by that method), the tasks (built: dataset errors surface here) and the references (loaded and
    checked against the tasks; tv: a classification reference for every task)."""
    from evaluate.reference import load_references
    from tasks import TaskCache, build

    if metric not in METRICS:
        raise _error(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
    if metric == "tv" and not references:
        raise _error("--metric tv needs --reference (a NUTS reference of every selection task, e.g. "
                     "--reference results/references)")
    root, steps = run_checkpoints(run_dir)
    kind, loaded = _load_steps(root, steps)
    name, shipped = learned_method_for(kind, method)
    cfg = dataclasses.replace(cfg, methods=(name,), optional_methods=())
    if name == "l2e" and kind != "l2e":  # the --sampler method on another kind: that kind's lr grid
        from l2e.learned import REGISTRY

        cfg = dataclasses.replace(cfg, settings=dataclasses.replace(
            cfg.settings, l2e=dataclasses.replace(cfg.settings.l2e, lrs=REGISTRY[kind].lrs)))
    cfg.check_budget()
    names = cfg.task_names()
    tasks = [build(spec, TaskCache()) for spec in cfg.tasks]
    refs = load_references(references or None, names, tasks)
    if metric == "tv":
        missing = [n for n in names if refs.get(n, {}).get("probs") is None]
        if missing:
            raise _error(f"--metric tv needs a classification reference (predictive probabilities) for every "
                         f"selection task; none for {', '.join(missing)}")
    return Selection(str(run_dir), root, steps, loaded, kind, name, shipped, cfg, metric, references or None, names,
                     {n: t.kind for n, t in zip(names, tasks)}, refs)


def run_selection(prep: Selection, progress=None, cache=None) -> dict:
    """Evaluate every step of a prepared selection (evaluate.run.evaluate, one method, the same config and seeds
    for every step) and choose by its metric; returns the selection record (`write_selection`).
    progress(line): called once per step; cache: a CompileCache shared by the steps (default: a new one; the
    meta-parameters are traced arguments, so the steps share compiled chunks)."""
    import numpy as np

    from evaluate.methods import CompileCache
    from evaluate.run import evaluate

    cache = CompileCache() if cache is None else cache
    metric, names, method = prep.metric, prep.names, prep.method
    rows, t0 = [], time.perf_counter()
    for step, sampler in zip(prep.steps, prep.samplers):
        t_step = time.perf_counter()
        kwargs = {"shipped": {prep.shipped: sampler}} if prep.shipped is not None else {"sampler": sampler}
        results = evaluate(prep.cfg, None, progress=False, references=prep.references, cache=cache, **kwargs)
        entries = {n: results["tasks"][n]["methods"][method] for n in names}
        per_task = {n: _task_row(entries[n], prep.task_kinds[n], metric) for n in names}
        values = [per_task[n]["metric"] for n in names]
        score = float(np.mean(values)) if all(v is not None for v in values) else math.inf
        seconds = time.perf_counter() - t_step
        row = {"step": step, "checkpoint": sampler["path"], "score": score if math.isfinite(score) else None}
        if len(prep.cfg.seed_list) > 1:  # the score of each seed (mean over tasks) and their standard error
            row["seed_scores"] = _seed_scores(entries, prep.task_kinds, metric, prep.cfg.seed_list)
            finite = [v for v in row["seed_scores"].values() if v is not None]
            row["score_se"] = float(np.std(finite, ddof=1) / math.sqrt(len(finite))) \
                if len(finite) == len(prep.cfg.seed_list) else None
        rows.append({**row, "tasks": per_task, "seconds": seconds})
        if progress is not None:
            shown = f"{score:.4f}" if math.isfinite(score) else "inf (a task without a finite value)"
            progress(f"step {step}: {metric} {shown} ({seconds:.0f} s)")
    scores = [math.inf if r["score"] is None else r["score"] for r in rows]
    best = int(np.argmin(scores)) if any(math.isfinite(s) for s in scores) else None
    chosen = None if best is None else prep.steps[best]
    return {
        "run_dir": prep.run_dir, "checkpoints": str(prep.root), "sampler_kind": prep.kind, "method": method,
        "metric": metric, "rule": METRICS[metric] + "; argmin over the committed steps, the earliest among equal "
        "scores; a step with a task without a finite value scores +inf; every step evaluated with the same "
        "configuration, seeds and keys",
        "tasks": names, "held_out": list(prep.cfg.held_out), "seeds": list(prep.cfg.seed_list),
        "references": {n: r["path"] for n, r in prep.refs.items()} or None,
        "steps": rows, "scores": {str(r["step"]): r["score"] for r in rows},
        "chosen_step": chosen, "final_step": prep.steps[-1],
        "chosen_is_final": None if chosen is None else chosen == prep.steps[-1],
        "wall_seconds": time.perf_counter() - t0, "config": prep.cfg.to_dict(),
    }


def select_checkpoints(cfg, run_dir, metric: str = "nll", references: dict | None = None, method: str | None = None,
                       progress=None, cache=None) -> dict:
    """Evaluate every committed step of `run_dir` with `cfg` (an EvalConfig; its methods are replaced by the
    learned method of the run's sampler kind, or `method`) and select by `metric` (METRICS).  references: {task
    name or None: path} as `evaluate(references=…)` (needed by "tv").  Every input is checked before any step
    runs (`prepare_selection`).  Returns the selection record (`run_selection`; written by `write_selection`)."""
    return run_selection(prepare_selection(cfg, run_dir, metric, references, method), progress, cache)


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return "/".join(_fmt(x, digits) for x in v)
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3) else f"{v:.{digits}f}"
    return str(v)


def _g(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return "/".join(map(_g, v))
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _pm(v, se) -> str:
    return _fmt(v) if se is None or v is None else f"{_fmt(v)} ± {se:.4f}"


def _metric_key(sel: dict, task: str) -> str:
    """The entry field of the selection metric on `task` (for its standard error)."""
    if sel["metric"] == "tv":
        return "total_variation"
    row = sel["steps"][0]["tasks"][task]
    return "nll" if "nll" in row else "lppd"


def _disp(d) -> str:
    if not d:
        return "—"
    keys = ("weight_norm", "pairwise_distance_within_chain", "predictive_variance")
    return " / ".join(_fmt(d.get(k), 2) for k in keys)


def selection_markdown(sel: dict) -> str:
    """selection.md: the rule, the per-step table (score, per-task metric, T_kin, dispersion ratios, divergent
    chains, chosen lr) and the chosen step."""
    metric = sel["metric"]
    lines = [f"# Checkpoint selection: {sel['run_dir']}", "",
             f"Sampler kind `{sel['sampler_kind']}`, evaluated as method `{sel['method']}`; metric **{metric}**; "
             f"seeds {', '.join(map(str, sel['seeds']))}; {len(sel['steps'])} committed steps.", "",
             f"Rule: {sel['rule']}.", ""]
    lines += ["Selection tasks:", ""] + [f"- `{n}` — held out: {h or '(not stated)'}"
                                         for n, h in zip(sel["tasks"], sel["held_out"])]
    if sel.get("references"):
        lines += ["", "References: " + ", ".join(f"`{n}`: {p}" for n, p in sel["references"].items())]
    several = len(sel["seeds"]) > 1
    lines += ["", f"Scores (per task: {metric}; score: their mean" + ("; ± the standard error over the seeds" if
                                                                       several else "") + "):", ""]
    header = ["step", f"score ({metric})"] + [f"`{n}`" for n in sel["tasks"]]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sel["steps"]:
        mark = " **(chosen)**" if r["step"] == sel["chosen_step"] else ""
        cells = [f"{r['step']}{mark}", _pm(r["score"], r.get("score_se"))]
        cells += [_pm(r["tasks"][n]["metric"], (r["tasks"][n].get("se") or {}).get(_metric_key(sel, n)))
                  for n in sel["tasks"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per step and task:", "",
              "| step | task | NLL | TV | T_kin | dispersion: weight norm / pairwise / pred. var "
              "| divergent chains | lr |",
              "|---|---|---|---|---|---|---|---|"]
    for r in sel["steps"]:
        for n in sel["tasks"]:
            t = r["tasks"][n]
            nll = t.get("nll") if "nll" in t else (None if t.get("lppd") is None else -t["lppd"])
            lines.append(f"| {r['step']} | `{n}` | {_fmt(nll)} | {_fmt(t.get('total_variation'))} | "
                         f"{_fmt(t.get('t_kin'), 3)} | {_disp(t.get('dispersion'))} | "
                         f"{_g(t.get('divergent_chains'))} | {_g(t.get('learning_rate'))} |")
    lines.append("")
    if sel["chosen_step"] is None:
        lines.append("No step has a finite score: nothing chosen.")
    else:
        same = "the final iteration" if sel["chosen_is_final"] else f"not the final iteration ({sel['final_step']})"
        lines.append(f"**Chosen step: {sel['chosen_step']}** ({same}).")
    lines += ["", "NLL: test-set BMA NLL (regression: −LPPD). Dispersion: method ÷ reference (only with a reference "
              "that stores them; pairwise: within-chain). T_kin: kinetic temperature over the sampling window (1 for "
              "a sampler at T = 1). lr: the tuned learning rate (per seed with several seeds).", "",
              "The selection reads the test split, as the authors' rule does: numbers of the chosen step on the same "
              "tasks and seeds are biased in its favour; compare it on other seeds or tasks.", "",
              f"Wall time: {sel['wall_seconds']:.0f} s.", ""]
    return "\n".join(lines)


def write_selection(sel: dict, out: Path) -> dict:
    """Write selection.json and selection.md into `out` (atomically, file by file); returns their paths."""
    from evaluate.report import _json_default
    from base.io import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "selection.json", "markdown": out / "selection.md"}
    atomic_write_text(paths["json"], json.dumps(sel, indent=1, default=_json_default))
    atomic_write_text(paths["markdown"], selection_markdown(sel))
    return paths
