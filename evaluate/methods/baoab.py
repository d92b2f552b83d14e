"""BAOAB Langevin dynamics (l2e.baoab; Leimkuhler & Matthews 2013): one chain of G updates, one minibatch gradient per
update, the SGHMC sample schedule; tuned over learning rate × friction in SGHMC's units (lr = ε²·N, C)."""
from __future__ import annotations

import dataclasses

import l2e.baoab
from evaluate.methods.base import always, check_grid, lr_friction_grid
from evaluate.methods.factory import single_chain_method

__all__ = ["BAOABSettings", "METHOD", "run_baoab"]


@dataclasses.dataclass(frozen=True)
class BAOABSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units); frictions: C. Tuned over lrs × frictions (SGHMC's grid)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)

    def __post_init__(self):
        check_grid(self, "settings.baoab", "lrs", "frictions")


METHOD = single_chain_method(
    "baoab", l2e.baoab, BAOABSettings, lr_friction_grid, hyper=("learning_rate", "friction"),
    kinetic_check=True, audit=True,
    grids=dict(full=dict(lrs=(0.003, 0.01, 0.03, 0.1), frictions=(10.0,)), smoke=dict(lrs=(0.03,), frictions=(10.0,))),
    card=lambda post, eps, c, smin, steps: (l2e.baoab(post, eps**2 * post.data_size, c), always),
    step_cost=lambda post, fpost: {"baoab": l2e.baoab(post, 0.05, 15.0)})
run_baoab = METHOD.run
