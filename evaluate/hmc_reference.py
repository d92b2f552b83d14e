"""The project's own HMC reference: full-batch NUTS on a task's posterior, test-set predictive, diagnostics, files.

`compute_reference(task, key, ...)` runs `num_chains` NUTS chains (`l2e.nuts.nuts_chains`: Stan-style window
adaptation, then NUTS with the adapted step size and diagonal mass matrix) on `task.log_density`, the
full-batch posterior with exactly the prior, N and likelihood of the SG samplers, at T = 1.

Keys: `k_init, k_nuts = split(key)`; chain c starts at `task.init_params(fold_in(k_init, c))` (init="init_params",
the network's own initialiser) or at a draw θ ~ N(0, σ² I) of the prior with key fold_in(k_init, c)
(init="prior"), or at a deep-ensemble member trained from the initialiser's draw (init="ensemble": full-batch
Adam, ENSEMBLE_STEPS); `nuts_chains(..., k_nuts)` folds the chain index into k_nuts itself.  The CLI uses
key = fold_in(PRNGKey(seed), t) with t the task's index in the configuration, so a task's reference does
not depend on which other tasks are selected.

Predictive on the test split (`task.predict` of every draw): classification — BMA probabilities (n, C), the mean
over all chains × draws of softmax(logits), per-chain BMA probabilities (chains, n, C) and the probabilities of at
most MAX_DRAWS draws (draw_probs.npz); regression — per-draw
loc and scale (S, n), S = chains × draws (chain-major), in the task's standardised target units.

Convergence (all in the metadata): function-space split R̂ (rank-normalised, across chains) per test point of
the per-draw probability of the BMA-predicted class (classification) or of the loc (regression);
weight-space bulk ESS and split R̂ per parameter; chainwise cR̂ (4 splits); per-chain NUTS statistics.
`converged` = function-space max split R̂ < 1.1 and no divergent transition (CONVERGENCE_RULE).
Dispersion (metadata "dispersion", read back by `tasks.reference.load_task_dir`): the
`evaluate.dispersion.dispersion_stats` of all draws (weight norm, pooled and within-chain pairwise distance over at
most 200 draws, predictive variance on the test split), the yardstick of every method's dispersion ratios.

Files: `tasks.reference.write_reference` (the format and its reader are there).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from evaluate.dispersion import dispersion_stats
from evaluate.metrics import agreement
from l2e import diagnostics
from tasks.likelihoods import categorical, gaussian
from tasks.reference import INDEX, data_fingerprint

__all__ = ["CONVERGENCE_RULE", "INITS", "check_reference_output", "compute_reference", "summary_line"]

INITS = ("init_params", "prior", "ensemble")
MAX_DRAWS = 400
"""Classification: at most this many draws (evenly spaced within each chain) keep their test probabilities
(draw_probs.npz), for the K-draw floor and sample-level distances of the budget curves."""
ENSEMBLE_STEPS, ENSEMBLE_LR = 2000, 1e-2
"""init="ensemble": each chain starts at a deep-ensemble member, full-batch Adam (this learning rate) for this many
steps on the log posterior from the network initialiser's draw."""
CONVERGENCE_RULE = "function-space max split R-hat < 1.1 and no divergent transitions"
FOREIGN_MARKERS = ("report.json", "config.json", "log.jsonl", "checkpoints")
"""Files of an evaluation report or a meta-training run: never written into."""


def _json_float(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _rhat_summary(rhat: np.ndarray) -> dict:
    """Max / median / fractions below 1.1 and 1.01 of R̂ values; NaN (a constant quantity: every draw of
    every chain equal, e.g. a saturated probability) counts as 1."""
    r = np.where(np.isnan(rhat), 1.0, np.asarray(rhat, np.float64)).ravel()
    return {"max": _json_float(r.max()), "median": _json_float(np.median(r)),
            "frac_below_1.1": float(np.mean(r < 1.1)), "frac_below_1.01": float(np.mean(r < 1.01)),
            "num_constant": int(np.isnan(rhat).sum())}


def _init_positions(task, key: jax.Array, num_chains: int, init: str):
    """Initial params pytree with a leading chain axis (see the module docstring)."""
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    inits = [task.init_params(jax.random.fold_in(key, c)) for c in range(num_chains)]
    if init == "prior":
        sd = math.sqrt(task.spec.prior_variance)

        def draw(p, k):
            leaves, tree = jax.tree.flatten(p)
            ks = jax.random.split(k, len(leaves))
            return jax.tree.unflatten(tree, [sd * jax.random.normal(kk, x.shape, x.dtype) for kk, x in zip(ks, leaves)])

        inits = [draw(p, jax.random.fold_in(key, c)) for c, p in enumerate(inits)]
    if init == "ensemble":
        inits = [_map_estimate(task, p) for p in inits]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *inits)


