"""Learned and hand-designed SGMCMC samplers with one blackjax-style interface."""
from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.cyclical import CyclicalState, cyclical_schedule, cyclical_sghmc, is_sampling_step
from l2e.l2e import L2EConfig, L2EState, build_kernel, l2e
from l2e.meta_model import DECAYS, FEATURE_NAMES, MetaMLP, features, init_meta_params
from l2e.sgld import SGLDState, sgld
from l2e.sghmc import SGHMCState, sghmc
from l2e.types import Posterior, SamplingAlgorithm

__all__ = [
    "ChainSchedule", "CyclicalState", "DECAYS", "FEATURE_NAMES", "L2EConfig", "L2EState", "MetaMLP",
    "Posterior", "SGHMCState", "SGLDState", "SamplingAlgorithm", "build_kernel", "cyclical_schedule",
    "cyclical_sghmc", "features", "init_meta_params", "is_sampling_step", "l2e", "make_chunk", "run_chain",
    "sgld", "sghmc",
]
from l2e.checkpoint import CheckpointError, load_meta_params, load_sampler  # noqa: E402

__all__ += ["CheckpointError", "load_meta_params", "load_sampler"]
from l2e.fsgmcmc import (  # noqa: E402
    FSGHMCState, FSGLDState, FunctionalPosterior, FunctionalSampler, PriorInfo, fsghmc, fsgld,
    functional_posterior, per_class_kernel, rbf_kernel,
)
from l2e.mclmc import MCLMCSampler, MILEInfo, ess_geyer, mclmc_sampler, mile  # noqa: E402
from l2e.psgld import PSGLDState, psgld  # noqa: E402

__all__ += [
    "FSGHMCState", "FSGLDState", "FunctionalPosterior", "FunctionalSampler", "PriorInfo", "fsghmc", "fsgld",
    "functional_posterior", "per_class_kernel", "rbf_kernel", "MCLMCSampler", "MILEInfo", "ess_geyer",
    "mclmc_sampler", "mile", "PSGLDState", "psgld",
]
