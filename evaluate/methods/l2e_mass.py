"""Mass-L2E (l2e.mass): the shipped "mass" checkpoint — SGHMC whose diagonal mass and per-coordinate friction a
meta-trained MLP sets from burn-in gradient statistics, frozen at the first update of the sampling window (correct
by construction); one chain of G updates with the SGHMC sample schedule, its lr tuned over the grid like L2E's."""
from __future__ import annotations

import dataclasses

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e

__all__ = ["L2EMassSettings", "METHOD"]


@dataclasses.dataclass(frozen=True)
class L2EMassSettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)

    def __post_init__(self):
        check_grid(self, "settings.l2e_mass", "lrs")


METHOD = Method("l2e_mass", L2EMassSettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_sampler="mass")
