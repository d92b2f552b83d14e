"""pSMILE (`l2e.smile.psmile`; docs/samplers.md § SMILE / pSMILE): SMILE with the diagonal gradient-noise
preconditioner — the same runner, budget, warm start, initial-ε grid, warm-up and settings as
`evaluate.methods.smile` (the authors' protocol; group `settings.psmile`)."""
from __future__ import annotations

import dataclasses

from evaluate.methods.smile import SMILESettings, make_method

__all__ = ["METHOD", "PSMILESettings"]


@dataclasses.dataclass(frozen=True)
class PSMILESettings(SMILESettings):
    """As SMILESettings (settings.psmile)."""

    WHERE = "settings.psmile"


METHOD = make_method("psmile", PSMILESettings, preconditioned=True)
