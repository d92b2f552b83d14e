"""The report entry of one method on one task (`method_entry`), its ESS / R̂ summary (`ess_entry`) and loss
barrier (`barrier_entry`), the reference posterior's own row (`hmc_entry`) and the 1-D predictive band."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from evaluate import budget
from evaluate.methods import MethodResult, get_method, predict_outputs, split_data
from evaluate.metrics import agreement, total_variation
from l2e.diagnostics import chainwise_rhat, ess_single_chain
from tasks.likelihoods.categorical import accuracy, bma_probs, ece, nll
from tasks.likelihoods.gaussian import BAND_NOTE, mixture_interval

__all__ = ["BAND_NOTE", "ESS_ESTIMATOR", "FS_ESS_FUNCTION", "band", "barrier_entry", "cost_entries", "ess_entry", "hmc_entry",
           "method_entry", "mixture_interval", "temperature_entries"]

ESS_ESTIMATOR = ("Geyer single-chain ESS (FFT autocovariance, initial monotone sequence; "
                 "l2e.diagnostics.ess_single_chain) of every parameter coordinate over each non-divergent "
                 "chain's draws; mean_ess / median_ess: mean / median over coordinates and chains; ess_per_second "
                 "and ess_per_1k_grads: sum over chains of the per-chain mean ESS per second of the method's "
                 "'seconds' and per 1000 of its 'grad_evals'; fs_*: the same in function space, over the test "
                 "points' pointwise functions (FS_ESS_FUNCTION) instead of parameter coordinates")
FS_ESS_FUNCTION = ("classification: the log predictive probability of the true label, log p(y_i | x_i, θ_s); "
                   "regression: the predicted mean loc(x_i; θ_s) (standardised units); one function per test point")


def _finite_or_none(metrics: dict) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}


def pointwise_functions(task, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(K, n) float64: FS_ESS_FUNCTION of each kept sample's outputs (K, n, ...) at the n test points
    (`task.likelihood.pointwise_function`)."""
    return task.likelihood.pointwise_function(outputs, y)


def ess_entry(res: MethodResult, functions: np.ndarray | None = None) -> dict | None:
    """ESS / chainwise-R̂ summary of the parameter draws (ESS_ESTIMATOR); None for ensembles (one draw per
    member), fewer than 4 draws per chain, or no complete (non-divergent) chain.  cR̂ uses 2 sub-chains when a
    chain has ≤ 10 draws, else 4 (docs/evaluation.md, ESS and R̂); NaN cR̂ counts as ≥ 1.1.  With `functions` ((K, n), aligned with
    the kept samples: `pointwise_functions`) also the function-space ESS: "fs_mean_ess", "fs_median_ess",
    "fs_ess_per_second", "fs_ess_per_1k_grads" and "fs_function" (what was measured)."""
    draws = int(res.draws_per_chain)
    if res.samples is None or draws < 4 or res.num_finite == 0:
        return None
    ids = np.asarray(res.chain_ids)
    chains = [int(c) for c in np.unique(ids) if np.sum(ids == c) == draws]
    if not chains:
        return None
    leaves = [np.asarray(a) for a in jax.tree.leaves(res.samples)]
    splits = 2 if draws <= 10 else 4
    means, all_ess, fracs, fs_means, fs_all = [], [], [], [], []
    for c in chains:
        sel = ids == c
        x = np.concatenate([a[sel].reshape(draws, -1) for a in leaves], axis=1).astype(np.float64)
        e = ess_single_chain(x)
        means.append(float(np.mean(e)))
        all_ess.append(e)
        with np.errstate(invalid="ignore"):
            fracs.append(float(np.mean(chainwise_rhat(x, num_splits=splits) < 1.1)))
        if functions is not None:
            f = ess_single_chain(np.asarray(functions)[sel].astype(np.float64))
            fs_means.append(float(np.mean(f)))
            fs_all.append(f)
    out = {"estimator": ESS_ESTIMATOR, "chains": len(chains), "draws_per_chain": draws,
           "mean_ess": float(np.mean(means)), "median_ess": float(np.median(np.concatenate(all_ess))),
           **_per_cost(float(np.sum(means)), res, ""),
           "rhat_splits": splits, "frac_chainwise_rhat_below_1.1": float(np.mean(fracs))}
    if functions is not None:
        out.update({"fs_function": FS_ESS_FUNCTION, "fs_mean_ess": float(np.mean(fs_means)),
                    "fs_median_ess": float(np.median(np.concatenate(fs_all))),
                    **_per_cost(float(np.sum(fs_means)), res, "fs_")})
    return out


def _per_cost(total: float, res: MethodResult, prefix: str) -> dict:
    return {f"{prefix}ess_per_second": total / res.seconds if res.seconds > 0 else None,
            f"{prefix}ess_per_1k_grads": 1000.0 * total / res.grad_evals if res.grad_evals else None}


