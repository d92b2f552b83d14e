"""`evaluate(cfg, out_dir)`: tune, run and score every method on every held-out task, then write the report.

Protocol per task (index t) and method:
  * keys: task key = fold_in(PRNGKey(seed), t); tuning runs use fold_in(task key, 0), the final run
    fold_in(task key, 1), each split into (init key, chain key).  All methods share these keys (common
    random numbers: same initial parameters for the chains and the first ensemble member).
  * budgets: the minibatch methods (l2e, sghmc, csghmc, psgld, fsghmc, deep_ensemble, noisy_de) share G minibatch
    gradient evaluations; mile and nuts_bde are full-batch and use their own budgets (EvalConfig.mile_* /
    nuts_*), starting from the final deep-ensemble run's first `fullbatch_chains` members (BASELINES §6; the
    DE is run for them if it is not among the methods).  Every entry states its "gradient" kind and "epochs" =
    example-gradients / N, so budgets can be compared.
  * tuning (cfg.tune): for every point of the method's grid, one run of the full budget, scored by the BMA NLL
    (regression: NLL = −LPPD of the pooled predictive mixture) of its finite samples on the first
    cfg.tune_examples `inner_valid` examples; a run with a divergent chain scores +inf.  The best finite score
    wins (if none is finite: the first grid point).  Without tuning the first grid value is used.  mile and
    nuts_bde have no grid (ε₀ = the tuned DE lr).
  * final run with the chosen hyperparameters, scored on the full `test` split: classification BMA ACC / NLL /
    ECE, pairwise KLD; regression LPPD / NLL / RMSE / calibration error / coverage (METRICS §2); the curve over
    the first k = 1..K samples (collection order; several chains: round-robin); ESS and chainwise R̂ of the
    parameter draws (`ess_entry`); the loss barrier of one pair of networks (`evaluate.methods.barrier_entry`).
  * divergence: a chain (ensemble member) with a non-finite sample or prediction is divergent; its samples
    are excluded from the BMA and every metric, and `divergent_chains` counts them per method.
  * reference (optional, per task; evaluate.reference): a reference posterior's predictive (e.g. HMC).  It gets
    its own "hmc" method entry; for classification every method's BMA gets `agreement` and `total_variation`.
  * regression tasks with 1-D inputs get a "band": the 95 % central interval of each method's pooled
    predictive mixture on the sorted test inputs (exact mixture quantiles by bisection on its CDF).
"""
from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from scipy.special import ndtr
from tqdm.auto import tqdm

import l2e
from evaluate.config import FULL_BATCH_METHODS, GRID_METHODS, EvalConfig
from evaluate.diagnostics import chainwise_rhat, ess_single_chain, regression_lppd, regression_metrics, regression_rmse
from evaluate.methods import MethodResult, barrier_entry, is_regression, run_method, split_data
from evaluate.metrics import (accuracy, agreement, bma_curve, bma_log_probs, bma_probs, classification_metrics, ece,
                              nll, nll_from_log_probs, total_variation)
from evaluate.report import write_report
from tasks.task import build

from evaluate.reference import load_references

__all__ = ["BAND_NOTE", "BUDGET_NOTE", "DIVERGENCE_NOTE", "ESS_ESTIMATOR", "ess_entry", "evaluate", "format_table",
           "hmc_entry", "load_l2e", "load_references", "mixture_interval", "run_task_method"]

DIVERGENCE_NOTE = ("a chain (ensemble member) with a non-finite sample or prediction is divergent: it is "
                   "counted per method (divergent_chains) and its samples are excluded from the BMA and all metrics")
BUDGET_NOTE = ("minibatch methods (l2e, sghmc, csghmc, psgld, fsghmc, deep_ensemble, noisy_de) share the budget of "
               "G = num_steps minibatch gradient evaluations; mile and nuts_bde use full-batch gradients and their "
               "own budgets (mile_steps/mile_samples/mile_thinning, nuts_warmup/nuts_samples/nuts_thinning), after "
               "a deep-ensemble warm start whose cost is recorded in hyperparameters.warm_start; 'epochs' = "
               "example-gradients / N makes the budgets comparable")
