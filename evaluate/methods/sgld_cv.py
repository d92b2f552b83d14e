"""SGLD-CV (`l2e.sgld_cv`; Baker, Fearnhead, Fox & Nemeth 2019; docs/samplers.md § SGLD-CV and SGHMC-CV): an anchor
found by SGD, the full-data gradient there, then one SGLD chain with the control-variate gradient (two minibatch
gradients per update), all inside the shared budget G (evaluate.methods.control_variates); tuned over SGLD's grid of
learning rates lr = ε·N (the anchor's SGD runs at the same lr)."""
from __future__ import annotations

import dataclasses

import l2e
from evaluate.methods.base import check_grid, lr_grid
from evaluate.methods.control_variates import ANCHOR_FRACTION, ANCHOR_MOMENTUM, check_anchor, make_method

__all__ = ["METHOD", "SGLDCVSettings"]


@dataclasses.dataclass(frozen=True)
class SGLDCVSettings:
    """lrs: learning rates lr = ε·N (mean-loss units; SGLD's grid), also the anchor SGD's; anchor_fraction: the share
    of G − F spent by the anchor's SGD; anchor_momentum: its heavy-ball momentum."""

    lrs: tuple[float, ...] = (0.001, 0.003, 0.01)
    anchor_fraction: float = ANCHOR_FRACTION
    anchor_momentum: float = ANCHOR_MOMENTUM

    def __post_init__(self):
        check_grid(self, "settings.sgld_cv", "lrs")
        check_anchor(self, "settings.sgld_cv")


METHOD = make_method(
    "sgld_cv", l2e.sgld_cv, SGLDCVSettings, lr_grid, ("learning_rate",),
    card_hyper=lambda post, eps, c, smin: (eps * smin * post.data_size,),  # SGLD's card step rule
    cost_hyper=(1e-3,),
    grids=dict(every=dict(lrs=(0.0003, 0.001, 0.003, 0.01)), smoke=dict(lrs=(0.003,))))
