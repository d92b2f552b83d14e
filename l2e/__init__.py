"""Learned and hand-designed SGMCMC samplers with one blackjax-style interface (docs/samplers.md).

Every sampler `s` is a factory `l2e.s(...)` that is also its module: `l2e.s.init`, `l2e.s.build_kernel` and any
other name of the module (`l2e.sghmc.SGHMCState`) are reachable through it (`l2e.types.SamplerAPI`).

- Minibatch samplers: `l2e.s(posterior, hyperparameters…) -> SamplingAlgorithm` with `init(position)` and
  `step(key, state, minibatch) -> (state, info)`; `l2e.s.init(position)`; `l2e.s.build_kernel(posterior, …)` ->
  `kernel(key, state, minibatch, hyperparameters…)`. Hand-designed: one per row of `l2e.hand_designed.MINIBATCH`
  (`l2e.HAND_DESIGNED` names them: sgld, sghmc, …; fsgld and fsghmc run on an `l2e.FunctionalPosterior`). Learned: one per row of the learned-sampler registry `l2e.learned.REGISTRY` (l2e — the paper-form
  step —, kinetic, mass, meta_sgmcmc, step_scale, …), each `l2e.s(posterior, meta_params, config)`, with its config
  class at the top level too (`l2e.MassConfig`).
- Full-batch samplers: `l2e.s(logdensity_fn, …) -> FullBatchAlgorithm` with `init(position, key)` and
  `step(key, state) -> (state, info)`; `l2e.s.init(position, logdensity_fn, key)`;
  `l2e.s.build_kernel(logdensity_fn, …)` -> `kernel(key, state, …)`: the rows of `l2e.hand_designed.FULL_BATCH`
  (`l2e.FULL_BATCH`: mclmc, mile, nuts). `l2e.mile(logdensity_fn,
  init_position, key, step_size0, …) -> (samples, MILEInfo)` runs the MILE recipe end to end on MCLMC's
  `init` / `build_kernel`; `l2e.nuts.nuts_chains` runs adapted NUTS chains.

Sampler-specific helpers stay in their modules: `l2e.l2e.build_kernel`, `l2e.meta_model.init_meta_params`,
`l2e.meta_model.features`, `l2e.cyclical_sghmc.cyclical_schedule`, `l2e.fsgld.rbf_kernel`, ….
"""
import importlib as _importlib
import sys as _sys

from l2e import hand_designed, learned
from l2e.chains import ChainResult, ChainSchedule, make_chunk, run_chain
from l2e.checkpoint import CheckpointError, load_meta_params, load_sampler
from l2e.diagnostics import TemperatureCheck, TemperatureWarning, check_temperature
from l2e.fsgmcmc import FunctionalPosterior
from l2e.released import load_released
from l2e.types import FullBatchAlgorithm, LearnedSampler, Posterior, SamplerAPI, SamplingAlgorithm


def _api(row: hand_designed.Row) -> SamplerAPI:
    module = _importlib.import_module(f"l2e.{row.module}")
    return SamplerAPI(getattr(module, row.factory), module.init, getattr(module, row.kernel), module)


# hand-designed samplers, minibatch then full-batch: one per row of l2e.hand_designed (a new one needs no line here)
HAND_DESIGNED = tuple(row.name for row in hand_designed.MINIBATCH)
FULL_BATCH = tuple(row.name for row in hand_designed.FULL_BATCH)
for _row in hand_designed.MINIBATCH + hand_designed.FULL_BATCH:
    globals()[_row.name] = _api(_row)
# minibatch samplers, learned: one per row of the learned-sampler registry (l2e.learned.REGISTRY), named by it, with
# its config class (L2EConfig, KineticConfig, MassConfig, MetaSGMCMCConfig, …); a new learned sampler needs no line here
LEARNED = tuple(learned.REGISTRY)
for _entry in learned.REGISTRY.values():
    globals()[_entry.name] = SamplerAPI(_entry.factory, _entry.init, _entry.build_kernel,
                                        _sys.modules[_entry.factory.__module__])
    globals()[_entry.config.__name__] = _entry.config
del _entry, _row

__all__ = [
    # samplers (factories that expose their modules): hand-designed minibatch, learned, full-batch
    *HAND_DESIGNED, *LEARNED, *FULL_BATCH,
    # types
    "Posterior", "FunctionalPosterior", "SamplingAlgorithm", "FullBatchAlgorithm", "SamplerAPI", "LearnedSampler",
    *(e.config.__name__ for e in learned.REGISTRY.values()),
    # running chains
    "ChainSchedule", "ChainResult", "make_chunk", "run_chain",
    # the sampler tables, meta-trained and released samplers
    "hand_designed", "learned", "load_sampler", "load_meta_params", "load_released", "CheckpointError",
    # is a drop-in chain at its target temperature?
    "check_temperature", "TemperatureCheck", "TemperatureWarning",
]
