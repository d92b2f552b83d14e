"""SMILE (docs/samplers.md, SMILE / pSMILE; `l2e.smile`): minibatch microcanonical Langevin dynamics with its step-size tuner and reset
guardrail, started as MILE is (docs/samplers.md, MCLMC and the MILE recipe): chain c from deep-ensemble member c of the final deep-ensemble run,
initial ε = the deep ensemble's learning rate (or `step_size0`).

Budget: SMILE is a minibatch method inside the shared budget of G = cfg.num_steps minibatch gradient evaluations;
one step costs **two** minibatch gradients, so `chains` chains run G / (2·chains) steps each (grad_evals = G; the
warm start's cost is recorded in hyperparameters.warm_start, as for MILE).  Each chain keeps K / chains states
max(1, cfg.sample_thinning // 2) steps apart, the last after its final step (the single-chain methods'
spacing in gradients); the samples are collected round robin over the chains.  Not tuned: the tuner adapts ε
online.  `tuner=False` runs the naive fixed-step form.  likelihood_scale "batches" weights the mean minibatch NLL
by (N // B)·B as the public code does ("n": by N).  Cost: flops_per_step is one SMILE step (2 gradients); a probe
run (Run.probe, wall-time budgets) reports seconds per gradient evaluation, the unit of G.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from evaluate.methods import driver
from evaluate.methods.base import Method
from evaluate.methods.driver import chain_keys, chunk_fn
from evaluate.methods.full_batch import check_chains, num_chains, record_without_inits, round_robin
from evaluate.methods.outputs import finalise
from l2e.chains import ChainSchedule
from l2e.devices import member_device
from l2e.io import ConfigError
from l2e.smile import SHIPPED, build_kernel, init

__all__ = ["METHOD", "SMILESettings", "make_method", "run_smile", "smile_schedule"]

SCALES = ("batches", "n")


@dataclasses.dataclass(frozen=True)
class SMILESettings:
    """chains: chains = the first this many deep-ensemble members (must divide num_samples); tuner: the
    step-size rule and reset guardrail (False: the naive fixed-step form); step_size0: initial ε (None: the deep
    ensemble's learning rate, as MILE's ε₀); likelihood_scale: "batches" ((N // B)·B, the public code) or "n";
    reset_prob / adaption_prob / adaption_strength / smoothing: the tuner's constants (shipped values)."""

    chains: int = 1
    tuner: bool = True
    step_size0: float | None = None
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
        if self.step_size0 is not None and not 0 < self.step_size0 < float("inf"):
            raise ConfigError(f"{where}.step_size0 must be positive (or none), got {self.step_size0}")
        if self.likelihood_scale not in SCALES:
            raise ConfigError(f"{where}.likelihood_scale must be one of {', '.join(SCALES)}, got "
                              f"{self.likelihood_scale!r}")
        for name in ("reset_prob", "adaption_prob", "smoothing"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{where}.{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.adaption_strength < 1.0:
            raise ConfigError(f"{where}.adaption_strength must be in [0, 1), got {self.adaption_strength}")


def smile_schedule(cfg, s: SMILESettings) -> ChainSchedule:
    """One chain: G / (2·chains) steps, K / chains states max(1, sample_thinning // 2) steps apart."""
    if cfg.num_steps % (2 * s.chains) or cfg.num_samples % s.chains:
        raise ConfigError(f"{s.WHERE}.chains ({s.chains}): num_steps ({cfg.num_steps}) must be a multiple of "
                          f"2·chains and num_samples ({cfg.num_samples}) of chains (2 gradients per step)")
    return ChainSchedule(cfg.num_steps // (2 * s.chains), cfg.num_samples // s.chains,
                         max(1, cfg.sample_thinning // 2), cfg.batch_size, cfg.chunk)


def _check(cfg, s: SMILESettings) -> None:
    check_chains(cfg, s, s.WHERE)
    smile_schedule(cfg, s)


def _kernel(task, preconditioned: bool, tuner: bool, scale: float):
    step = build_kernel(task.posterior, preconditioned, tuner, scale)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["reset_prob"], args["adaption_prob"], args["adaption_strength"],
                    args["smoothing"])

    return kernel


def _likelihood_scale(ctx) -> float:
    n, b = ctx.task.data_size, ctx.cfg.batch_size
    return float((n // b) * b if ctx.settings.likelihood_scale == "batches" and b <= n else n)


def _run_chains(ctx, key, init_positions, eps0: float, preconditioned: bool):
    """Every chain (sequentially, chain c on member_device(c)) -> (samples (chains, S, ...), final states, host
    infos, seconds after compilation, schedule, likelihood scale, FLOPs per step); a probe run (Run.probe) returns
    the driver's probe MethodResult with seconds per *gradient evaluation* (half a step, the unit of G) instead."""
    s, task = ctx.settings, ctx.task
    schedule = smile_schedule(ctx.cfg, s)
    scale = _likelihood_scale(ctx)
    static = (preconditioned, s.tuner, scale)
    args = {name: jnp.asarray(getattr(s, name), jnp.float32)
            for name in ("reset_prob", "adaption_prob", "adaption_strength", "smoothing")}
    chains = num_chains(init_positions)
    states = [init(jax.tree.map(lambda a, c=c: jnp.asarray(a[c]), init_positions), eps0) for c in range(chains)]
    make_kernel = lambda: _kernel(task, *static)  # noqa: E731
    ck, fn = chunk_fn(ctx, ("smile",) + static, make_kernel, schedule)
    for c in range(min(chains, len(jax.local_devices()))):
        ctx.cache.warm_up(ck, fn, states[0], task.train_data, args, member_device(c))
    flops = driver._flops(ctx, ck, make_kernel, states[0], args, schedule)
    if ctx.probe:
        res = driver._probe(ctx, fn, states[0], task.train_data, args, schedule.chunk_length, {}, flops)
        return dataclasses.replace(res, measured_seconds_per_step=res.measured_seconds_per_step / 2)
    _, key_chain = chain_keys(key)
    t0 = time.perf_counter()
    runs = []
    for c in range(chains):
        dev = member_device(c)
        state, chain_key, chain_args = jax.device_put((states[c], jax.random.fold_in(key_chain, c), args), dev)
        runs.append(driver._run_chain(fn, state, chain_key, ctx.cache.data.put(task.train_data, dev), chain_args,
                                      schedule))
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.stack([jax.device_put(x, home) for x in xs]),
                           *[chain.samples for chain, _ in runs])
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    infos = [driver._host_info(kept) for _, kept in runs]
    return samples, [chain.state for chain, _ in runs], infos, seconds, schedule, scale, flops


def run_smile(ctx, key, hp: dict, preconditioned: bool = False):
    """SMILE chains from hp["init_positions"] (leaves (chains, ...)) with ε₀ = settings.step_size0 or
    hp["step_size0"]; grad_evals = 2 per step of every chain; flops_per_step: one SMILE step (2 gradients)."""
    s = ctx.settings
    eps0 = float(s.step_size0 if s.step_size0 is not None else hp["step_size0"])
    record = record_without_inits(hp)
    out = _run_chains(ctx, key, hp["init_positions"], eps0, preconditioned)
    if ctx.probe:
        return dataclasses.replace(out, hyperparameters=record)
    samples, states, infos, seconds, schedule, scale, flops = out
    chains = len(states)
    record.update({"chains": chains, "preconditioned": preconditioned, "tuner": s.tuner, "step_size0": eps0,
                   "steps_per_chain": schedule.num_steps, "samples_per_chain": schedule.num_samples,
                   "thinning": schedule.thinning, "likelihood_scale": scale,
                   "final_step_size": [float(st.step_size) for st in states],
                   "num_resets": [int(np.sum(i.reset)) for i in infos],
                   "num_nonfinite_steps": [int(np.sum(~np.asarray(i.is_finite, bool))) for i in infos]})
    flat, chain_ids = round_robin(samples, chains, schedule.num_samples)
    grads = 2 * schedule.num_steps * chains
    return finalise(ctx, flat, chain_ids, grads, seconds, record, num_chains=chains, flops_per_step=flops)


def make_method(name: str, settings: type, preconditioned: bool) -> Method:
    """The registry entry of SMILE (`preconditioned=False`) or pSMILE."""

    def run(ctx, key, hp):
        return run_smile(ctx, key, hp, preconditioned)

    return Method(name, settings, run, schedule=smile_schedule, check=_check, warm_start=True)


METHOD = make_method("smile", SMILESettings, preconditioned=False)