ESS_ESTIMATOR = ("Geyer single-chain ESS (FFT autocovariance, initial monotone sequence; "
                 "evaluate.diagnostics.ess_single_chain) of every parameter coordinate over each non-divergent "
                 "chain's draws; mean_ess / median_ess: mean / median over coordinates and chains; ess_per_second "
                 "and ess_per_1k_grads: sum over chains of the per-chain mean ESS per second of the method's "
                 "'seconds' and per 1000 of its 'grad_evals'")
BAND_NOTE = ("95 % central interval of the pooled Gaussian predictive mixture (equal weights over samples): "
             "exact quantiles by bisection on the mixture CDF; mean = mixture mean")


def load_l2e(sampler_path=None) -> dict:
    """{"meta_params", "sampler" (L2EConfig), "path", "meta"} from a checkpoint (None: the shipped one)."""
    meta_params, sampler, meta = l2e.load_meta_params(sampler_path)
    path = str(sampler_path) if sampler_path is not None else "shipped"
    return {"meta_params": meta_params, "sampler": sampler, "path": path, "meta": meta}


def _score(result: MethodResult, labels) -> float:
    """Tuning score: BMA NLL (regression: −LPPD) of the finite samples; +inf if any chain diverged or nothing
    is left."""
    if result.divergent_chains or result.num_finite == 0:
        return math.inf
    if result.predictions is not None:
        value = -regression_lppd(labels, result.predictions[..., 0], result.predictions[..., 1])
    else:
        value = nll_from_log_probs(bma_log_probs(result.samples_log_probs), labels)
    return value if math.isfinite(value) else math.inf


def _keys(task_key, phase: int):
    return tuple(jax.random.split(jax.random.fold_in(task_key, phase)))


def _hp_label(point: dict) -> str:
    """E.g. "lr=0.03" or "lr=0.03,friction=10" (keys of the report's tuning grid)."""
    names = {"learning_rate": "lr"}
    return ",".join(f"{names.get(k, k)}={v:g}" for k, v in point.items())


def _tune_and_run(task, task_key, method: str, cfg: EvalConfig, extra: dict, bar=None):
    """(final MethodResult on test, chosen grid point, {label: score or None} (empty without tuning))."""
    points = cfg.grid.points(method)
    grid_scores: dict[str, float | None] = {}
    best_hp = points[0]
    if cfg.tune and method in GRID_METHODS:
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
    return res, best_hp, grid_scores


def _example_grads(task, res: MethodResult) -> int:
    per = task.data_size if res.gradient == "full-batch" else res.batch_size
    return int(res.grad_evals) * int(per)


def _gradient_label(task, res: MethodResult) -> str:
    return f"full-batch (N={task.data_size})" if res.gradient == "full-batch" else f"minibatch (B={res.batch_size})"


def _warm_start(task, task_key, cfg: EvalConfig, cache: dict, bar=None) -> dict:
    """hp of mile / nuts_bde: the first cfg.fullbatch_chains finite members of the final deep-ensemble run (the
    one reported, or a run made here with the same keys and tuning) and its lr as MILE's ε₀."""
    if "deep_ensemble" not in cache:
        cache["deep_ensemble"] = _tune_and_run(task, task_key, "deep_ensemble", cfg, {}, bar)
    res, best_hp, _ = cache["deep_ensemble"]
    members = sorted(set(np.asarray(res.chain_ids).tolist()))[:cfg.fullbatch_chains]
    if not members:
        raise RuntimeError("every deep-ensemble member diverged: no warm start for the full-batch methods")
    idx = np.asarray([int(np.flatnonzero(res.chain_ids == m)[0]) for m in members])
    init = jax.tree.map(lambda a: np.asarray(a)[idx], res.samples)
    per_member = res.grad_evals // max(res.num_requested, 1)
    warm = {"method": "deep_ensemble", "members": [int(m) for m in members],
            "learning_rate": best_hp.get("learning_rate"), "grad_evals": per_member * len(members),
            "gradient": _gradient_label(task, res),
            "epochs": per_member * len(members) * res.batch_size / task.data_size}
    return {"init_positions": init, "step_size0": float(best_hp.get("learning_rate", cfg.grid.de_lrs[0])),
            "warm_start": warm}


