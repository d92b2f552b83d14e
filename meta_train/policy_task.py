"""The inner problem of meta-training Policy-L2E (l2e.policy; `meta_train.policy_train`) on one task of the zoo's
meta-training half: the built task, its NUTS reference's per-draw test predictives (the rows the zoo keeps;
regression: at most REGRESSION_ROWS test points, a fixed subsample), the K-draw floors, and a population of φ run
with common random numbers into one meta-loss per member. Classification and regression alike, through the task's
likelihood (the fidelity the budget curves read: `bma_total_variation`, `split_total_variations`,
`point_prediction`).

The meta-loss of a member on a task at budget G (K draws from M chains, `l2e.policy.split_budget`):

    log(TV / TV_K) + w_d·(max(0, log(v_lo / r)) + max(0, log(r / v_hi))) + w_T·max(0, |T_kin − T| / T − 0.1),

TV the total variation between the draws' BMA predictive and the reference draws' on the kept test rows (mean over
rows), TV_K its K-draw floor (the median TV of K reference draws against the other S − K, 200 resamples, as the
budget curves' floor), r the draws' predictive variance (mean over rows of the across-draw variance of the point
prediction — class probabilities or the predicted mean —, ddof 1) over the reference draws', [v_lo, v_hi] the
5 %–95 % range of K reference draws' r (the dispersion band), T_kin the chains' mean kinetic temperature in the
window. A member whose draws are not finite scores DIVERGED.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from l2e import policy as P
from l2e.chains import ChainSchedule, make_chunk, run_chain

__all__ = ["DIVERGED", "PolicyTask", "load_policy_task", "population_losses", "population_program"]

DIVERGED = 12.0
"""The meta-loss of a member whose draws are not finite, and the cap of every other's: above any finite one seen
(an unconverged run scores about 1–3 on classification, 5–10 on regression, where TV_K is small and the draws'
variance ratio can be off by orders of magnitude; a lower cap flattens those tasks' fitness and leaves ES no
signal)."""
RESAMPLES = 200
REGRESSION_ROWS = 100
"""Test points a regression task's meta-loss reads (its TV integrates each point's mixture on a grid)."""


class PolicyTask(NamedTuple):
    """name; task: the built task; x: the kept test rows' inputs; ref: (S, rows, ...) the reference draws' outputs
    (the likelihood's `reference_outputs`); ref_var: their predictive variance (ddof 1); floor: TV_K; band:
    (v_lo, v_hi) of the variance ratio; likelihood: the task's (None: classification)."""

    name: str
    task: object
    x: jax.Array
    ref: np.ndarray
    ref_var: float
    floor: float
    band: tuple[float, float]
    likelihood: object = None


def _likelihood(pt: PolicyTask):
    if pt.likelihood is not None:
        return pt.likelihood
    from tasks.likelihoods import likelihood_of

    return likelihood_of("classification")


def _variance(lik, outputs: np.ndarray) -> float:
    return float(np.mean(np.var(lik.point_prediction(outputs), axis=0, ddof=1)))


def load_policy_task(name: str, reference, draws: int, seed: int = 0) -> PolicyTask:
    """The zoo task `name` (tasks.zoo) with its reference from directory `reference`, floors at K = `draws`.
    ValueError (one line) for a task with no converged reference there."""
    from tasks.build import build
    from tasks.reference import ReferenceDataError, find_reference_dir, load_draws, load_task_dir
    from tasks.zoo import by_name

    entry = by_name().get(name)
    if entry is None:
        raise ValueError(f"unknown zoo task {name!r}")
    task = build(entry.spec)
    lik = task.likelihood
    kind = "classification" if lik.has_class_probs else "regression"
    try:
        d = find_reference_dir(reference, entry.spec, "--reference", "meta-training task")
        ref = load_task_dir(d, task, name)
        kept = load_draws(d, kind, ref.get("probs"))
    except ReferenceDataError as e:
        raise ValueError(str(e).splitlines()[0]) from None
    if kept is None:
        raise ValueError(f"the reference of {name!r} keeps no per-draw predictives")
    out = np.asarray(lik.reference_outputs(kept), np.float64)
    x_test = np.asarray(task.splits.test[0])
    rows = kept.get("rows")
    rng = np.random.default_rng(seed)
    if rows is None and kind == "regression" and out.shape[1] > REGRESSION_ROWS:
        rows = np.sort(rng.choice(out.shape[1], REGRESSION_ROWS, replace=False))
        out = out[:, rows]
    x = x_test if rows is None else x_test[np.asarray(rows)]
    var = _variance(lik, out)
    picks = [rng.choice(len(out), draws, replace=False) for _ in range(RESAMPLES)]
    tvs = np.asarray(lik.split_total_variations(out, picks))
    ratios = np.array([_variance(lik, out[i]) / var for i in picks])
    return PolicyTask(name, task, jnp.asarray(x), out, var, float(np.median(tvs)),
                      (float(np.quantile(ratios, 0.05)), float(np.quantile(ratios, 0.95))), lik)


def population_program(pt: PolicyTask, config: P.PolicyConfig, gradients: int, draws: int, chains: int,
                       batch_size: int, chunk: int = 5):
    """run(phis (population-stacked φ), key) -> (outputs (P, K, rows, ...) as `Task.predict`'s, t_kin (P,)): every
    member's M chains from the same inits and minibatch keys (common random numbers), compiled once: one chunk of
    `chunk` updates per phase it uses (l2e.policy.chunk_phase; with track_every p, the phase's p periodic kernels,
    l2e.policy.chunk_kernels) for a population, the general kernel alone for a single φ (the meta-loss curve's mean
    φ: a fraction of the work). Few, short programs keep the code small: XLA:CPU maps each compiled kernel's code
    separately (about 400 memory maps per program here), and Linux's default limit of 65,530 per process was reached
    on the 19-task preset with phase kernels for both population sizes."""
    steps, per_chain, thinning, freeze = P.split_budget(config, gradients, draws, chains)
    config = dataclasses.replace(config, freeze_step=freeze, noise_halves=batch_size % 2 == 0)
    schedule = ChainSchedule(steps, per_chain, thinning, batch_size, chunk)
    task = pt.task
    length = schedule.chunk_length

    def compiled(phase):  # the population's chunk with `phase`'s kernels (l2e.policy.chunk_phase, chunk_kernels)
        one = make_chunk(P.chunk_kernels(task.posterior, config, phase, length),
                         P.per_chain_batches(task.sample_batch, chains), batch_size, length)
        return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, 0)))

    fns = {ph: compiled(ph) for ph in {P.chunk_phase(config, start, length) for start in range(0, steps, length)}
           | {None}}
    predict = jax.jit(jax.vmap(lambda p: task.predict(p, pt.x)))

    def run(phis, key):
        members = jax.tree.leaves(phis)[0].shape[0]
        k_init, k_chain = jax.random.split(key)
        state = P.init(jax.vmap(task.init_params)(jax.random.split(k_init, chains)))
        state = jax.tree.map(lambda v: jnp.broadcast_to(v, (members,) + v.shape), state)
        at = None if members == 1 else (lambda start: fns[P.chunk_phase(config, start, length)])
        out = run_chain(fns[None], state, k_chain, task.train_data, phis, schedule, info_axis=1, chunk_at=at)
        samples = jax.tree.map(lambda v: jnp.moveaxis(v, 0, 1).reshape((members, -1) + v.shape[3:]), out.samples)
        info = out.info
        sampling = np.asarray(info.sampling, bool)
        t_kin = np.array([np.mean(np.asarray(info.t_kin)[m][sampling[m]]) for m in range(members)])
        return np.asarray(predict(samples), np.float64), t_kin

    return run


