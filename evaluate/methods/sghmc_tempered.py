"""Tempered SGHMC: SGHMC (docs/samplers.md, SGHMC) targeting p(θ | D)^(1/T), its noise N(0, 2CεT); the temperature T is
tuned on inner-validation like any hyperparameter, over a grid that includes T = 1 (docs/sampling.md, What this means for evaluation: the control
a cold sampler is compared with).  One chain of G updates with the SGHMC sample schedule; tuned over learning
rate × friction × temperature, one compilation for the whole grid (all three are traced arguments)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid
from evaluate.methods.driver import lr_args, run_single_chain
from base.io import ConfigError

__all__ = ["METHOD", "SGHMCTemperedSettings", "run_sghmc_tempered"]


@dataclasses.dataclass(frozen=True)
class SGHMCTemperedSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units); frictions: C; temperatures: T (must include 1, so the
    untempered chain is always a candidate).  Tuned over lrs × frictions × temperatures."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (10.0,)
    temperatures: tuple[float, ...] = (1.0, 0.3, 0.1, 0.03)

    def __post_init__(self):
        where = "settings.sghmc_tempered"
        check_grid(self, where, "lrs", "frictions", "temperatures")
        if 1.0 not in self.temperatures:
            raise ConfigError(f"{where}.temperatures must include 1, got {self.temperatures}")


def _grid(s: SGHMCTemperedSettings) -> list[dict]:
    return [{"learning_rate": lr, "friction": c, "temperature": t}
            for lr in s.lrs for c in s.frictions for t in s.temperatures]


def _kernel(task):
    step = l2e.sghmc.build_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], args["friction"], args["temperature"])

    return kernel


def run_sghmc_tempered(ctx, key, hp: dict):
    """One tempered SGHMC chain; hp: learning_rate, friction, temperature (defaults: the first of each grid)."""
    s = ctx.settings
    friction = float(hp.get("friction", s.frictions[0]))
    temperature = float(hp.get("temperature", s.temperatures[0]))
    hp = {**hp, "friction": friction, "temperature": temperature, "thinning": ctx.cfg.sample_thinning}
    args = {**lr_args(hp), "friction": jnp.asarray(friction, jnp.float32),
            "temperature": jnp.asarray(temperature, jnp.float32)}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("sghmc_tempered",),
                            lambda: _kernel(ctx.task), l2e.sghmc.init, args)


METHOD = Method("sghmc_tempered", SGHMCTemperedSettings, run_sghmc_tempered, grid=_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), batch_chains=True,
                grids=dict(every=dict(lrs=(0.01, 0.03), temperatures=(1.0, 0.1)),
                           smoke=dict(lrs=(0.03,), frictions=(10.0,), temperatures=(1.0,))))
