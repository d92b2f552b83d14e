"""SGHMC-CV (`l2e.sghmc_cv`; Baker, Fearnhead, Fox & Nemeth 2019; docs/samplers.md § SGLD-CV and SGHMC-CV): an anchor
found by SGD, the full-data gradient there, then one SGHMC chain with the control-variate gradient (two minibatch
gradients per update), all inside the shared budget G (evaluate.methods.control_variates); tuned over learning rate ×
friction (SGHMC's lrs, lr = ε²·N, the anchor's SGD at the same lr; the presets' frictions 10 and 100)."""
from __future__ import annotations

import dataclasses

import l2e
from evaluate.methods.base import check_grid, lr_friction_grid
from evaluate.methods.control_variates import ANCHOR_FRACTION, ANCHOR_MOMENTUM, check_anchor, make_method

__all__ = ["METHOD", "SGHMCCVSettings"]


@dataclasses.dataclass(frozen=True)
class SGHMCCVSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units; SGHMC's grid), also the anchor SGD's; frictions: C;
    anchor_fraction: the share of G − F spent by the anchor's SGD; anchor_momentum: its heavy-ball momentum."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    frictions: tuple[float, ...] = (3.0, 10.0, 30.0)
    anchor_fraction: float = ANCHOR_FRACTION
    anchor_momentum: float = ANCHOR_MOMENTUM

    def __post_init__(self):
        check_grid(self, "settings.sghmc_cv", "lrs", "frictions")
        check_anchor(self, "settings.sghmc_cv")


METHOD = make_method(
    "sghmc_cv", l2e.sghmc_cv, SGHMCCVSettings, lr_friction_grid, ("learning_rate", "friction"),
    card_hyper=lambda post, eps, c, smin: (eps**2 * post.data_size, c),  # SGHMC's card step rule
    cost_hyper=(0.05, 15.0), kinetic_check=True,
    # SGHMC's lr grid; frictions up to 100: at large N the CV noise left away from θ̂ still heats a chain at C = 10
    # (power plant, lr 0.01, G = 8,000: T_kin 167 at C = 10, 1.30 at C = 100; docs/notebook.md, the CV pilot)
    # (the full / references presets: FULL_GRID_POINTS = 4 points like every rival, the grid extended at its edges)
    grids=dict(every=dict(lrs=(0.003, 0.01, 0.03, 0.1), frictions=(10.0, 100.0)),
               full=dict(lrs=(0.01, 0.03), frictions=(10.0, 100.0)),
               smoke=dict(lrs=(0.03,), frictions=(10.0,))))