def population_losses(pt: PolicyTask, outputs: np.ndarray, t_kin: np.ndarray, dispersion_weight: float = 1.0,
                      temperature_weight: float = 1.0, temperature: float = 1.0) -> tuple[np.ndarray, dict]:
    """(meta-loss per member (module docstring), {"tv_ratio", "var_ratio", "t_kin"} per member) of outputs
    (P, K, rows, ...) in the format of `Task.predict` (log-probabilities, or [loc, scale])."""
    lik = _likelihood(pt)
    members = outputs.shape[0]
    finite = np.all(np.isfinite(outputs.reshape(members, -1)), axis=1) & np.isfinite(t_kin)
    tv, ratio = np.full(members, np.inf), np.ones(members)
    for m in np.flatnonzero(finite):
        tv[m] = lik.bma_total_variation(outputs[m], pt.ref) / pt.floor
        ratio[m] = _variance(lik, outputs[m]) / pt.ref_var
    lo, hi = pt.band
    safe_ratio = np.maximum(ratio, 1e-12)
    disp = np.maximum(0.0, np.log(lo / safe_ratio)) + np.maximum(0.0, np.log(safe_ratio / hi))
    heat = np.maximum(0.0, np.abs(np.nan_to_num(t_kin, nan=1e3) - temperature) / temperature - 0.1)
    loss = np.log(np.maximum(tv, 1e-12)) + dispersion_weight * disp + temperature_weight * heat
    return np.where(finite, np.minimum(loss, DIVERGED), DIVERGED), {"tv_ratio": tv, "var_ratio": ratio,
                                                                     "t_kin": t_kin}
