"""NUTS-BDE (Sommer et al. 2024; docs/samplers.md, NUTS): full-batch NUTS (`l2e.nuts.nuts_chains`, Stan window
adaptation) from the first `chains` deep-ensemble members; `warmup` adaptation transitions, then `samples` draws
per chain `thinning` transitions apart; chain c runs on local device c mod n."""
from __future__ import annotations

import dataclasses

import numpy as np

from evaluate.methods.base import Method
from evaluate.methods.driver import chain_keys
from evaluate.methods.full_batch import check_chains, num_chains, record_without_inits, round_robin
from evaluate.methods.outputs import finalise
from base.io import ConfigError

__all__ = ["METHOD", "NUTSBDESettings", "run_nuts_bde"]


@dataclasses.dataclass(frozen=True)
class NUTSBDESettings:
    """chains: NUTS chains = the first this many deep-ensemble members; warmup: window-adaptation transitions per
    chain; samples: draws per chain, thinning transitions apart; max_doublings: tree depth cap (≤ 2^d leapfrog
    steps per transition; MILE's BDE uses 10)."""

    chains: int = 2
    warmup: int = 50
    samples: int = 10
    thinning: int = 1
    max_doublings: int = 10

    def __post_init__(self):
        for name in ("chains", "samples", "thinning", "max_doublings"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"settings.nuts_bde.{name} must be a positive integer, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ConfigError(f"settings.nuts_bde.warmup must be a non-negative integer, got {self.warmup}")


def run_nuts_bde(ctx, key, hp: dict):
    """NUTS chains from hp["init_positions"].  grad_evals = leapfrog steps (full-batch gradients) of warm-up +
    sampling, all chains; seconds = the chains' wall time (nuts_chains jits per call: the first chain's time
    includes compilation)."""
    from l2e.nuts import nuts_chains  # blackjax is slow to import

    s = ctx.settings
    init_positions = hp["init_positions"]
    chains = num_chains(init_positions)
    samples, info = nuts_chains(ctx.task.log_density, init_positions, chain_keys(key)[1], s.warmup, s.samples,
                                s.thinning, max_num_doublings=s.max_doublings)
    record = record_without_inits(hp)
    record.update({"chains": chains, "warmup": s.warmup, "samples_per_chain": s.samples, "thinning": s.thinning,
                   "max_num_doublings": s.max_doublings, "step_size": info.step_size.tolist(),
                   "acceptance_rate": info.acceptance_rate.tolist(),
                   "num_divergent_transitions": info.num_divergent.tolist(), "seconds_include_compilation": True})
    flat, chain_ids = round_robin(samples, chains, s.samples)
    return finalise(ctx, flat, chain_ids, int(np.sum(info.num_grad_evals)), float(np.sum(info.seconds)), record,
                    num_chains=chains, gradient="full-batch")


METHOD = Method("nuts_bde", NUTSBDESettings, run_nuts_bde,
                check=lambda cfg, s: check_chains(cfg, s, "settings.nuts_bde"), full_batch=True, warm_start=True,
                grids=dict(smoke=dict(chains=2, warmup=10, samples=4, max_doublings=5)))
