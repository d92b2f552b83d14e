"""SGLD (docs/samplers.md, SGLD; Welling & Teh 2011): one chain of G updates with a constant step, one minibatch
gradient per update, the SGHMC sample schedule; tuned over the learning rate lr = ε·N (mean-loss units, pSGLD's)."""
from __future__ import annotations

import dataclasses

import l2e
from evaluate.methods.base import always, check_grid, lr_grid
from evaluate.methods.factory import single_chain_method

__all__ = ["METHOD", "SGLDSettings"]


@dataclasses.dataclass(frozen=True)
class SGLDSettings:
    """lrs: learning rates lr = ε·N (mean-loss units)."""

    lrs: tuple[float, ...] = (0.001, 0.003, 0.01)

    def __post_init__(self):
        check_grid(self, "settings.sgld", "lrs")


METHOD = single_chain_method(
    "sgld", l2e.sgld, SGLDSettings, lr_grid,
    grids=dict(every=dict(lrs=(0.0003, 0.001, 0.003, 0.01)), smoke=dict(lrs=(0.003,))),
    # the card's step rule: lr = ε·σ_min·N, so that the step is ε in units of the target's smallest scale
    card=lambda post, eps, c, smin, steps: (l2e.sgld(post, eps * smin * post.data_size), always),
    step_cost=lambda post, fpost: {"sgld": l2e.sgld(post, 1e-3)})
