"""Small-L2E (the L2E paper's Table 11 ablation): the shipped "small-l2e" checkpoint — the paper-form L2E step
meta-trained on a smaller task distribution (one dataset, 4-channel CNNs of depth 1–2:
checkpoints/small_l2e/PROVENANCE.md); one chain of G updates with the SGHMC sample schedule, its lr tuned over the
paper-form L2E's grid (the `l2e` method's)."""
from __future__ import annotations

import dataclasses

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e

__all__ = ["SmallL2ESettings", "METHOD"]


@dataclasses.dataclass(frozen=True)
class SmallL2ESettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.25, 0.5, 1.0)

    def __post_init__(self):
        check_grid(self, "settings.small_l2e", "lrs")


METHOD = Method("small_l2e", SmallL2ESettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_sampler="small-l2e")
