"""SGHMC (docs/samplers.md, SGHMC): one chain of G updates, K samples `cfg.sample_thinning` updates apart ending at update
G; tuned over learning rate × friction."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid
from evaluate.methods.driver import lr_args, run_single_chain

__all__ = ["METHOD", "SGHMCSettings", "run_sghmc"]


@dataclasses.dataclass(frozen=True)
class SGHMCSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units, docs/samplers.md); frictions: C.  Tuned over
    lrs × frictions (with C = 0.1 the chain is underdamped for ~10⁴ steps and diverges at useful lrs)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)

    def __post_init__(self):
        check_grid(self, "settings.sghmc", "lrs", "frictions")


def _grid(s: SGHMCSettings) -> list[dict]:
    return [{"learning_rate": lr, "friction": c} for lr in s.lrs for c in s.frictions]


def _kernel(task):
    step = l2e.sghmc.build_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], args["friction"])

    return kernel


def run_sghmc(ctx, key, hp: dict):
    """One SGHMC chain; hp: learning_rate, friction (default: the first of the grid)."""
    friction = float(hp.get("friction", ctx.settings.frictions[0]))
    hp = {**hp, "friction": friction, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    args = {**lr_args(hp), "friction": jnp.asarray(friction, jnp.float32)}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("sghmc",), lambda: _kernel(ctx.task),
                            l2e.sghmc.init, args)


METHOD = Method("sghmc", SGHMCSettings, run_sghmc, grid=_grid, schedule=lambda cfg, s: single_chain_schedule(cfg),
                kinetic_check=True)
