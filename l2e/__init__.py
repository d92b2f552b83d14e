"""Learned and hand-designed SGMCMC samplers with one blackjax-style interface.

Every minibatch sampler `s` is `l2e.s(posterior, hyperparameters…) -> SamplingAlgorithm`, with `l2e.s.init`
and `l2e.s.build_kernel` (hyperparameters as kernel call arguments); full-batch samplers (MCLMC/MILE, NUTS)
return a `FullBatchAlgorithm`.
"""
from l2e import cyclical as _cyclical, fsgmcmc as _fsgmcmc, l2e as _l2e, psgld as _psgld  # noqa: I001
from l2e import kinetic as _kinetic, sghmc as _sghmc, sgld as _sgld, sgnht as _sgnht
from l2e import mass as _mass, meta_sgmcmc as _meta_sgmcmc
from l2e.chains import ChainResult, ChainSchedule, make_chunk, run_chain
from l2e.cyclical import CyclicalInfo, CyclicalState, cyclical_schedule, is_sampling_step
from l2e.fsgmcmc import (
    FSGHMCInfo, FSGHMCState, FSGLDInfo, FSGLDState, FunctionalPosterior, PriorInfo, functional_posterior,
    per_class_kernel, rbf_kernel,
)
from l2e.kinetic import KineticConfig, KineticInfo, KineticState
from l2e.l2e import L2EConfig, L2EInfo, L2EState, build_kernel
from l2e.mass import MassConfig, MassInfo, MassState
from l2e.mclmc import MILEInfo, ess_geyer, mclmc_sampler, mile
from l2e.meta_sgmcmc import MetaSGMCMCConfig, MetaSGMCMCInfo, MetaSGMCMCState
from l2e.meta_model import DECAYS, FEATURE_NAMES, MetaMLP, features, init_meta_params
from l2e.psgld import PSGLDInfo, PSGLDState
from l2e.sghmc import SGHMCInfo, SGHMCState
from l2e.sgld import SGLDInfo, SGLDState
from l2e.sgnht import SGNHTInfo, SGNHTState
from l2e.types import FullBatchAlgorithm, Posterior, SamplerAPI, SamplingAlgorithm

sgld = SamplerAPI(_sgld.sgld, _sgld.init, _sgld.build_kernel, _sgld)
sghmc = SamplerAPI(_sghmc.sghmc, _sghmc.init, _sghmc.build_kernel, _sghmc)
sgnht = SamplerAPI(_sgnht.sgnht, _sgnht.init, _sgnht.build_kernel, _sgnht)
psgld = SamplerAPI(_psgld.psgld, _psgld.init, _psgld.build_kernel, _psgld)
cyclical_sghmc = SamplerAPI(_cyclical.cyclical_sghmc, _cyclical.init, _cyclical.build_kernel, _cyclical)
fsgld = SamplerAPI(_fsgmcmc.fsgld, _fsgmcmc.init_fsgld, _fsgmcmc.build_fsgld_kernel, _fsgmcmc)
fsghmc = SamplerAPI(_fsgmcmc.fsghmc, _fsgmcmc.init_fsghmc, _fsgmcmc.build_fsghmc_kernel, _fsgmcmc)
l2e = SamplerAPI(_l2e.l2e, _l2e.init, _l2e.build_kernel, _l2e)
kinetic = SamplerAPI(_kinetic.kinetic, _kinetic.init, _kinetic.build_kernel, _kinetic)
meta_sgmcmc = SamplerAPI(_meta_sgmcmc.meta_sgmcmc, _meta_sgmcmc.init, _meta_sgmcmc.build_kernel, _meta_sgmcmc)
mass = SamplerAPI(_mass.mass, _mass.init, _mass.build_kernel, _mass)

__all__ = [
    "ChainResult", "ChainSchedule", "CyclicalInfo", "CyclicalState", "DECAYS", "FEATURE_NAMES", "FSGHMCInfo",
    "FSGHMCState", "FSGLDInfo", "FSGLDState", "FullBatchAlgorithm", "FunctionalPosterior", "L2EConfig", "L2EInfo",
    "L2EState", "MILEInfo", "MetaMLP", "PSGLDInfo", "PSGLDState", "Posterior", "PriorInfo", "SGHMCInfo",
    "SGHMCState", "SGLDInfo", "SGLDState", "SGNHTInfo", "SGNHTState", "SamplerAPI", "SamplingAlgorithm",
    "build_kernel", "cyclical_schedule", "cyclical_sghmc", "ess_geyer", "features", "fsghmc", "fsgld",
    "functional_posterior", "init_meta_params", "is_sampling_step", "kinetic", "KineticConfig", "KineticInfo",
    "KineticState", "l2e", "make_chunk", "mass", "MassConfig", "MassInfo", "MassState", "mclmc_sampler", "meta_sgmcmc", "MetaSGMCMCConfig", "MetaSGMCMCInfo",
    "MetaSGMCMCState", "mile",
    "per_class_kernel", "psgld", "rbf_kernel", "run_chain", "sghmc", "sgld", "sgnht",
]
from l2e.checkpoint import CheckpointError, load_meta_params, load_sampler  # noqa: E402

__all__ += ["CheckpointError", "load_meta_params", "load_sampler"]
