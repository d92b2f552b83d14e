"""Learned and hand-designed SGMCMC samplers with one blackjax-style interface (docs/samplers.md).

Every sampler `s` is a factory `l2e.s(...)` that is also its module: `l2e.s.init`, `l2e.s.build_kernel` and any
other name of the module (`l2e.sghmc.SGHMCState`) are reachable through it (`l2e.types.SamplerAPI`).

- Minibatch samplers: `l2e.s(posterior, hyperparameters…) -> SamplingAlgorithm` with `init(position)` and
  `step(key, state, minibatch) -> (state, info)`; `l2e.s.init(position)`; `l2e.s.build_kernel(posterior, …)` ->
  `kernel(key, state, minibatch, hyperparameters…)`. Hand-designed: sgld, sghmc, sgnht, psgld, cyclical_sghmc,
  fsgld, fsghmc (on an `l2e.FunctionalPosterior`), smile, psmile, baoab, precond_sghmc, adaptive_sghmc,
  warm_sghmc. Learned: one per row of the learned-sampler registry `l2e.learned.REGISTRY` (l2e — the paper-form
  step —, kinetic, mass, meta_sgmcmc, step_scale, …), each `l2e.s(posterior, meta_params, config)`, with its config
  class at the top level too (`l2e.MassConfig`).
- Full-batch samplers: `l2e.s(logdensity_fn, …) -> FullBatchAlgorithm` with `init(position, key)` and
  `step(key, state) -> (state, info)`; `l2e.s.init(position, logdensity_fn, key)`;
  `l2e.s.build_kernel(logdensity_fn, …)` -> `kernel(key, state, …)`: mclmc and nuts. `l2e.mile(logdensity_fn,
  init_position, key, step_size0, …) -> (samples, MILEInfo)` runs the MILE recipe end to end on MCLMC's
  `init` / `build_kernel`; `l2e.nuts.nuts_chains` runs adapted NUTS chains.

Sampler-specific helpers stay in their modules: `l2e.l2e.build_kernel`, `l2e.meta_model.init_meta_params`,
`l2e.meta_model.features`, `l2e.cyclical_sghmc.cyclical_schedule`, `l2e.fsgld.rbf_kernel`, ….
"""
import sys as _sys

from l2e import adaptive_sghmc as _adaptive_sghmc, baoab as _baoab, precond_sghmc as _precond_sghmc  # noqa: I001
from l2e import cyclical as _cyclical, fsghmc as _fsghmc, fsgld as _fsgld, warm_sghmc as _warm_sghmc
from l2e import mclmc as _mclmc, nuts as _nuts, psgld as _psgld, sghmc as _sghmc, sgld as _sgld, sgnht as _sgnht
from l2e import smile as _smile
from l2e import learned
from l2e.chains import ChainResult, ChainSchedule, make_chunk, run_chain
from l2e.checkpoint import CheckpointError, load_meta_params, load_sampler
from l2e.fsgmcmc import FunctionalPosterior
from l2e.released import load_released
from l2e.types import FullBatchAlgorithm, LearnedSampler, Posterior, SamplerAPI, SamplingAlgorithm

# minibatch samplers, hand-designed
sgld = SamplerAPI(_sgld.sgld, _sgld.init, _sgld.build_kernel, _sgld)
sghmc = SamplerAPI(_sghmc.sghmc, _sghmc.init, _sghmc.build_kernel, _sghmc)
sgnht = SamplerAPI(_sgnht.sgnht, _sgnht.init, _sgnht.build_kernel, _sgnht)
psgld = SamplerAPI(_psgld.psgld, _psgld.init, _psgld.build_kernel, _psgld)
cyclical_sghmc = SamplerAPI(_cyclical.cyclical_sghmc, _cyclical.init, _cyclical.build_kernel, _cyclical)
fsgld = SamplerAPI(_fsgld.fsgld, _fsgld.init, _fsgld.build_kernel, _fsgld)
fsghmc = SamplerAPI(_fsghmc.fsghmc, _fsghmc.init, _fsghmc.build_kernel, _fsghmc)
smile = SamplerAPI(_smile.smile, _smile.init, _smile.build_kernel, _smile)
psmile = SamplerAPI(_smile.psmile, _smile.init, _smile.build_psmile_kernel, _smile)
baoab = SamplerAPI(_baoab.baoab, _baoab.init, _baoab.build_kernel, _baoab)
precond_sghmc = SamplerAPI(_precond_sghmc.precond_sghmc, _precond_sghmc.init, _precond_sghmc.build_kernel,
                           _precond_sghmc)
adaptive_sghmc = SamplerAPI(_adaptive_sghmc.adaptive_sghmc, _adaptive_sghmc.init, _adaptive_sghmc.build_kernel,
                            _adaptive_sghmc)
warm_sghmc = SamplerAPI(_warm_sghmc.warm_sghmc, _warm_sghmc.init, _warm_sghmc.build_kernel, _warm_sghmc)
# minibatch samplers, learned: one per row of the learned-sampler registry (l2e.learned.REGISTRY), named by it, with
# its config class (L2EConfig, KineticConfig, MassConfig, MetaSGMCMCConfig, …); a new learned sampler needs no line here
LEARNED = tuple(learned.REGISTRY)
for _entry in learned.REGISTRY.values():
    globals()[_entry.name] = SamplerAPI(_entry.factory, _entry.init, _entry.build_kernel,
                                        _sys.modules[_entry.factory.__module__])
    globals()[_entry.config.__name__] = _entry.config
del _entry
# full-batch samplers
mclmc = SamplerAPI(_mclmc.mclmc, _mclmc.init, _mclmc.build_kernel, _mclmc)
mile = SamplerAPI(_mclmc.mile, _mclmc.init, _mclmc.build_kernel, _mclmc)
nuts = SamplerAPI(_nuts.nuts, _nuts.init, _nuts.build_kernel, _nuts)

__all__ = [
    # samplers (factories that expose their modules)
    "sgld", "sghmc", "sgnht", "psgld", "cyclical_sghmc", "fsgld", "fsghmc", "smile", "psmile",
    "baoab", "precond_sghmc", "adaptive_sghmc", "warm_sghmc",
    *LEARNED,
    "mclmc", "mile", "nuts",
    # types
    "Posterior", "FunctionalPosterior", "SamplingAlgorithm", "FullBatchAlgorithm", "SamplerAPI", "LearnedSampler",
    *(e.config.__name__ for e in learned.REGISTRY.values()),
    # running chains
    "ChainSchedule", "ChainResult", "make_chunk", "run_chain",
    # meta-trained and released samplers
    "learned", "load_sampler", "load_meta_params", "load_released", "CheckpointError",
]