def _barrier_pair(res: MethodResult) -> tuple[int, int, str]:
    """First and last sample of the first chain with ≥ 2 samples, else the first samples of two chains."""
    ids = np.asarray(res.chain_ids)
    per_chain = {c: np.flatnonzero(ids == c) for c in np.unique(ids)}
    multi = [c for c, idx in per_chain.items() if len(idx) >= 2]
    if multi:
        c = multi[0]
        return int(per_chain[c][0]), int(per_chain[c][-1]), f"first and last sample of chain {c}"
    (ca, ia), (cb, ib) = list(per_chain.items())[:2]
    return int(ia[0]), int(ib[0]), f"members {ca} and {cb}"


def barrier_entry(task, res: MethodResult, cfg, cache, num_points: int = 21) -> dict | None:
    """docs/evaluation.md, Loss barrier on one individual network (not the BMA) along θ(λ) = (1 − λ)θ_a + λθ_b, λ on `num_points`
    points: `task.error_and_nll` (test error or RMSE, mean NLL) on the first cfg.barrier_examples test
    examples; the pair from `_barrier_pair`.  None if fewer than 2 finite samples."""
    if res.samples is None or res.num_finite < 2:
        return None
    ia, ib, pair = _barrier_pair(res)
    lams = np.linspace(0.0, 1.0, num_points)
    t = jnp.asarray(lams, jnp.float32)
    path = jax.tree.map(lambda a: (1 - t).reshape((-1,) + (1,) * (a.ndim - 1)) * a[ia]
                        + t.reshape((-1,) + (1,) * (a.ndim - 1)) * a[ib], res.samples)
    x, y = split_data(task, "test")
    m = min(int(cfg.barrier_examples), int(x.shape[0]))
    out = predict_outputs(task, path, x[:m], cfg.eval_batch, cache).astype(np.float64)
    err, nll_ = task.error_and_nll(out, np.asarray(y[:m]))

    def barrier(losses):
        b = float(np.max(losses - ((1 - lams) * losses[0] + lams * losses[-1])))
        return b if math.isfinite(b) else None

    clean = lambda a: [float(v) if math.isfinite(v) else None for v in a]  # noqa: E731
    return {"lambdas": lams.tolist(), "error": clean(err), "nll": clean(nll_), "error_barrier": barrier(err),
            "nll_barrier": barrier(nll_), "pair": pair, "error_metric": task.likelihood.error_metric, "test_examples": m}


def _hyperparameters(task, method: str, res: MethodResult, best_hp: dict, grid_scores: dict, cfg,
                     extended: list | None = None, kinetic_rejected: list | None = None) -> dict:
    hp = dict(res.hyperparameters)
    hp.update(best_hp)
    tuned = cfg.tune and get_method(method).tuned
    hp["tuned"] = tuned
    if tuned:
        hp["grid"] = grid_scores
        n = min(cfg.tune_examples, int(split_data(task, "inner_valid")[1].shape[0]))
        hp["tuned_on"] = f"{task.likelihood.score_name}, first {n} inner_valid examples"
        if cfg.extend_grid or cfg.failure_extensions:
            hp["grid_extended"] = list(extended or [])
        if cfg.kinetic_tolerance is not None and get_method(method).kinetic_check:
            hp["kinetic_rejected"] = list(kinetic_rejected or [])
    return hp


def temperature_entries(method: str, res: MethodResult) -> dict:
    """"temperature": the T the method ran at (its record's, else Method.temperature); "t_kin": the mean over
    non-divergent chains of the kinetic temperature (None if no chain has one), "t_kin_per_chain": every chain's
    (None for a divergent chain or a non-finite value; the list None for methods whose update has no kinetic term),
    "t_kin_left_out": how many chains the mean leaves out (None without a kinetic term)."""
    per_chain = res.t_kin
    finite = [v for v in (per_chain or []) if v is not None]
    return {"temperature": res.hyperparameters.get("temperature", get_method(method).temperature),
            "t_kin": float(np.mean(finite)) if finite else None, "t_kin_per_chain": per_chain,
            "t_kin_left_out": None if per_chain is None else len(per_chain) - len(finite)}


def cost_entries(method: str, res: MethodResult, tuning: dict | None, time_budget: dict | None) -> dict:
    """FLOPs and wall seconds per update (minibatch methods: seconds / updates of the final run), the cost of
    the tuning runs ({"runs", "grad_evals", "seconds"}) and the wall-time budget record (budget="seconds")."""
    minibatch = not get_method(method).full_batch
    out = {"flops_per_step": res.flops_per_step,
           "seconds_per_step": res.seconds / res.grad_evals if minibatch and res.grad_evals else None}
    if tuning is not None:
        out["tuning"] = tuning
    if time_budget is not None:
        out["time_budget"] = time_budget
    return out


