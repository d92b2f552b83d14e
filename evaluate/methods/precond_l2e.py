"""Precond-L2E (the L2E paper's Table 11 ablation): the shipped "precond-l2e" checkpoint — Meta-SGMCMC's
parameterisation (l2e.meta_sgmcmc: learned Q, D with the exact Γ, correct by construction) meta-trained the L2E way,
antithetic ES on the BMA loss (checkpoints/precond_l2e/PROVENANCE.md); one chain of G updates with the SGHMC sample
schedule, its lr (ε²N, SGHMC's units) tuned over an SGHMC-like grid."""
from __future__ import annotations

import dataclasses

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e

__all__ = ["PrecondL2ESettings", "METHOD"]


@dataclasses.dataclass(frozen=True)
class PrecondL2ESettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)

    def __post_init__(self):
        check_grid(self, "settings.precond_l2e", "lrs")


METHOD = Method("precond_l2e", PrecondL2ESettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_sampler="precond-l2e")
