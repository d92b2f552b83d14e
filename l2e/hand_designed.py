"""The hand-designed samplers, listed once: the top level of `l2e` exports one `SamplerAPI` per row, in this order,
and the tests iterate this table (a new hand-designed sampler is its module plus one row here).

Each row: (name, module under l2e, factory, kernel builder); the state constructor is the module's `init`.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["FULL_BATCH", "MINIBATCH", "Row"]


class Row(NamedTuple):
    name: str
    module: str
    factory: str
    kernel: str = "build_kernel"


MINIBATCH = (
    Row("sgld", "sgld", "sgld"),
    Row("sghmc", "sghmc", "sghmc"),
    Row("sgnht", "sgnht", "sgnht"),
    Row("psgld", "psgld", "psgld"),
    Row("cyclical_sghmc", "cyclical", "cyclical_sghmc"),
    Row("fsgld", "fsgld", "fsgld"),  # on an l2e.FunctionalPosterior
    Row("fsghmc", "fsghmc", "fsghmc"),  # on an l2e.FunctionalPosterior
    Row("smile", "smile", "smile"),
    Row("psmile", "smile", "psmile", "build_psmile_kernel"),
    Row("baoab", "baoab", "baoab"),
    Row("precond_sghmc", "precond_sghmc", "precond_sghmc"),
    Row("adaptive_sghmc", "adaptive_sghmc", "adaptive_sghmc"),
    Row("warm_sghmc", "warm_sghmc", "warm_sghmc"),
    Row("sgld_cv", "sgld_cv", "sgld_cv"),  # with an anchor: l2e.control_variates
    Row("sghmc_cv", "sghmc_cv", "sghmc_cv"),  # with an anchor: l2e.control_variates
)
"""Minibatch samplers: `l2e.<name>(posterior, hyperparameters…) -> SamplingAlgorithm`."""

FULL_BATCH = (
    Row("mclmc", "mclmc", "mclmc"),
    Row("mile", "mclmc", "mile"),
    Row("nuts", "nuts", "nuts"),
)
"""Full-batch samplers: `l2e.<name>(logdensity_fn, …) -> FullBatchAlgorithm` (MILE: the recipe's run)."""
