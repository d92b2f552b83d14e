"""What the full-batch methods (mile, nuts_bde) share: chain counts, the settings check, sample order."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from base.io import ConfigError

__all__ = ["check_chains", "num_chains", "record_without_inits", "round_robin"]


def check_chains(cfg, s, where: str) -> None:
    """s.chains chains start from that many deep-ensemble members, so s.chains ≤ cfg.num_samples."""
    if s.chains > cfg.num_samples:
        raise ConfigError(f"{where}.chains ({s.chains}) must be ≤ num_samples ({cfg.num_samples}): the chains start "
                          "from that many deep-ensemble members")


def num_chains(tree) -> int:
    """Size of the leading (chain) axis of a pytree."""
    return int(jax.tree.leaves(tree)[0].shape[0])


def round_robin(samples, chains: int, draws: int):
    """Leaves (C, S, ...) -> (S·C, ...) in round-robin order (draw s of every chain, then s + 1) and the chain id
    of each (docs/evaluation.md, BMA metric versus number of samples collection order for several chains)."""
    flat = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1).reshape((draws * chains,) + a.shape[2:]), samples)
    return flat, [c for _ in range(draws) for c in range(chains)]


def record_without_inits(hp: dict) -> dict:
    """The hyperparameter record: hp without the (large) initial positions."""
    return {k: v for k, v in hp.items() if k != "init_positions"}