def _map_estimate(task, params):
    """A deep-ensemble member: ENSEMBLE_STEPS of full-batch Adam on −log p(θ | D) from `params`."""
    import optax

    opt = optax.adam(ENSEMBLE_LR)
    loss = lambda p: -task.log_density(p) / task.data_size  # noqa: E731  (per-example scale: Adam's step is θ units)

    @jax.jit
    def fit(p):
        def body(carry, _):
            p, s = carry
            u, s = opt.update(jax.grad(loss)(p), s)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (p, opt.init(p)), None, length=ENSEMBLE_STEPS)[0][0]

    return fit(params)


def _predict(task, samples, num_chains: int) -> np.ndarray:
    """`task.predict` of every draw on the test split: (chains, draws, n, C) log-probabilities or
    (chains, draws, n, 2) [loc, scale]."""
    x, _ = task.splits.test
    fn = jax.jit(task.predict)
    return np.stack([np.asarray(fn(jax.tree.map(lambda a, c=c: a[c], samples), x)) for c in range(num_chains)])


def _flat_draws(samples) -> np.ndarray:
    """(chains, draws, d) float64 of a params pytree with leading (chains, draws) axes."""
    leaves = jax.tree.leaves(samples)
    m, n = leaves[0].shape[:2]
    return np.concatenate([np.asarray(x, np.float64).reshape(m, n, -1) for x in leaves], axis=2)


def _weight_diagnostics(flat: np.ndarray) -> dict:
    """Bulk ESS, split R̂ (across chains) and chainwise cR̂ (4 splits, mean over chains) per parameter."""
    m, n, d = flat.shape
    ess = diagnostics.ess_bulk(flat)
    ess = np.where(np.isfinite(ess), ess, 0.0)
    out = {"num_params": int(d), "ess_bulk_min": float(ess.min()), "ess_bulk_median": float(np.median(ess)),
           "ess_bulk_mean": float(ess.mean()), "split_rhat": _rhat_summary(diagnostics.split_rhat(flat))}
    if n >= 8:
        crhat = [diagnostics.chainwise_rhat(flat[c], 4) for c in range(m)]
        out["chainwise_rhat_frac_below_1.1"] = float(np.mean([np.mean(np.where(np.isnan(r), 1.0, r) < 1.1)
                                                              for r in crhat]))
    return out


def _dispersion(flat: np.ndarray, preds: np.ndarray, kind: str) -> dict | None:
    """`evaluate.dispersion.dispersion_stats` of all draws (chains pooled; chain ids for the within-chain pairs)
    on the test predictions; None if a draw is not finite."""
    m, s = flat.shape[:2]
    if not (np.all(np.isfinite(flat)) and np.all(np.isfinite(preds))):
        return None
    stats = dispersion_stats(flat.reshape(m * s, -1), preds.reshape(m * s, *preds.shape[2:]), kind,
                             np.repeat(np.arange(m), s))
    stats["split"] = "test"
    return stats


