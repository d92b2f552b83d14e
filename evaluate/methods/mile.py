"""MILE (docs/samplers.md, MCLMC and the MILE recipe): `l2e.mclmc.mile` from the first `chains` deep-ensemble members with ε₀ = the deep
ensemble's learning rate; warm-up (n₁, n₂, n₃) MCLMC steps, then `samples` draws per chain `thinning` steps apart
(2 full-batch gradients per step).  Chains are vmapped in one program compiled ahead of time (seconds exclude
compilation) and sharded over a mesh of the local devices (`l2e.devices.population_mesh`)."""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from evaluate.methods.base import Method
from evaluate.methods.driver import chain_keys
from evaluate.methods.full_batch import check_chains, num_chains, record_without_inits, round_robin
from evaluate.methods.outputs import finalise
from l2e.devices import population_mesh, replicate, shard_population
from base.io import ConfigError

__all__ = ["METHOD", "MILESettings", "run_mile"]


@dataclasses.dataclass(frozen=True)
class MILESettings:
    """chains: MILE chains = the first this many deep-ensemble members; steps: warm-up (n₁ ≥ 1, n₂, n₃) per chain
    (MILE's own (40000, 5000, 5000) is scaled down in the presets); samples: draws per chain, thinning steps
    apart."""

    chains: int = 2
    steps: tuple[int, ...] = (400, 50, 50)
    samples: int = 10
    thinning: int = 10

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(int(v) for v in self.steps))
        if len(self.steps) != 3 or any(v < 0 for v in self.steps) or self.steps[0] < 1:
            raise ConfigError(f"settings.mile.steps must be three non-negative integers (n1 ≥ 1, n2, n3), got "
                              f"{self.steps}")
        for name in ("chains", "samples", "thinning"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"settings.mile.{name} must be a positive integer, got {getattr(self, name)}")


def _compiled(ctx, init_positions, keys, eps0, mesh):
    """The vmapped MILE program of every chain, compiled for these (sharded) inputs, cached per task/settings."""
    s, task = ctx.settings, ctx.task

    def build():
        def one(p, k, e):
            return l2e.mile(task.log_density, p, k, e, num_steps=s.steps, num_samples=s.samples, thinning=s.thinning)

        return jax.jit(jax.vmap(one, in_axes=(0, 0, None))).lower(init_positions, keys, eps0).compile()

    return ctx.cache.get(("mile", task.spec, s, num_chains(init_positions), mesh), build)


def run_mile(ctx, key, hp: dict):
    """MILE chains from hp["init_positions"] (leaves (chains, ...)) with ε₀ = hp["step_size0"].
    grad_evals = full-batch gradients of all chains."""
    s = ctx.settings
    init_positions = hp["init_positions"]
    chains = num_chains(init_positions)
    keys = jax.random.split(chain_keys(key)[1], chains)
    eps0 = jnp.asarray(float(hp["step_size0"]), jnp.float32)
    mesh = population_mesh(chains)  # the chain axis sharded over the devices (plain jit on one device)
    if mesh.size > 1:
        init_positions, keys = shard_population((init_positions, keys), mesh)
        eps0 = replicate(eps0, mesh)
    program = _compiled(ctx, init_positions, keys, eps0, mesh)
    t0 = time.perf_counter()
    samples, info = program(init_positions, keys, eps0)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    if mesh.size > 1:  # gathered on the default device for prediction
        samples = jax.device_put(samples, jax.local_devices()[0])
    record = record_without_inits(hp)
    record.update({"chains": chains, "num_steps": list(s.steps), "samples_per_chain": s.samples,
                   "thinning": s.thinning, "L": np.asarray(info.L).tolist(),
                   "step_size": np.asarray(info.step_size).tolist(),
                   "num_nan_warmup": np.asarray(info.num_nan_warmup).tolist(),
                   "num_nan_sampling": np.asarray(info.num_nan_sampling).tolist(),
                   "eevpd_sampling": np.asarray(info.eevpd_sampling).tolist()})
    flat, chain_ids = round_robin(samples, chains, s.samples)
    grads = int(np.sum(np.asarray(info.num_grad_evals)))
    return finalise(ctx, flat, chain_ids, grads, seconds, record, num_chains=chains, gradient="full-batch")


def curve_settings(s: MILESettings, cfg, data_size: int) -> MILESettings:
    """MILE's settings at a budget-curve point of G minibatch gradients (Method.curve_budget): its own work G·B/N
    full-batch gradients, 2 per step, so S = ⌊G·B/(2·N·chains)⌋ steps per chain (at least 2); K/chains draws per
    chain over the last half (thinning ⌊S/2⌋ / draws, at least 1); the warm-up before them split as MILE's own
    (40000, 5000, 5000): 80 / 10 / 10 %."""
    steps = max(2, int(cfg.num_steps * cfg.batch_size // (2 * data_size * s.chains)))
    samples = max(1, cfg.num_samples // s.chains)
    thinning = max(1, (steps // 2) // samples)
    warm = max(1, steps - samples * thinning)
    n23 = warm // 10
    return dataclasses.replace(s, steps=(warm - 2 * n23, n23, n23), samples=samples, thinning=thinning)


METHOD = Method("mile", MILESettings, run_mile, check=lambda cfg, s: check_chains(cfg, s, "settings.mile"),
                full_batch=True, warm_start=True, curve_budget=curve_settings,
                grids=dict(smoke=dict(chains=2, steps=(30, 5, 5), samples=4, thinning=2)))