def ess_entry(res: MethodResult) -> dict | None:
    """ESS / chainwise-R̂ summary of the parameter draws (ESS_ESTIMATOR); None for ensembles (one draw per
    member), fewer than 4 draws per chain, or no complete (non-divergent) chain.  cR̂ uses 2 sub-chains when a
    chain has ≤ 10 draws, else 4 (METRICS §3); NaN cR̂ counts as ≥ 1.1."""
    draws = int(res.draws_per_chain)
    if res.samples is None or draws < 4 or res.num_finite == 0:
        return None
    ids = np.asarray(res.chain_ids)
    chains = [int(c) for c in np.unique(ids) if np.sum(ids == c) == draws]
    if not chains:
        return None
    leaves = [np.asarray(a) for a in jax.tree.leaves(res.samples)]
    splits = 2 if draws <= 10 else 4
    means, all_ess, fracs = [], [], []
    for c in chains:
        sel = ids == c
        x = np.concatenate([a[sel].reshape(draws, -1) for a in leaves], axis=1).astype(np.float64)
        e = ess_single_chain(x)
        means.append(float(np.mean(e)))
        all_ess.append(e)
        with np.errstate(invalid="ignore"):
            fracs.append(float(np.mean(chainwise_rhat(x, num_splits=splits) < 1.1)))
    total = float(np.sum(means))
    return {"estimator": ESS_ESTIMATOR, "chains": len(chains), "draws_per_chain": draws,
            "mean_ess": float(np.mean(means)), "median_ess": float(np.median(np.concatenate(all_ess))),
            "ess_per_second": total / res.seconds if res.seconds > 0 else None,
            "ess_per_1k_grads": 1000.0 * total / res.grad_evals if res.grad_evals else None,
            "rhat_splits": splits, "frac_chainwise_rhat_below_1.1": float(np.mean(fracs))}


def _regression_curve(y, pred) -> dict:
    out = {"num_samples": [], "lppd": [], "rmse": []}
    for k in range(1, pred.shape[0] + 1):
        out["num_samples"].append(k)
        out["lppd"].append(regression_lppd(y, pred[:k, :, 0], pred[:k, :, 1]))
        out["rmse"].append(regression_rmse(y, pred[:k, :, 0]))
    return out


def _finite_or_none(metrics: dict) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}


def _entry(task, method: str, res: MethodResult, best_hp: dict, grid_scores: dict, cfg: EvalConfig,
           reference: np.ndarray | None) -> dict:
    _, y_test = split_data(task, "test")
    y_test = np.asarray(y_test)
    hp = dict(res.hyperparameters)
    hp.update(best_hp)
    tuned = cfg.tune and method in GRID_METHODS
    hp["tuned"] = tuned
    if tuned:
        hp["grid"] = grid_scores
        what = "NLL (−LPPD)" if is_regression(task) else "BMA NLL"
        hp["tuned_on"] = (f"{what}, first {min(cfg.tune_examples, int(split_data(task, 'inner_valid')[1].shape[0]))}"
                          " inner_valid examples")
    example_grads = _example_grads(task, res)
    entry = {
        "grad_evals": res.grad_evals,
        "gradient": _gradient_label(task, res),
        "epochs": example_grads / task.data_size,
        "budget": "own (full-batch)" if method in FULL_BATCH_METHODS else "shared G (minibatch)",
        "seconds": res.seconds,
        "num_samples": res.num_finite,
        "num_samples_requested": res.num_requested,
        "num_chains": res.num_chains,
        "divergent_chains": res.divergent_chains,
        "hyperparameters": hp,
    }
    reg = is_regression(task)
    if res.num_finite:
        if reg:
            pred = res.predictions
            entry.update(_finite_or_none(regression_metrics(y_test, pred[..., 0], pred[..., 1])))
            entry["curve"] = _regression_curve(y_test, pred)
        else:
            metrics = classification_metrics(res.samples_log_probs, y_test)
            entry.update(_finite_or_none(metrics))
            entry["curve"] = bma_curve(res.samples_log_probs, y_test)
    else:  # every sample diverged: nothing to average
        keys = ("lppd", "nll", "rmse", "calibration_error", "coverage") if reg else ("acc", "nll", "ece",
                                                                                      "pairwise_kld")
        entry.update({k: None for k in keys})
        entry["curve"] = None
    entry["ess"] = ess_entry(res)
    entry["barrier"] = barrier_entry(task, res, cfg)
    if reference is not None and not reg:
        if res.num_finite:
            probs = bma_probs(res.samples_log_probs)
            entry["agreement"] = agreement(probs, reference)
            entry["total_variation"] = total_variation(probs, reference)
        else:
            entry["agreement"] = entry["total_variation"] = None
    return entry


