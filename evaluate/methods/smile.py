"""SMILE (`l2e.smile`; docs/samplers.md § SMILE / pSMILE): minibatch microcanonical Langevin dynamics with its
step-size tuner and reset guardrail, run as its authors' experiments run it (the protocol of their public code,
EmanuelSommer/SMILE, scaled to the shared budget):

- chains: chain c starts from deep-ensemble member c of the final deep-ensemble run (`chains` of them);
- initial ε: chosen by a grid search, as the authors choose their configs' step size per experiment (their grids:
  {1e-2, 1e-3, 1e-4} for UCI and LeNet, 1e-1 … 1e-5 for ResNet-18); here `step_sizes`, scored on the inner
  validation split like every tuned method (no grid extension).  Not the deep ensemble's learning rate;
- warm-up: the first `warmup_fraction` of each chain's steps (theirs: 5,000 of 5,000 + 10,000 steps, 1/3; the
  tuner runs throughout, as theirs does in both phases); no sample is kept from it.  At the hand-over the public
  code builds the sampling-phase state anew from the warm-up state: velocity, stored gradient and stored log
  density become zero (so the first sampling step only aligns the velocity with the gradient and its ΔE has no
  log-density term), ε, the |ΔE| statistics and the step count carry over.  The kernel here does the same at
  update number warmup_steps;
- sampling: K / chains states per chain, evenly spaced over the sampling phase (thinning = sampling steps //
  (K / chains)), the last after the final step (theirs: 100 states 100 steps apart from 10,000 sampling steps);
- tuner constants: `SHIPPED` (0.98 / 0.1 / 0.02 / 0.01, every tuned experiment of theirs); `tuner=False` gives
  the naive fixed-step form (their UCI experiments ran only the naive forms); likelihood scale (N // B)·B
  ("batches", theirs) or N.

Budget: SMILE is a minibatch method inside the shared budget of G = cfg.num_steps minibatch gradient evaluations;
one step costs **two** minibatch gradients, so `chains` chains run G / (2·chains) steps each (grad_evals = G; the
warm start's cost is recorded in hyperparameters.warm_start, as for MILE).  The samples are collected round robin
over the chains.  Cost: flops_per_step is one SMILE step (2 gradients); a probe run (Run.probe, wall-time budgets)
reports seconds per gradient evaluation, the unit of G.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from evaluate.methods import chunks
from evaluate.methods.base import Method, check_grid
from evaluate.methods.chunks import chain_keys, chunk_fn
from evaluate.methods.full_batch import check_chains, num_chains, record_without_inits, round_robin
from evaluate.methods.outputs import finalise
from l2e.chains import ChainSchedule
from l2e.devices import member_device
from base.io import ConfigError
from l2e.smile import SHIPPED, SMILEState, build_kernel, init

__all__ = ["METHOD", "SMILESettings", "handover", "make_method", "run_smile", "smile_schedule", "warmup_steps"]

SCALES = ("batches", "n")
STEP_SIZES = (1e-4, 1e-3, 1e-2, 1e-1)
"""The initial-ε grid: the authors' UCI / LeNet grid {1e-4, 1e-3, 1e-2} and 1e-1 of their ResNet-18 grid."""
WARMUP_FRACTION = 1.0 / 3.0
"""The authors' warm-up share of each chain's steps (5,000 warm-up + 10,000 sampling steps)."""


