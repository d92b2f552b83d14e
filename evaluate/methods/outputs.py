"""`MethodResult` and what turns a run's samples into one: prediction on a split, divergence filtering.

Divergence (the rule of DIVERGENCE_RULE, stated in README's evaluation section): a sample is divergent when
  * it or its prediction is not finite, or
  * its prediction scale is more than SCALE_RATIO (100) times m, m the median prediction scale of the finite
    samples of the *other* chains (ensemble members) of the run clipped to [1, SCALE_RATIO]; m = 1 when the run has
    one chain (a chain is not judged against itself: a chain whose every sample blew up would pass), and the clip
    at SCALE_RATIO makes 10⁴ an absolute ceiling (an ensemble whose members all blew up is not its own yardstick).  Prediction scale: the RMS over the split of the centred logits (log-probabilities minus
    their per-example mean; classification) or of (loc, scale) (regression, standardised target units), so a
    member whose predictions grew to 10⁴× the target's scale while staying finite is caught, or
  * its parameter scale (RMS over every coordinate) is more than SCALE_RATIO times m', m' the median parameter scale
    of the other chains' finite samples clipped to [s, SCALE_RATIO · s], s = max(1, prior standard deviation): a
    chain whose weights blew up while its predictions stayed moderate (saturated units, a rescaling symmetry
    between layers) is caught; a posterior draw lies within a few prior standard deviations of zero, so 100 × s
    is far outside any.
A divergent sample is dropped (never averaged into the BMA or any metric); a chain with one is counted in
`divergent_chains` (those judged by scale alone also in `scale_divergent_chains`); its other samples are kept, but its
per-chain statistics (T_kin) are not: they become None, and the report counts them as left out. A chain judged by
the prediction or parameter scale alone (finite throughout) is also counted in `scale_divergent_chains`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DIVERGENCE_RULE", "MethodResult", "SCALE_RATIO", "finalise", "finite_samples", "merge_chains",
           "predict_outputs",
           "parameter_scale", "probe_result", "scale_divergent", "split_data"]

SCALE_RATIO = 100.0
DIVERGENCE_RULE = (f"a sample is divergent when it or its prediction is not finite, or when its prediction scale (RMS "
                   f"of the centred logits; regression: of loc and scale, standardised units) exceeds {SCALE_RATIO:g} × "
                   f"the median scale of the other chains' finite samples clipped to [1, {SCALE_RATIO:g}] (1 with one chain), or "
                   f"when its parameter RMS exceeds {SCALE_RATIO:g} × the other chains' median parameter RMS clipped to "
                   f"[s, {SCALE_RATIO:g} s], s = max(1, prior standard deviation)")


@dataclasses.dataclass
class MethodResult:
    """Output of one run on one split; only the **finite** samples are kept (collection order).

    outputs: (K, n, C) float32 log-softmax (classification) or (K, n, 2) [loc, scale] (regression, standardised
      target units) of the kept samples (`task.predict`).
    grad_evals: gradient evaluations done (minibatch ones, or full-batch ones when gradient == "full-batch");
    seconds: wall time of the chain(s), compilation excluded unless hyperparameters say otherwise;
    divergent_chains: chains / members with a divergent sample (module docstring); scale_divergent_chains: those
      of them judged by prediction scale alone; num_requested: samples asked for.
    samples: the kept parameter samples, a pytree of numpy leaves (K, ...); chain_ids (K,) int: the chain
      (ensemble member) of each; num_chains: chains run; draws_per_chain: samples requested per chain.
    gradient: "minibatch" or "full-batch"; batch_size: B of a minibatch method (None for full batch).
    t_kin: kinetic temperature per chain / member over its sampling window (driver.kinetic_temperature; None
      per chain whose value is not finite), or None for a method whose steps report no kinetic term.
    flops_per_step: XLA's cost-analysis FLOPs of one compiled update on one minibatch (evaluate.budget.step_flops),
      None where not measured (full-batch methods) or unavailable.
    measured_seconds_per_step: a probe run's measured wall seconds per update (Run.probe), else None.
    """

    outputs: np.ndarray
    grad_evals: int
    seconds: float
    divergent_chains: int
    hyperparameters: dict
    scale_divergent_chains: int = 0
    num_requested: int = 0
    samples: Any = None
    chain_ids: np.ndarray | None = None
    num_chains: int = 1
    draws_per_chain: int = 0
    gradient: str = "minibatch"
    batch_size: int | None = None
    t_kin: list | None = None
    flops_per_step: float | None = None
    measured_seconds_per_step: float | None = None

    @property
    def num_finite(self) -> int:
        return int(self.outputs.shape[0])


def split_data(task, split) -> tuple[jax.Array, jax.Array]:
    """(x, y) of a named split of the task (train / inner_valid / outer_valid / test) or the given tuple."""
    if isinstance(split, str):
        if split not in ("train", "inner_valid", "outer_valid", "test"):
            raise ValueError(f"unknown split {split!r}")
        return getattr(task.splits, split)
    return split


def _predict_fn(task, cache):
    """jit(task.predict): (K-stacked params, x (B, ...)) -> (K, B, C) or (K, B, 2), one per task spec."""
    return cache.get(("predict", task.spec), lambda: jax.jit(task.predict))


def predict_outputs(task, samples, x, batch: int, cache) -> np.ndarray:
    """`task.predict` of K stacked parameter samples on inputs x, in batches padded to `batch` rows (one
    compilation per task): (K, n, C) log-probabilities or (K, n, 2) [loc, scale]."""
    fn = _predict_fn(task, cache)
    n = int(x.shape[0])
    out = []
    for start in range(0, n, batch):
        xb = x[start:start + batch]
        m = int(xb.shape[0])
        if m < batch:
            xb = jnp.concatenate([xb, jnp.zeros((batch - m, *xb.shape[1:]), xb.dtype)])
        out.append(np.asarray(fn(samples, xb))[:, :m])
    return np.concatenate(out, axis=1)


def finite_samples(tree) -> np.ndarray:
    """(K,) bool: every leaf of sample k (leading axis) is finite."""
    leaves = jax.tree.leaves(tree)
    k = leaves[0].shape[0]
    ok = np.ones(k, bool)
    for leaf in leaves:
        ok &= np.asarray(jnp.all(jnp.isfinite(leaf.reshape(k, -1)), axis=1))
    return ok


def scale_divergent(scales: np.ndarray, chain_of_sample, finite: np.ndarray, floor: float = 1.0) -> np.ndarray:
    """(K,) bool: finite samples whose scale exceeds SCALE_RATIO · m, m the median scale of the other chains' finite
    samples clipped to [floor, SCALE_RATIO · floor] (m = floor when no other chain has a finite sample)."""
    chains = np.asarray(chain_of_sample)
    flagged = np.zeros(len(scales), bool)
    for k in np.flatnonzero(finite):
        others = finite & (chains != chains[k])
        m = float(np.median(scales[others])) if others.any() else floor
        flagged[k] = scales[k] > SCALE_RATIO * min(max(floor, m), SCALE_RATIO * floor)
    return flagged


def parameter_scale(samples) -> np.ndarray:
    """(K,) RMS over every coordinate of each stacked sample (leading axis K); +inf where a leaf is not finite."""
    leaves = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(samples)]
    k = leaves[0].shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        sq = sum(np.sum(np.square(leaf.reshape(k, -1)), axis=1) for leaf in leaves)
    count = sum(leaf[0].size for leaf in leaves)
    return np.where(np.isfinite(sq), np.sqrt(sq / max(count, 1)), np.inf)


def probe_result(hp: dict, seconds_per_step: float, flops_per_step: float | None) -> MethodResult:
    """The MethodResult of a probe run (Run.probe): no samples, no gradient evaluations, the measured cost."""
    return MethodResult(np.zeros((0, 0, 0), np.float32), 0, 0.0, 0, hp, flops_per_step=flops_per_step,
                        measured_seconds_per_step=seconds_per_step)


def finalise(ctx, samples, chain_of_sample: list[int], grad_evals: int, seconds: float, hp: dict,
             num_chains: int = 1, gradient: str = "minibatch", **extra) -> MethodResult:
    """Predict the samples on ctx.split, drop non-finite samples, count the chains they belong to as divergent;
    `extra`: further MethodResult fields (t_kin, flops_per_step); a divergent chain's t_kin becomes None."""
    x, _ = split_data(ctx.task, ctx.split)
    out = predict_outputs(ctx.task, samples, x, ctx.cfg.eval_batch, ctx.cache)
    finite = finite_samples(samples) & np.all(np.isfinite(out), axis=(1, 2))
    by_scale = scale_divergent(ctx.task.likelihood.prediction_scale(out), chain_of_sample, finite)
    prior_sd = float(np.sqrt(getattr(ctx.task.spec, "prior_variance", 1.0)))
    by_scale |= scale_divergent(parameter_scale(samples), chain_of_sample, finite, floor=max(1.0, prior_sd))
    ok = finite & ~by_scale
    divergent = len({c for c, good in zip(chain_of_sample, ok) if not good})
    non_finite = {c for c, good in zip(chain_of_sample, finite) if not good}
    scale_only = len({c for c, bad in zip(chain_of_sample, by_scale) if bad} - non_finite)
    kept = jax.tree.map(lambda a: np.asarray(a)[ok], samples)
    chain_ids = np.asarray(chain_of_sample, dtype=np.int64)[ok]
    if extra.get("t_kin") is not None:  # per-chain statistics leave divergent chains out, as the BMA leaves their
        bad = {c for c, good in zip(chain_of_sample, ok) if not good}  # divergent samples out
        extra["t_kin"] = [None if c in bad else t for c, t in enumerate(extra["t_kin"])]
    return MethodResult(out[ok], grad_evals, seconds, divergent, hp, scale_divergent_chains=scale_only,
                        num_requested=len(ok), samples=kept,
                        chain_ids=chain_ids, num_chains=num_chains, draws_per_chain=len(ok) // num_chains,
                        gradient=gradient, batch_size=None if gradient == "full-batch" else ctx.cfg.batch_size,
                        **extra)


def merge_chains(runs: list[MethodResult]) -> MethodResult:
    """One MethodResult of M runs of one method that split a budget (EvalConfig.chains): outputs, samples, chain ids
    (run c's chains offset by the chains before it) and T_kin pooled in run order; gradients, seconds and divergent
    chains summed; the first run's hyperparameters with "chains": M."""
    first, offset, ids = runs[0], 0, []
    for r in runs:
        ids.append(np.asarray(r.chain_ids, np.int64) + offset)
        offset += r.num_chains
    t_kin = None if first.t_kin is None else [t for r in runs for t in (r.t_kin or [])]
    samples = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *[r.samples for r in runs])
    return dataclasses.replace(
        first, outputs=np.concatenate([r.outputs for r in runs]), grad_evals=sum(r.grad_evals for r in runs),
        seconds=sum(r.seconds for r in runs), divergent_chains=sum(r.divergent_chains for r in runs),
        scale_divergent_chains=sum(r.scale_divergent_chains for r in runs),
        num_requested=sum(r.num_requested for r in runs), samples=samples, chain_ids=np.concatenate(ids),
        num_chains=offset, draws_per_chain=first.draws_per_chain, t_kin=t_kin,
        hyperparameters={**first.hyperparameters, "chains": len(runs)})
