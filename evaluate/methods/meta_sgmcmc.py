"""Meta-SGMCMC (l2e.meta_sgmcmc; Gong, Li & Hernández-Lobato 2019): the shipped "meta-sgmcmc" checkpoint — the
complete recipe with learned curl Q and diffusion D and the exact Γ correction (correct by construction), meta-trained
by truncated backprop on the Stein-gradient KL surrogate as the L2E authors re-ran it (scaled:
checkpoints/meta_sgmcmc/PROVENANCE.md); one chain of G updates with the SGHMC sample schedule, its lr (ε²N, SGHMC's
units: Q ≡ 1, D ≡ C is SGHMC) tuned over an SGHMC-like grid."""
from __future__ import annotations

import dataclasses

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e

__all__ = ["MetaSGMCMCSettings", "METHOD"]


@dataclasses.dataclass(frozen=True)
class MetaSGMCMCSettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)

    def __post_init__(self):
        check_grid(self, "settings.meta_sgmcmc", "lrs")


METHOD = Method("meta_sgmcmc", MetaSGMCMCSettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_sampler="meta-sgmcmc")