def run_task_method(task, task_key, method: str, cfg: EvalConfig, sampler: dict | None, bar=None,
                    reference: np.ndarray | None = None, cache: dict | None = None) -> dict:
    """Tune (optionally) and run one method on one task; return its report entry.

    reference: (n_test, C) reference predictive probabilities (classification); adds "agreement" and
    "total_variation".  cache: per-task dict shared by the methods of one task: {method: (MethodResult, best
    point, grid scores)} — the deep-ensemble run there is the warm start of mile / nuts_bde."""
    cache = {} if cache is None else cache
    if method == "l2e":
        extra = {"meta_params": sampler["meta_params"], "sampler": sampler["sampler"]}
    elif method in FULL_BATCH_METHODS:
        extra = _warm_start(task, task_key, cfg, cache, bar)
    else:
        extra = {}
    if method == "deep_ensemble" and method in cache:  # already run as a warm start (same keys, same result)
        res, best_hp, grid_scores = cache[method]
    else:
        res, best_hp, grid_scores = _tune_and_run(task, task_key, method, cfg, extra, bar)
    cache[method] = (res, best_hp, grid_scores)
    return _entry(task, method, res, best_hp, grid_scores, cfg, reference)


def hmc_entry(ref: dict, task) -> dict:
    """The reference's own method entry: classification acc / nll / ece of `probs`; regression LPPD / NLL / RMSE
    / calibration of the (S, n) `loc` / `scale` draws; cost from its metadata when available."""
    md = ref.get("metadata") or {}
    _, y = split_data(task, "test")
    y = np.asarray(y)
    grads = md.get("num_grad_evals")
    sampler = md.get("sampler") or {}
    keep = ("sampler", "num_divergent", "converged", "convergence_rule", "seed", "function_space")
    entry = {"source": ref["path"], "gradient": f"full-batch (N={task.data_size})", "budget": "reference (own)",
             "grad_evals": grads, "seconds": md.get("seconds"), "epochs": grads,
             "num_chains": sampler.get("chains"), "divergent_chains": 0,
             "hyperparameters": {k: md[k] for k in keep if k in md}, "curve": None, "ess": None, "barrier": None}
    if is_regression(task):
        loc, scale = np.asarray(ref["loc"]), np.asarray(ref["scale"])
        entry.update(_finite_or_none(regression_metrics(y, loc, scale)))
        entry["num_samples"] = entry["num_samples_requested"] = int(loc.shape[0])
    else:
        probs = np.asarray(ref["probs"])
        entry.update({"acc": accuracy(probs, y), "nll": nll(probs, y), "ece": ece(probs, y), "pairwise_kld": None})
        entry["num_samples"] = entry["num_samples_requested"] = sampler.get("total_draws")
    return entry


def mixture_interval(loc, scale, level: float = 0.95, iters: int = 60) -> tuple[np.ndarray, ...]:
    """(mean, lower, upper), each (n,), of the equal-weight Gaussian mixture of loc / scale (S, n): the mixture
    mean and its exact (1 − level)/2 and (1 + level)/2 quantiles (bisection on the mixture CDF)."""
    loc = np.asarray(loc, np.float64)
    scale = np.clip(np.asarray(scale, np.float64), 1e-6, 1e6)

    def quantile(p):
        a, b = (loc - 12 * scale).min(0), (loc + 12 * scale).max(0)
        for _ in range(iters):
            mid = 0.5 * (a + b)
            below = ndtr((mid[None] - loc) / scale).mean(0) < p
            a, b = np.where(below, mid, a), np.where(below, b, mid)
        return 0.5 * (a + b)

    return loc.mean(0), quantile((1 - level) / 2), quantile((1 + level) / 2)


def _band(task, cache: dict, ref: dict | None) -> dict | None:
    """The 1-D predictive band (BAND_NOTE) of every method that ran (and the reference), on sorted test inputs."""
    x_test, y_test = (np.asarray(a) for a in split_data(task, "test"))
    if x_test.ndim != 2 or x_test.shape[1] != 1:
        return None
    order = np.argsort(x_test[:, 0], kind="stable")
    x_tr, y_tr = (np.asarray(a) for a in split_data(task, "train"))
    out = {"note": BAND_NOTE, "x_train": x_tr[:, 0].tolist(), "y_train": y_tr.tolist(),
           "x": x_test[order, 0].tolist(), "y": y_test[order].tolist(), "methods": {}}
    draws = {m: (r.predictions[..., 0], r.predictions[..., 1]) for m, (r, _, _) in cache.items()
             if r.predictions is not None and r.num_finite}
    if ref is not None and "loc" in ref:
        draws["hmc"] = (np.asarray(ref["loc"]), np.asarray(ref["scale"]))
    for m, (loc, scale) in draws.items():
        mean, lo, hi = mixture_interval(loc[:, order], scale[:, order])
        out["methods"][m] = {"mean": mean.tolist(), "lower": lo.tolist(), "upper": hi.tolist()}
    return out


