"""Cyclical SGHMC (docs/samplers.md, Cyclical SGHMC) in SGD-with-momentum form: one chain of G updates in M cycles with a cosine
step size from lr₀; a sample at the end of each of the last K cycles (the last update of a cycle is in its
sampling phase)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, check_in, check_positive, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain
from base.io import ConfigError

__all__ = ["CSGHMCSettings", "METHOD", "num_cycles", "run_csghmc"]


@dataclasses.dataclass(frozen=True)
class CSGHMCSettings:
    """lrs: initial learning rates lr₀ (mean-loss units); cycles: M (None → one cycle per sample, M = K);
    exploration_ratio: fraction of each cycle without noise; momentum_decay: a = 1 − momentum."""

    lrs: tuple[float, ...] = (0.03, 0.1, 0.3)
    cycles: int | None = None
    exploration_ratio: float = 0.8
    momentum_decay: float = 0.1

    def __post_init__(self):
        where = "settings.csghmc"
        check_grid(self, where, "lrs")
        check_positive(self, where, "momentum_decay")
        check_in(self, where, "exploration_ratio", 0.0, 1.0, closed=False)
        if self.cycles is not None and self.cycles < 1:
            raise ConfigError(f"{where}.cycles must be a positive integer or None, got {self.cycles}")


def num_cycles(cfg, s: CSGHMCSettings) -> int:
    """M: s.cycles, or one cycle per sample."""
    return s.cycles or cfg.num_samples


def _schedule(cfg, s: CSGHMCSettings):
    cycles = num_cycles(cfg, s)
    if cycles < cfg.num_samples:
        raise ConfigError(f"settings.csghmc.cycles ({cycles}) must be ≥ num_samples ({cfg.num_samples})")
    if cfg.num_steps % cycles:
        raise ConfigError(f"num_steps ({cfg.num_steps}) must be a multiple of settings.csghmc.cycles ({cycles})")
    return single_chain_schedule(cfg, thinning=cfg.num_steps // cycles)


def _kernel(task, num_steps: int, cycles: int, exploration_ratio: float, momentum_decay: float):
    step = l2e.cyclical_sghmc.build_kernel(task.posterior, num_steps, cycles, exploration_ratio)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], momentum_decay)

    return kernel


def run_csghmc(ctx, key, hp: dict):
    """One cyclical-SGHMC chain; hp: learning_rate (lr₀)."""
    s, cfg = ctx.settings, ctx.cfg
    static = (cfg.num_steps, num_cycles(cfg, s), s.exploration_ratio, s.momentum_decay)
    hp = {**hp, "num_cycles": static[1], "exploration_ratio": s.exploration_ratio,
          "momentum_decay": s.momentum_decay}
    return run_single_chain(ctx, key, hp, _schedule(cfg, s), ("csghmc",) + static, lambda: _kernel(ctx.task, *static),
                            l2e.cyclical_sghmc.init, lr_args(hp))


def _card(post, eps, c, smin, steps):
    """The card's cSGHMC: 4 cycles, exploration ratio 0.5, momentum decay C·ε; statistics over sampling phases only."""
    cycles, ratio = 4, 0.5
    alg = l2e.cyclical_sghmc(post, eps**2 * post.data_size, steps, cycles, ratio, momentum_decay=c * eps)
    weight = lambda s: jnp.asarray(  # noqa: E731
        l2e.cyclical_sghmc.cyclical_schedule(s.step - 1, 1.0, steps, cycles, ratio)[1], jnp.float32)
    return alg, weight


METHOD = Method("csghmc", CSGHMCSettings, run_csghmc, grid=lr_grid, schedule=_schedule, audit=True, batch_chains=True,
                grids=dict(every=dict(lrs=(0.01, 0.03, 0.1, 0.3)), smoke=dict(lrs=(0.1,))), card=_card,
                step_cost=lambda post, fpost: {"csghmc": l2e.cyclical_sghmc(post, 0.05, num_steps=1000)})