@dataclasses.dataclass(frozen=True)
class SMILESettings:
    """chains: chains = the first this many deep-ensemble members (must divide num_samples); step_sizes: the grid of
    initial ε (θ units; tuned on the inner validation split; one value: fixed); warmup_fraction: the share of each
    chain's steps before the first kept state, in [0, 1), with the public code's state hand-over at its end; tuner:
    the step-size rule and reset guardrail (False: the naive fixed-step form); likelihood_scale: "batches"
    ((N // B)·B, the public code) or "n"; reset_prob / adaption_prob / adaption_strength / smoothing: the tuner's
    constants (shipped values)."""

    chains: int = 1
    step_sizes: tuple[float, ...] = STEP_SIZES
    warmup_fraction: float = WARMUP_FRACTION
    tuner: bool = True
    likelihood_scale: str = "batches"
    reset_prob: float = SHIPPED["reset_prob"]
    adaption_prob: float = SHIPPED["adaption_prob"]
    adaption_strength: float = SHIPPED["adaption_strength"]
    smoothing: float = SHIPPED["smoothing"]

    WHERE = "settings.smile"

    def __post_init__(self):
        where = self.WHERE
        if self.chains <= 0:
            raise ConfigError(f"{where}.chains must be a positive integer, got {self.chains}")
        check_grid(self, where, "step_sizes")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"{where}.warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.likelihood_scale not in SCALES:
            raise ConfigError(f"{where}.likelihood_scale must be one of {', '.join(SCALES)}, got "
                              f"{self.likelihood_scale!r}")
        for name in ("reset_prob", "adaption_prob", "smoothing"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{where}.{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.adaption_strength < 1.0:
            raise ConfigError(f"{where}.adaption_strength must be in [0, 1), got {self.adaption_strength}")


def _grid(s: SMILESettings) -> list[dict]:
    return [{"step_size": eps} for eps in s.step_sizes]


def warmup_steps(steps: int, fraction: float) -> int:
    """The warm-up length of a chain of `steps` steps: round(fraction · steps)."""
    return int(round(fraction * steps))


def smile_schedule(cfg, s: SMILESettings) -> ChainSchedule:
    """One chain: n = G / (2·chains) steps; K / chains states spaced by (n − warm-up) // (K / chains) over the
    sampling phase, the last after step n."""
    if cfg.num_steps % (2 * s.chains) or cfg.num_samples % s.chains:
        raise ConfigError(f"{s.WHERE}.chains ({s.chains}): num_steps ({cfg.num_steps}) must be a multiple of "
                          f"2·chains and num_samples ({cfg.num_samples}) of chains (2 gradients per step)")
    steps, draws = cfg.num_steps // (2 * s.chains), cfg.num_samples // s.chains
    thinning = (steps - warmup_steps(steps, s.warmup_fraction)) // draws
    if thinning < 1:
        raise ConfigError(f"{s.WHERE}: {draws} samples per chain do not fit in the "
                          f"{steps - warmup_steps(steps, s.warmup_fraction)} sampling steps of a chain of {steps} "
                          f"(warmup_fraction {s.warmup_fraction:g})")
    return ChainSchedule(steps, draws, thinning, cfg.batch_size, cfg.chunk)


def _check(cfg, s: SMILESettings) -> None:
    check_chains(cfg, s, s.WHERE)
    smile_schedule(cfg, s)


def handover(state: SMILEState, at) -> SMILEState:
    """The public code's warm-up → sampling hand-over when state.step == at: velocity, stored gradient and stored
    log density zero; ε, the |ΔE| statistics, pSMILE's noise statistics and the step count kept (else `state`)."""
    now = state.step == at

    def zero(a):
        return jnp.where(now, jnp.zeros_like(a), a)

    return state._replace(velocity=jax.tree.map(zero, state.velocity), grad=jax.tree.map(zero, state.grad),
                          logdensity=zero(state.logdensity))


def _kernel(task, preconditioned: bool, tuner: bool, scale: float):
    step = build_kernel(task.posterior, preconditioned, tuner, scale)

    def kernel(key, state, batch, args):
        return step(key, handover(state, args["warmup_steps"]), batch, args["reset_prob"], args["adaption_prob"],
                    args["adaption_strength"], args["smoothing"])

    return kernel


def _likelihood_scale(ctx) -> float:
    n, b = ctx.task.data_size, ctx.cfg.batch_size
    return float((n // b) * b if ctx.settings.likelihood_scale == "batches" and b <= n else n)


def _run_chains(ctx, key, init_positions, eps0: float, preconditioned: bool):
    """Every chain (sequentially, chain c on member_device(c)) -> (samples (chains, S, ...), final states, host
    infos, seconds after compilation, schedule, likelihood scale, FLOPs per step, warm-up steps); a probe run
    (Run.probe) returns the driver's probe MethodResult with seconds per *gradient evaluation* (half a step, the
    unit of G) instead."""
    s, task = ctx.settings, ctx.task
    schedule = smile_schedule(ctx.cfg, s)
    warm = warmup_steps(schedule.num_steps, s.warmup_fraction)
    scale = _likelihood_scale(ctx)
    static = (preconditioned, s.tuner, scale)
    args = {name: jnp.asarray(getattr(s, name), jnp.float32)
            for name in ("reset_prob", "adaption_prob", "adaption_strength", "smoothing")}
    args["warmup_steps"] = jnp.asarray(warm, jnp.int32)
    chains = num_chains(init_positions)
    states = [init(jax.tree.map(lambda a, c=c: jnp.asarray(a[c]), init_positions), eps0) for c in range(chains)]
    make_kernel = lambda: _kernel(task, *static)  # noqa: E731
    ck, fn = chunk_fn(ctx, ("smile",) + static, make_kernel, schedule)
    for c in range(min(chains, len(jax.local_devices()))):
        ctx.cache.warm_up(ck, fn, states[0], task.train_data, args, member_device(c))
    flops = chunks.flops_of_chunk(ctx, ("smile",) + static, make_kernel, states[0], args, schedule)
    if ctx.probe:
        res = chunks.probe(ctx, fn, states[0], task.train_data, args, schedule.chunk_length, {}, flops)
        return dataclasses.replace(res, measured_seconds_per_step=res.measured_seconds_per_step / 2)
    _, key_chain = chain_keys(key)
    t0 = time.perf_counter()
    runs = []
    for c in range(chains):
        dev = member_device(c)
        state, chain_key, chain_args = jax.device_put((states[c], jax.random.fold_in(key_chain, c), args), dev)
        runs.append(chunks.run_chunks(fn, state, chain_key, ctx.cache.data.put(task.train_data, dev), chain_args,
                                      schedule))
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.stack([jax.device_put(x, home) for x in xs]),
                           *[chain.samples for chain, _ in runs])
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    infos = [chunks.host_info(kept) for _, kept in runs]
    return samples, [chain.state for chain, _ in runs], infos, seconds, schedule, scale, flops, warm


def run_smile(ctx, key, hp: dict, preconditioned: bool = False):
    """SMILE chains from hp["init_positions"] (leaves (chains, ...)) with ε₀ = hp["step_size"] (default: the first
    of settings.step_sizes); grad_evals = 2 per step of every chain; flops_per_step: one SMILE step (2 gradients).
    The record: the step sizes at the hand-over (end of warm-up) and after the last step, the resets and
    non-finite steps of the whole chain and of its sampling phase, per chain."""
    s = ctx.settings
    eps0 = float(hp.get("step_size", s.step_sizes[0]))
    record = {k: v for k, v in record_without_inits(hp).items() if k != "step_size0"}  # the DE lr: not SMILE's ε₀
    out = _run_chains(ctx, key, hp["init_positions"], eps0, preconditioned)
    if ctx.probe:
        return dataclasses.replace(out, hyperparameters=record)
    samples, states, infos, seconds, schedule, scale, flops, warm = out
    chains = len(states)
    record.update({"chains": chains, "preconditioned": preconditioned, "tuner": s.tuner, "step_size": eps0,
                   "steps_per_chain": schedule.num_steps, "warmup_steps": warm,
                   "samples_per_chain": schedule.num_samples, "thinning": schedule.thinning,
                   "likelihood_scale": scale,
                   "handover_step_size": [float(i.step_size[warm]) if warm < schedule.num_steps else None
                                          for i in infos],
                   "final_step_size": [float(st.step_size) for st in states],
                   "num_resets": [int(np.sum(i.reset)) for i in infos],
                   "num_resets_sampling": [int(np.sum(i.reset[warm:])) for i in infos],
                   "num_nonfinite_steps": [int(np.sum(~np.asarray(i.is_finite, bool))) for i in infos]})
    flat, chain_ids = round_robin(samples, chains, schedule.num_samples)
    grads = 2 * schedule.num_steps * chains
    return finalise(ctx, flat, chain_ids, grads, seconds, record, num_chains=chains, flops_per_step=flops)


def make_method(name: str, settings: type, preconditioned: bool) -> Method:
    """The registry entry of SMILE (`preconditioned=False`) or pSMILE."""

    def run(ctx, key, hp):
        return run_smile(ctx, key, hp, preconditioned)

    def step_cost(post, fpost):  # the SMILE step at a fixed step size (its cost does not depend on it)
        import l2e.smile

        return {name: l2e.smile.smile(post, 1e-3, preconditioned=preconditioned)}

    return Method(name, settings, run, grid=_grid, schedule=smile_schedule, check=_check, warm_start=True,
                  step_cost=step_cost)


METHOD = make_method("smile", SMILESettings, preconditioned=False)
