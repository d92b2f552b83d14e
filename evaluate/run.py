"""`evaluate(cfg, out_dir)`: tune, run and score every method on every held-out task, then write the report.

Protocol per seed s (cfg.seed_list), task (index t) and method (evaluate.methods.registry):
  * keys: task key = fold_in(PRNGKey(s), t); tuning runs use fold_in(task key, 0), the final run
    fold_in(task key, 1), each split into (init key, chain key).  Every method gets these same keys (common
    random numbers): the single-chain methods start from the same initial parameters, task.init_params(init
    key), and ensemble member m from task.init_params(fold_in(init key, m)) — member m of every ensemble
    starts from the same parameters, which differ from the chains' start.
  * budgets (evaluate.budget): minibatch methods share G minibatch gradient evaluations (budget="seconds": the
    same wall time, G per method from its measured seconds per update); full-batch methods (Method.full_batch)
    use their own budgets (settings.<method>), starting from the final deep-ensemble run's first members
    (docs/samplers.md, MCLMC and the MILE recipe; the deep ensemble is run for them if it is not among the methods).  Every entry states its
    "gradient" kind and "epochs" = example-gradients / N, so budgets can be compared, the FLOPs and seconds of
    one update and what its tuning runs cost.
  * tuning (cfg.tune, methods with a grid; evaluate.tuning): one run of the full budget per grid point, scored
    by `task.score` (BMA NLL; regression −LPPD of the pooled predictive mixture) of its kept samples on the
    first cfg.tune_examples `inner_valid` examples; a run with a divergent chain scores +inf.  The best finite
    score wins (if none is finite: the first grid point); with cfg.extend_grid a winner on an edge of the lr
    grid extends it (bounded).  Without tuning the first grid point is used.
  * final run with the chosen hyperparameters, scored on the full `test` split (evaluate.entries.method_entry),
    with the temperature the method ran at and its measured kinetic temperature T_kin.
  * divergence (DIVERGENCE_NOTE; evaluate.methods.outputs): a sample that is not finite, or whose prediction
    scale exceeds 100 × max(1, the median of the other chains' samples), is divergent; its chain (ensemble
    member) is counted in `divergent_chains` (`scale_divergent_chains`: by scale alone); divergent samples are
    dropped from the BMA and every metric, the chain's others are kept.  In tuning, a run with any divergent
    chain scores +inf.
  * reference (optional, per task; evaluate.reference): a reference posterior's predictive (e.g. HMC).  It gets
    its own "hmc" method entry; with reference probabilities every method's BMA gets `agreement` and
    `total_variation`; with the reference's dispersion statistics every method gets "dispersion" (ratios to
    the reference's, flagged outside [0.5, 2]; evaluate.dispersion.dispersion_entry).
  * regression tasks with 1-D inputs get a "band": the 95 % central interval of each method's pooled
    predictive mixture on the sorted test inputs.
  * several seeds: every method's entry is the mean ± standard error over seeds (evaluate.seeds), each seed's
    entry kept; with one seed the report is that seed's.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

import l2e
from evaluate import budget
from evaluate.config import EvalConfig
from evaluate.dispersion import dispersion_entry
from evaluate.entries import ESS_ESTIMATOR, band, hmc_entry, method_entry
from evaluate.methods import METHODS, REGISTRY, CompileCache, get_method
from evaluate.methods.l2e_released import load_released_sampler
from evaluate.methods.outputs import DIVERGENCE_RULE
from evaluate.reference import load_references
from evaluate.sampler_overrides import check_sampler_overrides
from evaluate.report import publish_report, write_report
from evaluate.seeds import SE_NOTE, aggregate_task
from evaluate.tuning import GRID_EXTENSIONS, Progress, tune_and_run
from base.io import ConfigError
from cli import discard_staging, held_warnings, staging_dir
from tasks import TaskCache, build

__all__ = ["DIVERGENCE_NOTE", "evaluate", "load_l2e", "load_samplers", "method_extra", "run_task_method",
           "save_samples"]

DIVERGENCE_NOTE = (DIVERGENCE_RULE + "; a chain (ensemble member) with a divergent sample is counted per method "
                   "(divergent_chains; scale_divergent_chains: those judged by scale alone); its divergent samples "
                   "are excluded from the BMA and all metrics, its others are kept; in tuning, a run with a "
                   "divergent chain scores +inf")
TEMPERATURE_NOTE = ("temperature: the T each method ran at (1 for the posterior samplers, the tuned T of "
                    "sghmc_tempered, the checkpoint's T for L2E); t_kin: kinetic temperature <Σ r·∇_rK> / d over "
                    "the updates from the first kept sample to the last (cyclical SGHMC: its sampling-phase updates "
                    "only), per chain (t_kin_per_chain; None for a divergent chain) and its mean over the "
                    "non-divergent chains (t_kin_left_out: how many it leaves out); 1 for a correct sampler at T = 1")


def load_l2e(sampler_path=None) -> dict:
    """{"meta_params", "sampler", "path", "meta"} from a checkpoint (None: the shipped paper-form L2E, the `l2e`
    method's sampler; the shipped Mass-L2E is the method `l2e_mass`, the default Transient-L2E `l2e_transient`)."""
    meta_params, sampler, meta = l2e.load_meta_params(sampler_path if sampler_path is not None else "paper-form")
    path = str(sampler_path) if sampler_path is not None else "paper-form (shipped)"
    return {"meta_params": meta_params, "sampler": sampler, "path": path, "meta": meta}


def _warm_start(task, task_key, cfg: EvalConfig, chains: int, runs: dict, cache, progress) -> dict:
    """hp of a full-batch method: the first `chains` finite members of the final deep-ensemble run (the one
    reported, or a run made here with the same keys and tuning) and its lr as MILE's ε₀."""
    if "deep_ensemble" not in runs:
        runs["deep_ensemble"] = tune_and_run(task, task_key, "deep_ensemble", cfg, {}, cache, progress)
    res, tuning, _ = runs["deep_ensemble"]
    best_hp = tuning.best
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


def _sampler_hp(sampler: dict) -> dict:
    return {"meta_params": sampler["meta_params"], "sampler": sampler["sampler"], "checkpoint": sampler["path"]}


def method_extra(method: str, samplers: dict) -> dict:
    """The hp a method needs besides its grid point: the released sampler (samplers["released"]) for a method that
    needs it, else a learned method's checkpoint (samplers[its shipped name], or samplers["l2e"] for the --sampler
    method); {} for every other method."""
    m = get_method(method)
    if m.needs_released:
        return _sampler_hp(samplers["released"])
    if m.needs_sampler:
        return _sampler_hp(samplers[m.needs_sampler if isinstance(m.needs_sampler, str) else "l2e"])
    return {}


def run_task_method(task, task_key, method: str, cfg: EvalConfig, samplers: dict, runs: dict, cache,
                    progress) -> tuple:
    """Tune (optionally) and run one method on one task: (final MethodResult, evaluate.tuning.Tuning, time-budget
    record or None).

    samplers: {"l2e": load_l2e(...), "released": load_released_sampler(...)} as the methods need; runs: per-task
    {method: that tuple} shared by the methods of one task (the deep-ensemble run there is the warm start of
    the full-batch methods); cache: the evaluation's CompileCache."""
    m = get_method(method)
    extra = method_extra(method, samplers)
    if m.warm_start:
        extra = _warm_start(task, task_key, cfg, getattr(cfg.settings, method).chains, runs, cache, progress)
    if method not in runs:  # the deep ensemble may already have run as a warm start (same keys, same result)
        runs[method] = tune_and_run(task, task_key, method, cfg, extra, cache, progress)
    return runs[method]


def _config_record(cfg: EvalConfig, tasks: list, samplers: dict, skipped: dict) -> dict:
    record = cfg.to_dict()
    record["tasks"] = [dataclasses.asdict(t) | {"name": t.name, "kind": task.kind} for t, task in zip(cfg.tasks, tasks)]
    record["divergent_chains"] = DIVERGENCE_NOTE
    shared = [m for m in METHODS if not REGISTRY[m].full_batch]
    record["budgets"] = budget.budget_note(shared, [m for m in METHODS if REGISTRY[m].full_batch], cfg.budget)
    record["ess_estimator"] = ESS_ESTIMATOR
    record["thinning_used"] = cfg.sample_thinning
    record["schedules"] = {m: dataclasses.asdict(cfg.schedule(m)) for m in cfg.methods if REGISTRY[m].schedule}
    record["seconds_measure"] = (
        "wall time of the final run's updates (all chunks / chains, sample transfer), after compilation "
        "(nuts_bde: includes compiling its first chain); excludes tuning runs and test-set prediction; "
        "seconds_per_step = seconds / updates (minibatch methods); tuning: the tuning runs' count, gradient "
        "evaluations and seconds")
    record["flops"] = budget.FLOPS_NOTE
    record["temperature"] = TEMPERATURE_NOTE
    if cfg.tune:
        record["grid_points"] = {m: len(get_method(m).points(getattr(cfg.settings, m)))
                                 for m in cfg.methods if get_method(m).tuned}
        if cfg.extend_grid:
            record["grid_extension"] = (f"a winning lr on an edge of the grid extends it by the grid's ratio at that "
                                        f"edge, at most {GRID_EXTENSIONS} times (hyperparameters.grid_extended)")
        if cfg.kinetic_tolerance is not None:
            checked = ", ".join(m for m in cfg.methods if get_method(m).kinetic_check) or "none here"
            record["kinetic_tuning"] = (
                f"a grid point of a method with a kinetic check ({checked}) whose chains' T_kin leave "
                f"[{1 - cfg.kinetic_tolerance:g}, {1 + cfg.kinetic_tolerance:g}]·T is ranked behind every point inside "
                f"the band (hyperparameters.kinetic_rejected)")
        if cfg.failure_extensions:
            record["failure_extensions"] = (
                f"when no grid point scores finitely (with kinetic_tolerance: none is inside the band), up to "
                f"{cfg.failure_extensions} smaller lrs (÷ the grid's ratio) are tried (hyperparameters.grid_extended: "
                f"rescue)")
    if len(cfg.seed_list) > 1:
        record["seed_aggregation"] = SE_NOTE
    if "l2e" in samplers:
        record["sampler_checkpoint"] = samplers["l2e"]["path"]
        record["sampler_config"] = dataclasses.asdict(samplers["l2e"]["sampler"])
    if "released" in samplers:
        record["released_checkpoint"] = samplers["released"]["path"]
        record["released_config"] = dataclasses.asdict(samplers["released"]["sampler"])
    if skipped:
        record["skipped_methods"] = skipped
    return record


def _num_runs(cfg: EvalConfig) -> int:
    def runs(name):
        m = get_method(name)
        return (len(m.points(getattr(cfg.settings, name))) if cfg.tune and m.tuned else 0) + 1

    total = sum(runs(m) for m in cfg.methods)
    if any(get_method(m).warm_start for m in cfg.methods) and "deep_ensemble" not in cfg.methods:
        total += runs("deep_ensemble")
    return total * len(cfg.seed_list)


def _task_report(task, task_key, held_out: str, ref: dict | None, cfg: EvalConfig, samplers: dict, cache,
                 progress):
    """The report entry of one task: every method's entry (and the reference's), data sizes, 1-D band."""
    runs, methods = {}, {}
    probs = None if ref is None else ref.get("probs")
    for method in cfg.methods:
        res, tuning, time_budget = run_task_method(task, task_key, method, cfg, samplers, runs, cache, progress)
        methods[method] = method_entry(task, method, res, tuning.best, tuning.scores, cfg, cache, probs,
                                       tuning=tuning, time_budget=time_budget)
        dispersion = dispersion_entry(task, res, ref) if ref is not None else None
        if dispersion is not None:  # ratios to the reference's dispersion statistics (evaluate.dispersion)
            methods[method]["dispersion"] = dispersion
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


def save_samples(out_dir, task_name: str, runs: dict, methods, prefix: str | None = None) -> dict:
    """Write the kept samples of each method's final run as ArviZ InferenceData (netCDF;
    evaluate.samples.write_inference_data) to out_dir/samples/[<prefix>/]<task slug>/<method>.nc; returns
    {method: path relative to out_dir} (methods without a finite sample are skipped)."""
    from tasks.reference import slugify
    from evaluate.samples import write_inference_data

    paths = {}
    for method in methods:
        res = runs[method][0]
        if res.samples is None or res.num_finite == 0:
            continue
        rel = Path("samples") / (prefix or "") / slugify(task_name) / f"{method}.nc"
        write_inference_data(Path(out_dir) / rel, res.samples, res.chain_ids, draws_per_chain=res.draws_per_chain)
        paths[method] = str(rel)
    return paths


def _released_input(cfg: EvalConfig, released_path, released: dict | None) -> tuple:
    """(cfg, {skipped method: why}, released sampler or None).  A method needing the released file runs when it
    loads; a missing file skips the methods listed in cfg.optional_methods (with a note) unless --released named
    it, and is an error (ConfigError) otherwise; a refused file raises ReleasedFormatError (a ValueError)."""
    names = [m for m in cfg.methods if get_method(m).needs_released]
    if not names or released is not None:
        return cfg, {}, released
    try:
        return cfg, {}, load_released_sampler(released_path)
    except FileNotFoundError as e:
        if released_path is not None or any(m not in cfg.optional_methods for m in names):
            raise ConfigError(f"{e} (pass --released PATH or set $L2E_DATA_DIR)") from None
        kept = tuple(m for m in cfg.methods if m not in names)
        if not kept:
            raise ConfigError(f"{e}: no method left to evaluate") from None
        return dataclasses.replace(cfg, methods=kept), {m: f"skipped: {e}" for m in names}, None


def load_samplers(cfg: EvalConfig, sampler_path=None, released_path=None, sampler: dict | None = None,
                  released: dict | None = None, shipped: dict | None = None) -> tuple:
    """(cfg, {skipped method: why}, samplers): every checkpoint cfg's methods read (what `method_extra` looks up),
    each loaded once, before anything runs — "l2e" (`sampler`, else load_l2e(sampler_path)), each shipped name a
    method names (`shipped`'s entry, else load_l2e(name)), "released" (`_released_input`: a missing file drops the
    optional methods that need it, with the reason in skipped, and is a ConfigError otherwise); every learned
    method's sampler overrides checked against its checkpoint and recorded as parsed (evaluate.sampler_overrides)."""
    cfg, skipped, released = _released_input(cfg, released_path, released)
    samplers = {} if released is None else {"released": released}
    if any(get_method(m).needs_sampler is True for m in cfg.methods):
        samplers["l2e"] = sampler if sampler is not None else load_l2e(sampler_path)  # fail fast
    for name in {get_method(m).needs_sampler for m in cfg.methods} - {True, False}:  # shipped checkpoints by name
        samplers[name] = (shipped or {}).get(name) or load_l2e(name)
    return check_sampler_overrides(cfg, samplers), skipped, samplers  # settings.<method>.sampler: as they will run


def evaluate(cfg: EvalConfig, out_dir=None, sampler_path=None, progress: bool = True, sampler: dict | None = None,
             references: dict | None = None, cache: CompileCache | None = None, samples: bool = False,
             released_path=None, released: dict | None = None, shipped: dict | None = None) -> dict:
    """Run the evaluation described by `cfg`; write the report (evaluate.report.write_report) into out_dir (if
    given).  `sampler` (from `load_l2e`) overrides `sampler_path`; `released` (from
    evaluate.methods.l2e_released.load_released_sampler) overrides `released_path` (default: l2e_released/ of the
    data root, `evaluate.methods.l2e_released.default_released_path`).  `references`: {task name (or None for the
    only task): path} (evaluate.reference.load_references); every input is checked before anything is computed.  cache: a CompileCache to reuse
    (default: a new one for this evaluation).  samples: also write every method's final-run samples
    (`save_samples`; needs out_dir).  shipped: {shipped name (l2e.checkpoint.SHIPPED, e.g. "meta-sgmcmc"): a
    `load_l2e` dict} run instead of that shipped checkpoint by the method that names it (Method.needs_sampler),
    e.g. one step of a meta-training run (`python -m evaluate select`).  Returns the results dict (schema:
    evaluate.report)."""
    with held_warnings():  # a refused input prints its one error line alone (cli.guard)
        cfg.check_budget()
        cfg, skipped, samplers = load_samplers(cfg, sampler_path, released_path, sampler, released, shipped)
        task_cache = TaskCache()
        tasks = [build(spec, task_cache) for spec in cfg.tasks]  # dataset errors surface here
        budget.check_sample_memory(cfg, tasks)
        refs = load_references(references, cfg.task_names(), tasks)
    cache = CompileCache() if cache is None else cache
    stage = staging_dir(out_dir) if out_dir is not None else None  # the report set is written here, then swapped in
    try:
        return _evaluate(cfg, out_dir, stage, tasks, refs, samplers, skipped, cache, progress, samples)
    finally:
        if stage is not None and stage.exists():
            discard_staging(stage)


def _evaluate(cfg: EvalConfig, out_dir, stage, tasks, refs, samplers, skipped, cache, progress, samples) -> dict:
    """The body of `evaluate` once every input is checked: run, aggregate over seeds, write the report set into
    `stage` and publish it as `out_dir` (evaluate.report.publish_report)."""
    results = {"config": _config_record(cfg, tasks, samplers, skipped), "tasks": {}}
    seeds = cfg.seed_list
    per_seed = {name: {} for name in cfg.task_names()}
    with tqdm(total=_num_runs(cfg) * len(tasks), desc="evaluate", unit="run", disable=not progress,
              dynamic_ncols=True) as bar:
        for seed in seeds:
            root = jax.random.PRNGKey(seed)
            for t, (name, task, held_out) in enumerate(zip(cfg.task_names(), tasks, cfg.held_out)):
                entry, runs = _task_report(task, jax.random.fold_in(root, t), held_out, refs.get(name), cfg,
                                           samplers, cache, Progress(bar))
                if samples and out_dir is not None:
                    prefix = f"seed{seed}" if len(seeds) > 1 else None
                    entry["samples"] = save_samples(stage, name, runs, cfg.methods, prefix)
                per_seed[name][seed] = entry
    for name, entries in per_seed.items():
        results["tasks"][name] = entries[seeds[0]] if len(seeds) == 1 else aggregate_task(entries)
    if out_dir is not None:
        paths = write_report(results, stage)
        publish_report(stage, out_dir)
        results["paths"] = {k: str(Path(out_dir) / Path(v).name) for k, v in paths.items()}
    return results
