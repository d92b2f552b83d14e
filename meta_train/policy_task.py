"""The inner problem of meta-training Policy-L2E (l2e.policy; `meta_train.policy_train`) on one task of the zoo's
meta-training half: the built task, its NUTS reference's per-draw test predictives (the rows the zoo keeps), the
K-draw floors, and a population of φ run with common random numbers into one meta-loss per member.

The meta-loss of a member on a task at budget G (K draws from M chains, `l2e.policy.split_budget`):

    log(TV / TV_K) + w_d·(max(0, log(v_lo / r)) + max(0, log(r / v_hi))) + w_T·max(0, |T_kin − T| / T − 0.1),

TV the total variation between the draws' BMA and the reference BMA on the kept test rows (mean over rows), TV_K its
K-draw floor (the median TV of K reference draws, 200 resamples), r the draws' predictive variance (mean over rows
and classes of the across-draw variance, ddof 1) over the reference draws', [v_lo, v_hi] the 5 %–95 % range of K
reference draws' r (the dispersion band), T_kin the chains' mean kinetic temperature in the window. A member whose
draws are not finite scores DIVERGED. Classification tasks (class probabilities) only.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from l2e import policy as P
from l2e.chains import ChainSchedule, make_chunk, run_chain

__all__ = ["DIVERGED", "PolicyTask", "load_policy_task", "population_losses"]

DIVERGED = 5.0
"""The meta-loss of a member whose draws are not finite (log TV/TV_K of a useless sampler is about 1–3)."""
RESAMPLES = 200


class PolicyTask(NamedTuple):
    """name; task: the built task; x: the kept test rows' inputs; ref_bma: (rows, C) the reference draws' mean;
    ref_var: their predictive variance (ddof 1); floor: TV_K; band: (v_lo, v_hi) of the variance ratio."""

    name: str
    task: object
    x: jax.Array
    ref_bma: np.ndarray
    ref_var: float
    floor: float
    band: tuple[float, float]


def _tv(p, q):
    return np.mean(0.5 * np.sum(np.abs(p - q), axis=-1), axis=-1)


def load_policy_task(name: str, reference, draws: int, seed: int = 0) -> PolicyTask:
    """The zoo task `name` (tasks.zoo) with its reference from directory `reference`, floors at K = `draws`.
    ValueError (one line) for a task that is not classification or has no converged reference there."""
    from tasks.build import build
    from tasks.reference import ReferenceDataError, find_reference_dir, load_draws, load_task_dir
    from tasks.zoo import by_name

    entry = by_name().get(name)
    if entry is None:
        raise ValueError(f"unknown zoo task {name!r}")
    task = build(entry.spec)
    if not task.likelihood.has_class_probs:
        raise ValueError(f"meta-training task {name!r} is not a classification task")
    try:
        d = find_reference_dir(reference, entry.spec, "--reference", "meta-training task")
        ref = load_task_dir(d, task, name)
        kept = load_draws(d, "classification", ref["probs"])
    except ReferenceDataError as e:
        raise ValueError(str(e).splitlines()[0]) from None
    if kept is None:
        raise ValueError(f"the reference of {name!r} keeps no per-draw predictives")
    probs = np.asarray(kept["probs"], np.float64)
    x_test = task.splits.test[0]
    x = x_test if kept["rows"] is None else x_test[np.asarray(kept["rows"])]
    bma, var = probs.mean(0), float(np.mean(np.var(probs, axis=0, ddof=1)))
    rng = np.random.default_rng(seed)
    picks = [rng.choice(len(probs), draws, replace=False) for _ in range(RESAMPLES)]
    tvs = np.array([_tv(probs[i].mean(0), bma) for i in picks])
    ratios = np.array([np.mean(np.var(probs[i], axis=0, ddof=1)) / var for i in picks])
    return PolicyTask(name, task, jnp.asarray(x), bma, var, float(np.median(tvs)),
                      (float(np.quantile(ratios, 0.05)), float(np.quantile(ratios, 0.95))))


def population_program(pt: PolicyTask, config: P.PolicyConfig, gradients: int, draws: int, chains: int,
                       batch_size: int, chunk: int = 10):
    """run(phis (population-stacked φ), key) -> (probs (P, K, rows, C), t_kin (P,)): every member's M chains from
    the same inits and minibatch keys (common random numbers), compiled once."""
    steps, per_chain, thinning, freeze = P.split_budget(config, gradients, draws, chains)
    config = dataclasses.replace(config, freeze_step=freeze, noise_halves=batch_size % 2 == 0)
    schedule = ChainSchedule(steps, per_chain, thinning, batch_size, chunk)
    task = pt.task
    kernel = P.build_kernel(task.posterior, config)
    one = make_chunk(lambda k, s, mb, phi: kernel(k, s, mb, phi), P.per_chain_batches(task.sample_batch, chains),
                     batch_size, schedule.chunk_length)
    fn = jax.jit(jax.vmap(one, in_axes=(0, None, None, None, 0)))
    predict = jax.jit(jax.vmap(jax.vmap(lambda p: jax.nn.softmax(task.apply(p, pt.x), axis=-1))))

    def run(phis, key):
        members = jax.tree.leaves(phis)[0].shape[0]
        k_init, k_chain = jax.random.split(key)
        state = P.init(jax.vmap(task.init_params)(jax.random.split(k_init, chains)))
        state = jax.tree.map(lambda v: jnp.broadcast_to(v, (members,) + v.shape), state)
        out = run_chain(fn, state, k_chain, task.train_data, phis, schedule, info_axis=1)
        samples = jax.tree.map(lambda v: jnp.moveaxis(v, 0, 1).reshape((members, -1) + v.shape[3:]), out.samples)
        info = out.info
        sampling = np.asarray(info.sampling, bool)
        t_kin = np.array([np.mean(np.asarray(info.t_kin)[m][sampling[m]]) for m in range(members)])
        return np.asarray(predict(samples), np.float64), t_kin

    return run


def population_losses(pt: PolicyTask, probs: np.ndarray, t_kin: np.ndarray, dispersion_weight: float = 1.0,
                      temperature_weight: float = 1.0, temperature: float = 1.0) -> tuple[np.ndarray, dict]:
    """(meta-loss per member (module docstring), {"tv_ratio", "var_ratio", "t_kin"} per member)."""
    finite = np.all(np.isfinite(probs), axis=(1, 2, 3)) & np.isfinite(t_kin)
    safe = np.where(finite[:, None, None, None], probs, 1.0 / probs.shape[-1])
    tv = _tv(safe.mean(1), pt.ref_bma) / pt.floor
    ratio = np.mean(np.var(safe, axis=1, ddof=1), axis=(1, 2)) / pt.ref_var
    lo, hi = pt.band
    safe_ratio = np.maximum(ratio, 1e-12)
    disp = np.maximum(0.0, np.log(lo / safe_ratio)) + np.maximum(0.0, np.log(safe_ratio / hi))
    heat = np.maximum(0.0, np.abs(np.nan_to_num(t_kin, nan=1e3) - temperature) / temperature - 0.1)
    loss = np.log(np.maximum(tv, 1e-12)) + dispersion_weight * disp + temperature_weight * heat
    return np.where(finite, np.minimum(loss, DIVERGED), DIVERGED), {"tv_ratio": tv, "var_ratio": ratio,
                                                                     "t_kin": t_kin}