class _ClassSummary:
    """Classification draws: BMA and per-chain probabilities, R̂ of the BMA class's probability, acc / nll / ece."""

    @staticmethod
    def summarise(lp: np.ndarray, y: np.ndarray, keep_draws: int = MAX_DRAWS, keep_rows: int | None = None) -> dict:
        """Reference arrays, function-space R̂ and test metrics of log-probabilities lp (m, s, n, C); at most
        keep_draws draws (evenly spaced within each chain) keep their probabilities, on at most keep_rows test
        points (evenly spaced; None: all)."""
        m, s, n, c = lp.shape
        probs = categorical.bma_probs(lp.reshape(m * s, n, c))
        chain_probs = np.stack([categorical.bma_probs(lp[i]) for i in range(m)])
        pred_class = probs.argmax(1)
        p_pred = np.exp(np.take_along_axis(lp, pred_class[None, None, :, None], axis=3)[..., 0])  # (m, s, n)
        fs = {"quantity": "per-draw probability of the BMA-predicted class, per test point",
              "split_rhat": _rhat_summary(diagnostics.split_rhat(p_pred)),
              "chain_accuracy": [categorical.accuracy(p, y) for p in chain_probs],
              "chain_agreement_min": float(min(agreement(p, probs) for p in chain_probs))}
        test = {"accuracy": categorical.accuracy(probs, y), "nll": categorical.nll(probs, y),
                "ece": categorical.ece(probs, y)}
        # per chain, evenly spaced
        keep = np.unique(np.linspace(0, s - 1, min(s, max(1, keep_draws // m))).round().astype(int))
        rows = np.arange(n) if keep_rows is None or keep_rows >= n else np.unique(
            np.linspace(0, n - 1, keep_rows).round().astype(int))
        draws = np.exp(lp[:, keep][:, :, rows]).reshape(m * keep.size, rows.size, c)
        arrays = {"probs": probs, "chain_probs": chain_probs, "draw_probs": draws,
                  "draw_chain": np.repeat(np.arange(m), keep.size)}
        if rows.size < n:
            arrays["draw_rows"] = rows
        return {"arrays": arrays, "function_space": fs, "test": test}

    @staticmethod
    def score(test: dict) -> str:
        return f"acc {test['accuracy']:.4f} nll {test['nll']:.4f}"


class _GaussianSummary:
    """Regression draws: per-draw loc / scale, R̂ of both, LPPD / RMSE of the pooled mixture."""

    @staticmethod
    def summarise(out: np.ndarray, y: np.ndarray, keep_draws: int = MAX_DRAWS, keep_rows: int | None = None) -> dict:
        """Reference arrays, function-space R̂ and test metrics of [loc, scale] draws out (m, s, n, 2)."""
        loc, scale = out[..., 0], out[..., 1]  # (m, s, n)
        m, s, n = loc.shape
        arrays = {"loc": loc.reshape(m * s, n).astype(np.float32),
                  "scale": scale.reshape(m * s, n).astype(np.float32)}
        fs = {"quantity": "per-draw predictive loc, per test point",
              "split_rhat": _rhat_summary(diagnostics.split_rhat(loc)),
              "split_rhat_scale": _rhat_summary(diagnostics.split_rhat(scale))}
        lppd = gaussian.regression_lppd(y, arrays["loc"], arrays["scale"])
        test = {"lppd": lppd, "nll": -lppd, "rmse": gaussian.regression_rmse(y, arrays["loc"]),
                "units": "standardised target (MILE convention)"}
        return {"arrays": arrays, "function_space": fs, "test": test}

    @staticmethod
    def score(test: dict) -> str:
        return f"lppd {test['lppd']:.4f} rmse {test['rmse']:.4f}"


_SUMMARIES = {"classification": _ClassSummary, "regression": _GaussianSummary}
"""The summary of a reference's draws by the task's likelihood kind (its files: tasks.reference.FORMATS)."""


def compute_reference(task, key: jax.Array, num_chains: int = 4, num_warmup: int = 200, num_samples: int = 100,
                      thinning: int = 1, init: str = "init_params", target_acceptance_rate: float = 0.8,
                      max_num_doublings: int = 10, name: str | None = None, seed: int | None = None,
                      progress: Callable | None = None, keep_draws: int = MAX_DRAWS,
                      keep_rows: int | None = None) -> tuple[dict, dict]:
    """Full-batch NUTS reference of `task` (see the module docstring).

    num_warmup: window-adaptation transitions per chain; num_samples draws per chain kept `thinning`
    transitions apart; progress: optional callable(chain, draw) after each kept draw; keep_draws: classification,
    at most this many draws keep their test probabilities (draw_probs.npz; regression keeps every draw), on at most
    keep_rows test points (evenly spaced, their indices stored; None: every point).
    Returns (arrays, metadata): arrays holds "probs" (n, C) float64 and "chain_probs" (chains, n, C)
    (classification) or "loc", "scale" (S, n) float32 (regression); metadata is JSON-serialisable.
    """
    if num_chains < 1 or num_samples < 4 or num_warmup < 0 or thinning < 1:
        raise ValueError(f"need chains ≥ 1, samples ≥ 4, warmup ≥ 0, thinning ≥ 1; got {num_chains}, "
                         f"{num_samples}, {num_warmup}, {thinning}")
    k_init, k_nuts = jax.random.split(key)
    init_positions = _init_positions(task, k_init, num_chains, init)
    t0 = time.perf_counter()
    samples, info = nuts_chains_fn()(task.log_density, init_positions, k_nuts, num_warmup, num_samples, thinning,
                                     target_acceptance_rate=target_acceptance_rate,
                                     max_num_doublings=max_num_doublings, progress=progress)
    sampling_seconds = time.perf_counter() - t0
    flat = _flat_draws(samples)
    y = np.asarray(task.splits.test[1])
    preds = _predict(task, samples, num_chains)
    summary = _SUMMARIES[task.kind].summarise(preds, y, keep_draws, keep_rows)
    summary["dispersion"] = _dispersion(flat, preds, task.kind)
    sampler = {"algorithm": "NUTS (blackjax) after Stan window adaptation, diagonal mass matrix, full batch",
               "chains": int(num_chains), "warmup": int(num_warmup), "samples_per_chain": int(num_samples),
               "thinning": int(thinning), "total_draws": int(num_chains * num_samples), "init": init,
               "target_acceptance_rate": float(target_acceptance_rate), "max_num_doublings": int(max_num_doublings)}
    metadata = _metadata(task, name, seed, sampler, info, flat, summary, sampling_seconds)
    return summary["arrays"], metadata


def _metadata(task, name, seed, sampler: dict, info, flat: np.ndarray, summary: dict, seconds: float) -> dict:
    """The JSON metadata of a reference: task, sampler, per-chain NUTS statistics, diagnostics, convergence."""
    import blackjax

    finite = bool(np.all(np.isfinite(flat)))
    weight = _weight_diagnostics(flat) if finite else {"num_params": int(flat.shape[2]), "non_finite": True}
    divergent = int(info.num_divergent.sum())
    fs_max = summary["function_space"]["split_rhat"]["max"]
    spec = task.spec
    data = {"train": int(task.data_size), "test": int(task.splits.test[1].shape[0]),
            "input_shape": list(task.input_shape), **data_fingerprint(task)}
    return {
        "task": name or spec.name, "kind": task.kind, "spec": json.loads(json.dumps(dataclasses.asdict(spec))),
        "prior_variance": float(spec.prior_variance), "temperature": 1.0, "data": data, "sampler": sampler,
        "seed": seed,
        "per_chain": {"step_size": info.step_size.tolist(), "acceptance_rate": info.acceptance_rate.tolist(),
                      "num_divergent": info.num_divergent.tolist(), "num_grad_evals": info.num_grad_evals.tolist(),
                      "seconds": info.seconds.tolist()},
        "num_divergent": divergent, "num_grad_evals": int(info.num_grad_evals.sum()), "seconds": float(seconds),
        "finite": finite, "function_space": summary["function_space"], "weight_space": weight,
        "test": summary["test"], "dispersion": summary["dispersion"],
        "converged": bool(finite and fs_max is not None and fs_max < 1.1 and divergent == 0),
        "convergence_rule": CONVERGENCE_RULE,
        "versions": {"jax": jax.__version__, "blackjax": getattr(blackjax, "__version__", "unknown"),
                     "numpy": np.__version__},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def nuts_chains_fn():
    """`l2e.nuts.nuts_chains` (imported lazily: blackjax is slow to import)."""
    from l2e.nuts import nuts_chains

    return nuts_chains


def summary_line(metadata: dict) -> str:
    """One line: task, function-space R̂, weight-space ESS, test metric, divergences, seconds, converged."""
    fs, ws, t = metadata["function_space"]["split_rhat"], metadata["weight_space"], metadata["test"]
    score = _SUMMARIES[metadata["kind"]].score(t)
    rhat = "nan" if fs["max"] is None else f"{fs['max']:.3f}"
    ess = f"{ws['ess_bulk_min']:.0f}/{ws['ess_bulk_median']:.0f}" if "ess_bulk_min" in ws else "—"
    return (f"{metadata['task']}: fn-space R-hat max {rhat} (<1.1: {fs['frac_below_1.1']:.3f}), "
            f"weight ESS min/median {ess}, {score}, divergent {metadata['num_divergent']}, "
            f"{metadata['seconds']:.0f} s, converged {'yes' if metadata['converged'] else 'NO'}")


# --------------------------------------------------------------------------- files


def check_reference_output(out: Path, overwrite: bool, error=ValueError) -> None:
    """Refuse an output that is not a directory, holds a reference (unless overwrite), holds a reference we did not
    write (no reference marker, cli.outputs) or whose index is damaged (on --overwrite: rewriting it would drop the
    other tasks' entries), holds anything else (a report, a meta-training run, other files), or cannot be written;
    probe writability now."""
    from cli import read_marker, require_ours
    from cli.outputs import KINDS, check_ours
    from tasks.reference import read_index

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise error(f"--output {out} exists and is not a directory")
    if out.is_dir():
        foreign = [m for m in FOREIGN_MARKERS if (out / m).exists()]
        kind = read_marker(out)
        if foreign or (kind in KINDS and kind != "reference"):
            raise error(f"--output {out} holds an evaluation report or a meta-training run "
                        f"({', '.join(foreign) or KINDS[kind]}); choose another --output")
        if (out / INDEX).exists():
            if not overwrite:
                raise error(f"{out / INDEX} exists; pass --overwrite or choose another --output")
            require_ours(out, "reference", error, "add to or replace its references")
            read_index(out)  # a damaged index is an error now, never an empty one after the computation
        else:  # any entry, hidden or not, without the marker: not ours (cli.outputs.check_ours)
            check_ours(out, "reference", error, "write references into it",
                       unmarked=f"is a non-empty directory without {INDEX}")
    from evaluate.report import probe_writable

    probe_writable(out, error)