def _config_record(cfg: EvalConfig, sampler: dict | None) -> dict:
    record = cfg.to_dict()
    record["tasks"] = [dataclasses.asdict(t) | {"name": t.name, "kind": build(t).kind} for t in cfg.tasks]
    record["divergent_chains"] = DIVERGENCE_NOTE
    record["budgets"] = BUDGET_NOTE
    record["ess_estimator"] = ESS_ESTIMATOR
    record["thinning_used"] = cfg.sample_thinning
    record["csghmc_cycles_used"] = cfg.cycles
    record["seconds_measure"] = (
        "wall time of the final run's updates (all chunks / chains, sample transfer), after compilation "
        "(nuts_bde: includes compiling its first chain); excludes tuning runs and test-set prediction")
    if sampler is not None:
        record["sampler_checkpoint"] = sampler["path"]
        record["sampler_config"] = dataclasses.asdict(sampler["sampler"])
    return record


def _num_runs(cfg: EvalConfig) -> int:
    def runs(m):
        return (len(cfg.grid.points(m)) if cfg.tune and m in GRID_METHODS else 0) + 1

    total = sum(runs(m) for m in cfg.methods)
    if any(m in FULL_BATCH_METHODS for m in cfg.methods) and "deep_ensemble" not in cfg.methods:
        total += runs("deep_ensemble")
    return total


def evaluate(cfg: EvalConfig, out_dir=None, sampler_path=None, progress: bool = True, sampler: dict | None = None,
             references: dict | None = None) -> dict:
    """Run the evaluation described by `cfg`; write report.json / report.md / bma_curves.png into out_dir
    (if given).  `sampler` (from `load_l2e`) overrides `sampler_path`.  `references`: {task name (or None
    for the only task): path} (see evaluate.reference.load_references); every input is checked before
    anything is computed.  Returns the results dict (schema: module docstring and `_entry`)."""
    if "l2e" in cfg.methods and sampler is None:
        sampler = load_l2e(sampler_path)  # fail fast, before any compilation
    tasks = [build(spec) for spec in cfg.tasks]  # dataset errors surface here
    refs = load_references(references, cfg.task_names(), tasks)
    total = _num_runs(cfg) * len(tasks)
    results = {"config": _config_record(cfg, sampler if "l2e" in cfg.methods else None), "tasks": {}}
    root = jax.random.PRNGKey(cfg.seed)
    with tqdm(total=total, desc="evaluate", unit="run", disable=not progress, dynamic_ncols=True) as bar:
        for t, (name, task, held_out) in enumerate(zip(cfg.task_names(), tasks, cfg.held_out)):
            task_key = jax.random.fold_in(root, t)
            methods, cache = {}, {}
            ref = refs.get(name)
            probs = None if ref is None or is_regression(task) else ref["probs"]
            for method in cfg.methods:
                methods[method] = run_task_method(task, task_key, method, cfg, sampler, bar, probs, cache)
            if ref is not None:
                methods["hmc"] = hmc_entry(ref, task)
            reg = is_regression(task)
            data = {"train": task.data_size, "test": int(task.splits.test[1].shape[0])}
            if not reg:
                data["classes"] = task.num_classes
            entry = {"kind": task.kind, "held_out": held_out, "spec": dataclasses.asdict(task.spec), "data": data,
                     "methods": methods}
            if ref is not None:
                entry["reference"] = {k: ref.get(k) for k in ("path", "kind", "accuracy", "metadata")}
            if reg:
                band = _band(task, {m: cache[m] for m in cfg.methods if m in cache}, ref)
                if band is not None:
                    entry["band"] = band
            results["tasks"][name] = entry
    if out_dir is not None:
        paths = write_report(results, out_dir)
        results["paths"] = {k: str(v) for k, v in paths.items()}
    return results


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