def method_entry(task, method: str, res: MethodResult, best_hp: dict, grid_scores: dict, cfg, cache,
                 reference: np.ndarray | None, tuning=None, time_budget: dict | None = None) -> dict:
    """The report entry of one method's final run: budget, hyperparameters, `task.metrics` and `task.curve` of
    the kept samples on the test split, ESS, loss barrier, temperature and T_kin (`temperature_entries`), cost
    (`cost_entries`; tuning: an evaluate.tuning.Tuning); with `reference` ((n, C) probabilities) agreement
    and total variation of the BMA."""
    y_test = np.asarray(split_data(task, "test")[1])
    full_batch = get_method(method).full_batch
    entry = {
        "grad_evals": res.grad_evals,
        "gradient": budget.gradient_label(res, task.data_size),
        "epochs": budget.epochs(res, task.data_size),
        "budget": "own (full-batch)" if full_batch else (
            "shared wall time (minibatch)" if time_budget is not None else "shared G (minibatch)"),
        "seconds": res.seconds,
        "num_samples": res.num_finite,
        "num_samples_requested": res.num_requested,
        "num_chains": res.num_chains,
        "divergent_chains": res.divergent_chains,
        "scale_divergent_chains": res.scale_divergent_chains,
        "hyperparameters": _hyperparameters(task, method, res, best_hp, grid_scores, cfg,
                                            None if tuning is None else tuning.extended,
                                            None if tuning is None else tuning.kinetic_rejected),
        **temperature_entries(method, res),
        **cost_entries(method, res, None if tuning is None else tuning.cost(), time_budget),
    }
    if res.num_finite:
        entry.update(_finite_or_none(task.metrics(res.outputs, y_test)))
        entry["curve"] = task.curve(res.outputs, y_test)
    else:  # every sample diverged: nothing to average
        entry.update({k: None for k in task.metric_keys})
        entry["curve"] = None
    entry["ess"] = ess_entry(res, pointwise_functions(task, res.outputs, y_test) if res.num_finite else None)
    entry["barrier"] = barrier_entry(task, res, cfg, cache)
    if reference is not None:
        probs = bma_probs(res.outputs) if res.num_finite else None
        entry["agreement"] = None if probs is None else agreement(probs, reference)
        entry["total_variation"] = None if probs is None else total_variation(probs, reference)
    return entry


def hmc_entry(ref: dict, task) -> dict:
    """The reference's own method entry: acc / nll / ece of its (n, C) `probs`, or `task.metrics` of its (S, n)
    `loc` / `scale` draws; cost from its metadata when available."""
    md = ref.get("metadata") or {}
    y = np.asarray(split_data(task, "test")[1])
    grads = md.get("num_grad_evals")
    sampler = md.get("sampler") or {}
    keep = ("sampler", "num_divergent", "converged", "convergence_rule", "seed", "function_space")
    entry = {"source": ref["path"], "gradient": f"full-batch (N={task.data_size})", "budget": "reference (own)",
             "temperature": 1.0,
             "grad_evals": grads, "seconds": md.get("seconds"), "epochs": grads,
             "num_chains": sampler.get("chains"), "divergent_chains": 0,
             "hyperparameters": {k: md[k] for k in keep if k in md}, "curve": None, "ess": None, "barrier": None}
    if "probs" in ref:  # a predictive only (text file or probs.txt)
        probs = np.asarray(ref["probs"])
        entry.update({"acc": accuracy(probs, y), "nll": nll(probs, y), "ece": ece(probs, y), "pairwise_kld": None})
        entry["num_samples"] = entry["num_samples_requested"] = sampler.get("total_draws")
    else:  # per-draw Gaussian predictives
        outputs = np.stack([np.asarray(ref["loc"]), np.asarray(ref["scale"])], axis=-1)
        entry.update(_finite_or_none(task.metrics(outputs, y)))
        entry["num_samples"] = entry["num_samples_requested"] = int(outputs.shape[0])
    return entry


def band(task, results: dict, ref: dict | None) -> dict | None:
    """The 1-D predictive band (`task.likelihood.band_note`, `task.likelihood.interval`) of every method's final
    run in `results` ({method: MethodResult}) and of the reference, on the sorted test inputs; None unless the
    likelihood has a predictive interval and the inputs are 1-D."""
    x_test, y_test = (np.asarray(a) for a in split_data(task, "test"))
    note = task.likelihood.band_note
    if note is None or x_test.ndim != 2 or x_test.shape[1] != 1:
        return None  # the band is a predictive interval over a 1-D input
    order = np.argsort(x_test[:, 0], kind="stable")
    x_tr, y_tr = (np.asarray(a) for a in split_data(task, "train"))
    out = {"note": note, "x_train": x_tr[:, 0].tolist(), "y_train": y_tr.tolist(),
           "x": x_test[order, 0].tolist(), "y": y_test[order].tolist(), "methods": {}}
    draws = {m: r.outputs for m, r in results.items() if r.num_finite}
    if ref is not None and "loc" in ref:
        draws["hmc"] = np.stack([np.asarray(ref["loc"]), np.asarray(ref["scale"])], axis=-1)
    for m, outputs in draws.items():
        mean, lo, hi = task.likelihood.interval(outputs[:, order])
        out["methods"][m] = {"mean": mean.tolist(), "lower": lo.tolist(), "upper": hi.tolist()}
    return out
