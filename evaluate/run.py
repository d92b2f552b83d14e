"""`evaluate(cfg, out_dir)`: tune, run and score every method on every held-out task, then write the report.

Protocol per task (index t) and method:
  * keys: task key = fold_in(PRNGKey(seed), t); tuning runs use fold_in(task key, 0), the final run
    fold_in(task key, 1), each split into (init key, chain key).  All methods share these keys (common
    random numbers: same initial parameters for the chains and the first ensemble member).
  * tuning (cfg.tune): for every learning rate of the method's grid, one run of the full budget, scored
    by the BMA NLL of its finite samples on the first cfg.tune_examples `inner_valid` examples; a run
    with a divergent chain scores +inf.  The best finite score wins (if none is finite: the smallest lr).
    Without tuning the first grid value is used.
  * final run with the chosen lr, scored on the full `test` split: BMA ACC / NLL / ECE, pairwise KLD,
    and the BMA curve over the first k = 1..K samples.  Divergent samples are excluded and counted.
  * divergence: a chain (ensemble member) with a non-finite sample or prediction is divergent; its samples
    are excluded from the BMA and every metric, and `divergent_chains` counts them per method (the report
    says so).
  * reference (optional, per task): predictive probabilities of a reference posterior (e.g. HMC), one row per
    test example (evaluate.reference); every method's BMA gets `agreement` and `total_variation` against it.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from tqdm.auto import tqdm

import l2e
from evaluate.config import EvalConfig
from evaluate.methods import MethodResult, run_method, split_data
from evaluate.metrics import (agreement, bma_curve, bma_log_probs, bma_probs, classification_metrics,
                              nll_from_log_probs, total_variation)
from evaluate.reference import ReferenceDataError, check_alignment, load_reference_probs
from evaluate.report import write_report
from tasks.task import build_task

__all__ = ["DIVERGENCE_NOTE", "evaluate", "format_table", "load_l2e", "load_references", "run_task_method"]

DIVERGENCE_NOTE = ("a chain (ensemble member) with a non-finite sample or prediction is divergent: it is "
                   "counted per method (divergent_chains) and its samples are excluded from the BMA and all metrics")


def load_l2e(sampler_path=None) -> dict:
    """{"meta_params", "sampler" (L2EConfig), "path", "meta"} from a checkpoint (None: the shipped one)."""
    meta_params, sampler, meta = l2e.load_meta_params(sampler_path)
    path = str(sampler_path) if sampler_path is not None else "shipped"
    return {"meta_params": meta_params, "sampler": sampler, "path": path, "meta": meta}


def _score(result: MethodResult, labels) -> float:
    """Tuning score: BMA NLL of the finite samples; +inf if any chain diverged or nothing is left."""
    if result.divergent_chains or len(result.samples_log_probs) == 0:
        return math.inf
    value = nll_from_log_probs(bma_log_probs(result.samples_log_probs), labels)
    return value if math.isfinite(value) else math.inf


def _keys(task_key, phase: int):
    return tuple(jax.random.split(jax.random.fold_in(task_key, phase)))


def _hp_label(point: dict) -> str:
    """E.g. "lr=0.03" or "lr=0.03,friction=10" (keys of the report's tuning grid)."""
    names = {"learning_rate": "lr"}
    return ",".join(f"{names.get(k, k)}={v:g}" for k, v in point.items())


def run_task_method(task, task_key, method: str, cfg: EvalConfig, sampler: dict | None, bar=None,
                    reference: np.ndarray | None = None) -> dict:
    """Tune (optionally) and run one method on one task; return its report entry.

    reference: (n_test, C) reference predictive probabilities; adds "agreement" and "total_variation"."""
    extra = {} if method != "l2e" else {"meta_params": sampler["meta_params"], "sampler": sampler["sampler"]}
    points = cfg.grid.points(method)
    grid_scores: dict[str, float | None] = {}
    best_hp = points[0]
    if cfg.tune:
        x, y = split_data(task, "inner_valid")
        tune_split = (x[:cfg.tune_examples], y[:cfg.tune_examples])
        best = math.inf
        for point in points:
            label = _hp_label(point)
            if bar is not None:
                bar.set_postfix_str(f"{task.spec.name} {method} {label} (tuning)")
            res = run_method(method, task, _keys(task_key, 0), {**point, **extra}, cfg, tune_split)
            score = _score(res, np.asarray(tune_split[1]))
            grid_scores[label] = score if math.isfinite(score) else None
            if score < best:
                best_hp, best = point, score
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.set_postfix_str(f"{task.spec.name} {method} {_hp_label(best_hp)} (final)")
    res = run_method(method, task, _keys(task_key, 1), {**best_hp, **extra}, cfg, "test")
    if bar is not None:
        bar.update(1)
    _, y_test = split_data(task, "test")
    y_test = np.asarray(y_test)
    hp = dict(res.hyperparameters)
    hp.update(best_hp)
    hp["tuned"] = cfg.tune
    if cfg.tune:
        hp["grid"] = grid_scores
        hp["tuned_on"] = f"BMA NLL, first {min(cfg.tune_examples, int(split_data(task, 'inner_valid')[1].shape[0]))} inner_valid examples"
    entry = {
        "grad_evals": res.grad_evals,
        "seconds": res.seconds,
        "num_samples": int(len(res.samples_log_probs)),
        "num_samples_requested": res.num_requested,
        "divergent_chains": res.divergent_chains,
        "hyperparameters": hp,
    }
    if len(res.samples_log_probs):
        metrics = classification_metrics(res.samples_log_probs, y_test)
        curve = bma_curve(res.samples_log_probs, y_test)
        entry.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        entry["curve"] = curve
    else:  # every sample diverged: nothing to average
        entry.update({"acc": None, "nll": None, "ece": None, "pairwise_kld": None, "curve": None})
    if reference is not None:
        if len(res.samples_log_probs):
            probs = bma_probs(res.samples_log_probs)
            entry["agreement"] = agreement(probs, reference)
            entry["total_variation"] = total_variation(probs, reference)
        else:
            entry["agreement"] = entry["total_variation"] = None
    return entry


def _config_record(cfg: EvalConfig, sampler: dict | None) -> dict:
    record = cfg.to_dict()
    record["tasks"] = [dataclasses.asdict(t) | {"name": t.name} for t in cfg.tasks]
    record["divergent_chains"] = DIVERGENCE_NOTE
    record["thinning_used"] = cfg.sample_thinning
    record["csghmc_cycles_used"] = cfg.cycles
    record["seconds_measure"] = (
        "wall time of the final run's G updates (all chunks, sample transfer), after compilation; "
        "excludes tuning runs and test-set prediction")
    if sampler is not None:
        record["sampler_checkpoint"] = sampler["path"]
        record["sampler_config"] = dataclasses.asdict(sampler["sampler"])
    return record


def load_references(references: dict | None, names: list[str], tasks: list) -> dict[str, dict]:
    """{task name: {"path", "probs", "accuracy"}} from {task name or None: path}; None stands for the
    only task.  Every file is checked (shape against the task's test split, probabilities, row order)."""
    out = {}
    for name, path in (references or {}).items():
        if name is None:
            if len(names) != 1:
                raise ReferenceDataError(f"--reference {path}: the configuration has {len(names)} tasks; "
                                         f"name one as TASK=PATH (tasks: {', '.join(names)})")
            name = names[0]
        if name not in names:
            raise ReferenceDataError(f"--reference for unknown task {name!r}; tasks: {', '.join(names)}")
        task = tasks[names.index(name)]
        _, y_test = task.splits.test
        probs = load_reference_probs(path, int(y_test.shape[0]), task.num_classes)
        acc = check_alignment(probs, np.asarray(y_test), f"reference probabilities {path}")
        out[name] = {"path": str(path), "probs": probs, "accuracy": acc}
    return out


def evaluate(cfg: EvalConfig, out_dir=None, sampler_path=None, progress: bool = True, sampler: dict | None = None,
             references: dict | None = None) -> dict:
    """Run the evaluation described by `cfg`; write report.json / report.md / bma_curves.png into out_dir
    (if given).  `sampler` (from `load_l2e`) overrides `sampler_path`.  `references`: {task name (or None
    for the only task): path of reference predictive probabilities} (see `load_references`); every input is
    checked before anything is computed.  Returns the results dict."""
    if "l2e" in cfg.methods and sampler is None:
        sampler = load_l2e(sampler_path)  # fail fast, before any compilation
    tasks = [build_task(spec) for spec in cfg.tasks]  # dataset errors surface here
    refs = load_references(references, cfg.task_names(), tasks)
    total = sum((len(cfg.grid.points(m)) if cfg.tune else 0) + 1 for m in cfg.methods) * len(tasks)
    results = {"config": _config_record(cfg, sampler if "l2e" in cfg.methods else None), "tasks": {}}
    root = jax.random.PRNGKey(cfg.seed)
    with tqdm(total=total, desc="evaluate", unit="run", disable=not progress, dynamic_ncols=True) as bar:
        for t, (name, task, held_out) in enumerate(zip(cfg.task_names(), tasks, cfg.held_out)):
            task_key = jax.random.fold_in(root, t)
            methods = {}
            ref = refs.get(name)
            for method in cfg.methods:
                methods[method] = run_task_method(task, task_key, method, cfg, sampler, bar,
                                                  None if ref is None else ref["probs"])
            results["tasks"][name] = {
                "held_out": held_out,
                "spec": dataclasses.asdict(task.spec),
                "data": {"train": task.data_size, "test": int(task.splits.test[1].shape[0]),
                         "classes": task.num_classes},
                "methods": methods,
            }
            if ref is not None:
                results["tasks"][name]["reference"] = {"path": ref["path"], "accuracy": ref["accuracy"]}
    if out_dir is not None:
        paths = write_report(results, out_dir)
        results["paths"] = {k: str(v) for k, v in paths.items()}
    return results


def format_table(results: dict) -> str:
    """A compact plain-text table: task, method, acc, nll, ece, kld, grad_evals, samples, divergent, seconds."""
    def f(v, spec):
        return "—" if v is None else format(v, spec)

    header = f"{'task':<34} {'method':<14} {'acc':>7} {'nll':>7} {'ece':>7} {'kld':>7} {'grads':>6} {'K':>3} {'div':>3} {'sec':>6}"
    lines = [header, "-" * len(header)]
    for tname, task in results["tasks"].items():
        for mname, m in task["methods"].items():
            lines.append(
                f"{tname[:34]:<34} {mname:<14} {f(m.get('acc'), '.4f'):>7} {f(m.get('nll'), '.4f'):>7} "
                f"{f(m.get('ece'), '.4f'):>7} {f(m.get('pairwise_kld'), '.3f'):>7} {m['grad_evals']:>6} "
                f"{m['num_samples']:>3} {m['divergent_chains']:>3} {m['seconds']:>6.2f}")
    return "\n".join(lines)
