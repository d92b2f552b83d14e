"""SGHMC (docs/samplers.md, SGHMC): one chain of G updates, K samples `cfg.sample_thinning` updates apart ending at update
G; tuned over learning rate × friction."""
from __future__ import annotations

import dataclasses

import l2e
from evaluate.methods.base import always, check_grid, lr_friction_grid
from evaluate.methods.factory import single_chain_method

__all__ = ["METHOD", "SGHMCSettings", "run_sghmc"]


@dataclasses.dataclass(frozen=True)
class SGHMCSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units, docs/samplers.md); frictions: C.  Tuned over
    lrs × frictions (with C = 0.1 the chain is underdamped for ~10⁴ steps and diverges at useful lrs)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)

    def __post_init__(self):
        check_grid(self, "settings.sghmc", "lrs", "frictions")


METHOD = single_chain_method(
    "sghmc", l2e.sghmc, SGHMCSettings, lr_friction_grid, hyper=("learning_rate", "friction"),
    kinetic_check=True, audit=True,
    grids=dict(every=dict(lrs=(0.003, 0.01, 0.03, 0.1), frictions=(10.0,)), smoke=dict(lrs=(0.03,), frictions=(10.0,))),
    card=lambda post, eps, c, smin, steps: (l2e.sghmc(post, eps**2 * post.data_size, c), always),
    step_cost=lambda post, fpost: {"sghmc": l2e.sghmc(post, 0.05, 15.0)})
run_sghmc = METHOD.run
