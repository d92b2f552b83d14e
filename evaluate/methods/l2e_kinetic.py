"""Kinetic-L2E (l2e.kinetic): the shipped "kinetic" checkpoint — SGHMC with the learned kinetic energy
K = ½‖r − μ_φ(θ)‖² (correct by construction); one chain of G updates with the SGHMC sample schedule, its lr tuned
over the grid like L2E's."""
from __future__ import annotations

import dataclasses

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e

__all__ = ["L2EKineticSettings", "METHOD"]


@dataclasses.dataclass(frozen=True)
class L2EKineticSettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)

    def __post_init__(self):
        check_grid(self, "settings.l2e_kinetic", "lrs")


METHOD = Method("l2e_kinetic", L2EKineticSettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_sampler="kinetic")
