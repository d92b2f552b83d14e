"""`evaluate(cfg, out_dir)`: tune, run and score every method on every held-out task, then write the report.

Protocol per task (index t) and method (evaluate.methods.registry):
  * keys: task key = fold_in(PRNGKey(seed), t); tuning runs use fold_in(task key, 0), the final run
    fold_in(task key, 1), each split into (init key, chain key).  Every method gets these same keys (common
    random numbers): the single-chain methods start from the same initial parameters, task.init_params(init
    key), and ensemble member m from task.init_params(fold_in(init key, m)) — member m of every ensemble
    starts from the same parameters, which differ from the chains' start.
  * budgets (evaluate.budget): minibatch methods share G minibatch gradient evaluations; full-batch methods
    (Method.full_batch) use their own budgets (settings.<method>), starting from the final deep-ensemble run's
    first members (BASELINES §6; the deep ensemble is run for them if it is not among the methods).  Every
    entry states its "gradient" kind and "epochs" = example-gradients / N, so budgets can be compared.
  * tuning (cfg.tune, methods with a grid): for every grid point, one run of the full budget, scored by
    `task.score` (BMA NLL; regression −LPPD of the pooled predictive mixture) of its kept samples on the first
    cfg.tune_examples `inner_valid` examples; a run with a divergent chain scores +inf.  The best finite score
    wins (if none is finite: the first grid point).  Without tuning the first grid point is used.
  * final run with the chosen hyperparameters, scored on the full `test` split (evaluate.entries.method_entry).
  * divergence (DIVERGENCE_NOTE): a chain (ensemble member) with a non-finite sample or prediction is divergent
    and counted in `divergent_chains`; its non-finite samples are dropped from the BMA and every metric, its
    finite samples are kept.  In tuning, a run with any divergent chain scores +inf.
  * reference (optional, per task; evaluate.reference): a reference posterior's predictive (e.g. HMC).  It gets
    its own "hmc" method entry; with reference probabilities every method's BMA gets `agreement` and
    `total_variation`.
  * regression tasks with 1-D inputs get a "band": the 95 % central interval of each method's pooled
    predictive mixture on the sorted test inputs.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

import l2e
from evaluate import budget
from evaluate.config import EvalConfig
from evaluate.entries import ESS_ESTIMATOR, band, hmc_entry, method_entry
from evaluate.methods import METHODS, REGISTRY, CompileCache, MethodResult, get_method, run_method, split_data
from evaluate.reference import load_references
from evaluate.report import write_report
from tasks import TaskCache, build

__all__ = ["DIVERGENCE_NOTE", "evaluate", "load_l2e", "run_task_method", "save_samples"]

DIVERGENCE_NOTE = ("a chain (ensemble member) with a non-finite sample or prediction is divergent and counted per "
                   "method (divergent_chains); its non-finite samples are excluded from the BMA and all metrics, its "
                   "finite ones are kept; in tuning, a run with a divergent chain scores +inf")


def load_l2e(sampler_path=None) -> dict:
    """{"meta_params", "sampler" (L2EConfig), "path", "meta"} from a checkpoint (None: the shipped one)."""
    meta_params, sampler, meta = l2e.load_meta_params(sampler_path)
    path = str(sampler_path) if sampler_path is not None else "shipped"
    return {"meta_params": meta_params, "sampler": sampler, "path": path, "meta": meta}


def _score(task, result: MethodResult, labels) -> float:
    """Tuning score: `task.score` of the kept samples; +inf if any chain diverged or nothing is left."""
    if result.divergent_chains or result.num_finite == 0:
        return math.inf
    value = task.score(result.outputs, labels)
    return value if math.isfinite(value) else math.inf


def _keys(task_key, phase: int):
    return tuple(jax.random.split(jax.random.fold_in(task_key, phase)))


def _hp_label(point: dict) -> str:
    """E.g. "lr=0.03" or "lr=0.03,friction=10" (keys of the report's tuning grid)."""
    names = {"learning_rate": "lr"}
    return ",".join(f"{names.get(k, k)}={v:g}" for k, v in point.items())


class _Progress:
    """The tqdm bar's postfix and count (a no-op without a bar)."""

    def __init__(self, bar):
        self.bar = bar

    def start(self, task, method: str, point: dict, phase: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{task.spec.name} {method} {_hp_label(point)} ({phase})")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)


def _tune(task, task_key, method: str, cfg: EvalConfig, extra: dict, cache, progress) -> tuple[dict, dict]:
    """(best grid point, {label: score or None}) over the method's grid on the tuning examples."""
    points = get_method(method).points(getattr(cfg.settings, method))
    x, y = split_data(task, "inner_valid")
    tune_split = (x[:cfg.tune_examples], y[:cfg.tune_examples])
    best_hp, best, grid_scores = points[0], math.inf, {}
    for point in points:
        progress.start(task, method, point, "tuning")
        res = run_method(method, task, _keys(task_key, 0), {**point, **extra}, cfg, tune_split, cache)
        score = _score(task, res, np.asarray(tune_split[1]))
        grid_scores[_hp_label(point)] = score if math.isfinite(score) else None
        if score < best:
            best_hp, best = point, score
        progress.done()
    return best_hp, grid_scores


def _tune_and_run(task, task_key, method: str, cfg: EvalConfig, extra: dict, cache, progress):
    """(final MethodResult on test, chosen grid point, {label: score or None} (empty without tuning))."""
    if cfg.tune and get_method(method).tuned:
        best_hp, grid_scores = _tune(task, task_key, method, cfg, extra, cache, progress)
    else:
        best_hp, grid_scores = get_method(method).points(getattr(cfg.settings, method))[0], {}
    progress.start(task, method, best_hp, "final")
    res = run_method(method, task, _keys(task_key, 1), {**best_hp, **extra}, cfg, "test", cache)
    progress.done()
    return res, best_hp, grid_scores


def _warm_start(task, task_key, cfg: EvalConfig, chains: int, runs: dict, cache, progress) -> dict:
    """hp of a full-batch method: the first `chains` finite members of the final deep-ensemble run (the one
    reported, or a run made here with the same keys and tuning) and its lr as MILE's ε₀."""
    if "deep_ensemble" not in runs:
        runs["deep_ensemble"] = _tune_and_run(task, task_key, "deep_ensemble", cfg, {}, cache, progress)
    res, best_hp, _ = runs["deep_ensemble"]
    members = sorted(set(np.asarray(res.chain_ids).tolist()))[:chains]
    if not members:
        raise RuntimeError("every deep-ensemble member diverged: no warm start for the full-batch methods")
    idx = np.asarray([int(np.flatnonzero(res.chain_ids == m)[0]) for m in members])
    init = jax.tree.map(lambda a: np.asarray(a)[idx], res.samples)
    per_member = res.grad_evals // max(res.num_requested, 1)
    warm = {"method": "deep_ensemble", "members": [int(m) for m in members],
            "learning_rate": best_hp.get("learning_rate"), "grad_evals": per_member * len(members),
            "gradient": budget.gradient_label(res, task.data_size),
            "epochs": per_member * len(members) * res.batch_size / task.data_size}
    lr0 = best_hp.get("learning_rate", cfg.settings.deep_ensemble.lrs[0])
    return {"init_positions": init, "step_size0": float(lr0), "warm_start": warm}


def run_task_method(task, task_key, method: str, cfg: EvalConfig, sampler: dict | None, runs: dict, cache,
                    progress) -> tuple:
    """Tune (optionally) and run one method on one task: (final MethodResult, chosen point, grid scores).

    runs: per-task {method: that tuple} shared by the methods of one task (the deep-ensemble run there is the
    warm start of the full-batch methods); cache: the evaluation's CompileCache."""
    m = get_method(method)
    extra = {}
    if m.needs_sampler:
        extra = {"meta_params": sampler["meta_params"], "sampler": sampler["sampler"]}
    if m.warm_start:
        extra = _warm_start(task, task_key, cfg, getattr(cfg.settings, method).chains, runs, cache, progress)
    if method not in runs:  # the deep ensemble may already have run as a warm start (same keys, same result)
        runs[method] = _tune_and_run(task, task_key, method, cfg, extra, cache, progress)
    return runs[method]


def _config_record(cfg: EvalConfig, tasks: list, sampler: dict | None) -> dict:
    record = cfg.to_dict()
    record["tasks"] = [dataclasses.asdict(t) | {"name": t.name, "kind": task.kind} for t, task in zip(cfg.tasks, tasks)]
    record["divergent_chains"] = DIVERGENCE_NOTE
    shared = [m for m in METHODS if not REGISTRY[m].full_batch]
    record["budgets"] = budget.budget_note(shared, [m for m in METHODS if REGISTRY[m].full_batch])
    record["ess_estimator"] = ESS_ESTIMATOR
    record["thinning_used"] = cfg.sample_thinning
    record["schedules"] = {m: dataclasses.asdict(cfg.schedule(m)) for m in cfg.methods if REGISTRY[m].schedule}
    record["seconds_measure"] = (
        "wall time of the final run's updates (all chunks / chains, sample transfer), after compilation "
        "(nuts_bde: includes compiling its first chain); excludes tuning runs and test-set prediction")
    if sampler is not None:
        record["sampler_checkpoint"] = sampler["path"]
        record["sampler_config"] = dataclasses.asdict(sampler["sampler"])
    return record


def _num_runs(cfg: EvalConfig) -> int:
    def runs(name):
        m = get_method(name)
        return (len(m.points(getattr(cfg.settings, name))) if cfg.tune and m.tuned else 0) + 1

    total = sum(runs(m) for m in cfg.methods)
    if any(get_method(m).warm_start for m in cfg.methods) and "deep_ensemble" not in cfg.methods:
        total += runs("deep_ensemble")
    return total


def _task_report(task, task_key, held_out: str, ref: dict | None, cfg: EvalConfig, sampler, cache, progress):
    """The report entry of one task: every method's entry (and the reference's), data sizes, 1-D band."""
    runs, methods = {}, {}
    probs = None if ref is None else ref.get("probs")
    for method in cfg.methods:
        res, best_hp, grid_scores = run_task_method(task, task_key, method, cfg, sampler, runs, cache, progress)
        methods[method] = method_entry(task, method, res, best_hp, grid_scores, cfg, cache, probs)
    if ref is not None:
        methods["hmc"] = hmc_entry(ref, task)
    data = {"train": task.data_size, "test": int(task.splits.test[1].shape[0])}
    if getattr(task, "num_classes", None) is not None:
        data["classes"] = task.num_classes
    entry = {"kind": task.kind, "held_out": held_out, "spec": dataclasses.asdict(task.spec), "data": data,
             "methods": methods}
    if ref is not None:
        entry["reference"] = {k: ref.get(k) for k in ("path", "kind", "accuracy", "metadata")}
    task_band = band(task, {m: runs[m][0] for m in cfg.methods}, ref)
    if task_band is not None:
        entry["band"] = task_band
    return entry, runs


def save_samples(out_dir, task_name: str, runs: dict, methods) -> dict:
    """Write the kept samples of each method's final run as ArviZ InferenceData (netCDF;
    evaluate.samples.write_inference_data) to out_dir/samples/<task slug>/<method>.nc; returns {method: path
    relative to out_dir} (methods without a finite sample are skipped)."""
    from evaluate.hmc_reference import slugify
    from evaluate.samples import write_inference_data

    paths = {}
    for method in methods:
        res = runs[method][0]
        if res.samples is None or res.num_finite == 0:
            continue
        rel = Path("samples") / slugify(task_name) / f"{method}.nc"
        write_inference_data(Path(out_dir) / rel, res.samples, res.chain_ids, draws_per_chain=res.draws_per_chain)
        paths[method] = str(rel)
    return paths


def evaluate(cfg: EvalConfig, out_dir=None, sampler_path=None, progress: bool = True, sampler: dict | None = None,
             references: dict | None = None, cache: CompileCache | None = None, samples: bool = False) -> dict:
    """Run the evaluation described by `cfg`; write the report (evaluate.report.write_report) into out_dir (if
    given).  `sampler` (from `load_l2e`) overrides `sampler_path`.  `references`: {task name (or None for the
    only task): path} (evaluate.reference.load_references); every input is checked before anything is
    computed.  cache: a CompileCache to reuse (default: a new one for this evaluation).  samples: also write
    every method's final-run samples (`save_samples`; needs out_dir).  Returns the results dict (schema:
    evaluate.report)."""
    needs_sampler = any(get_method(m).needs_sampler for m in cfg.methods)
    if needs_sampler and sampler is None:
        sampler = load_l2e(sampler_path)  # fail fast, before any compilation
    task_cache = TaskCache()
    tasks = [build(spec, task_cache) for spec in cfg.tasks]  # dataset errors surface here
    refs = load_references(references, cfg.task_names(), tasks)
    cache = CompileCache() if cache is None else cache
    results = {"config": _config_record(cfg, tasks, sampler if needs_sampler else None), "tasks": {}}
    root = jax.random.PRNGKey(cfg.seed)
    with tqdm(total=_num_runs(cfg) * len(tasks), desc="evaluate", unit="run", disable=not progress,
              dynamic_ncols=True) as bar:
        for t, (name, task, held_out) in enumerate(zip(cfg.task_names(), tasks, cfg.held_out)):
            entry, runs = _task_report(task, jax.random.fold_in(root, t), held_out, refs.get(name), cfg, sampler,
                                       cache, _Progress(bar))
            if samples and out_dir is not None:
                entry["samples"] = save_samples(out_dir, name, runs, cfg.methods)
            results["tasks"][name] = entry
    if out_dir is not None:
        paths = write_report(results, out_dir)
        results["paths"] = {k: str(v) for k, v in paths.items()}
    return results
