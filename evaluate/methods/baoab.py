"""BAOAB Langevin dynamics (l2e.baoab; Leimkuhler & Matthews 2013): one chain of G updates, one minibatch gradient per
update, the SGHMC sample schedule; tuned over learning rate × friction in SGHMC's units (lr = ε²·N, C)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e.baoab
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid
from evaluate.methods.driver import lr_args, run_single_chain

__all__ = ["BAOABSettings", "METHOD", "run_baoab"]


@dataclasses.dataclass(frozen=True)
class BAOABSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units); frictions: C. Tuned over lrs × frictions (SGHMC's grid)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)

    def __post_init__(self):
        check_grid(self, "settings.baoab", "lrs", "frictions")


def _grid(s: BAOABSettings) -> list[dict]:
    return [{"learning_rate": lr, "friction": c} for lr in s.lrs for c in s.frictions]


def _kernel(task):
    step = l2e.baoab.build_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], args["friction"])

    return kernel


def run_baoab(ctx, key, hp: dict):
    """One BAOAB chain; hp: learning_rate, friction (default: the first of the grid)."""
    friction = float(hp.get("friction", ctx.settings.frictions[0]))
    hp = {**hp, "friction": friction, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    args = {**lr_args(hp), "friction": jnp.asarray(friction, jnp.float32)}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("baoab",), lambda: _kernel(ctx.task),
                            l2e.baoab.init, args)


METHOD = Method("baoab", BAOABSettings, run_baoab, grid=_grid, schedule=lambda cfg, s: single_chain_schedule(cfg),
                kinetic_check=True)
