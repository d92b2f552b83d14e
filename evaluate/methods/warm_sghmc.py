"""Warm-started SGHMC (l2e.warm_sghmc): Adam towards a MAP for a tuned fraction of the burn-in, then SGHMC at T = 1;
one chain of G updates, the SGHMC sample schedule. Tuned over SGHMC's learning rate × friction × the warm fraction
(of the updates before the sampling window); Adam's learning rate is fixed (settings.warm_sghmc.warm_lr)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e.warm_sghmc
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, always, check_grid, check_positive
from evaluate.methods.driver import lr_args, run_single_chain
from base.io import ConfigError

__all__ = ["METHOD", "WarmSGHMCSettings", "run_warm_sghmc"]


@dataclasses.dataclass(frozen=True)
class WarmSGHMCSettings:
    """lrs, frictions: SGHMC's grid (lr = ε²·N, C); warm_fractions: the fraction of the burn-in spent by Adam
    (tuned); warm_lr: Adam's learning rate (parameter units per update)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)
    warm_fractions: tuple[float, ...] = (0.25, 0.5)
    warm_lr: float = 1e-3

    def __post_init__(self):
        where = "settings.warm_sghmc"
        check_grid(self, where, "lrs", "frictions", "warm_fractions")
        check_positive(self, where, "warm_lr")
        if any(f >= 1.0 for f in self.warm_fractions):
            raise ConfigError(f"{where}.warm_fractions must lie in (0, 1), got {self.warm_fractions}")


def _grid(s: WarmSGHMCSettings) -> list[dict]:
    return [{"learning_rate": lr, "friction": c, "warm_fraction": f}
            for f in s.warm_fractions for lr in s.lrs for c in s.frictions]


def _kernel(task, warm_lr: float):
    """The chunk kernel; the optimiser phase's length is the call argument args["warm_steps"] (traced: one compiled
    chunk serves every budget and warm fraction)."""
    def kernel(key, state, batch, args):
        step = l2e.warm_sghmc.build_kernel(task.posterior, args["warm_steps"])
        return step(key, state, batch, args["lr"], args["friction"], warm_lr)

    return kernel


def run_warm_sghmc(ctx, key, hp: dict):
    """One warm-started chain; hp: learning_rate, friction, warm_fraction (defaults: the first of each grid)."""
    s, schedule = ctx.settings, single_chain_schedule(ctx.cfg)
    window = max(1, schedule.num_steps - schedule.num_samples * schedule.thinning)
    fraction = float(hp.get("warm_fraction", s.warm_fractions[0]))
    friction = float(hp.get("friction", s.frictions[0]))
    warm_steps = int(round(fraction * window))
    hp = {**hp, "friction": friction, "warm_fraction": fraction, "warm_steps": warm_steps, "warm_lr": s.warm_lr,
          "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    args = {**lr_args(hp), "friction": jnp.asarray(friction, jnp.float32),
            "warm_steps": jnp.asarray(warm_steps, jnp.int32)}
    return run_single_chain(ctx, key, hp, schedule, ("warm_sghmc", float(s.warm_lr)),
                            lambda: _kernel(ctx.task, float(s.warm_lr)), l2e.warm_sghmc.init, args)


METHOD = Method("warm_sghmc", WarmSGHMCSettings, run_warm_sghmc, grid=_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), kinetic_check=True, audit=True, batch_chains=True,
                grids=dict(full=dict(lrs=(0.01, 0.03), frictions=(10.0,), warm_fractions=(0.25, 0.5)),
                           smoke=dict(lrs=(0.03,), frictions=(10.0,), warm_fractions=(0.5,))),
                # the card: Adam for the first tenth, then SGHMC at the card's ε, C
                card=lambda post, eps, c, smin, steps: (
                    l2e.warm_sghmc(post, eps**2 * post.data_size, c, warm_steps=steps // 10), always),
                step_cost=lambda post, fpost: {
                    "warm_sghmc (Adam)": l2e.warm_sghmc(post, 0.05, 15.0, warm_steps=10**9),
                    "warm_sghmc (window)": l2e.warm_sghmc(post, 0.05, 15.0, warm_steps=0)})
