"""Scale-adapted SGHMC (l2e.adaptive_sghmc; Springenberg et al. 2016): one chain of G updates at its published
defaults (ε = 1e-2, momentum decay 0.05) — no grid — whose preconditioner and noise adapt during the burn-in (the
updates before the sampling window) and are frozen for the window; the SGHMC sample schedule."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import l2e.adaptive_sghmc
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, always, check_positive
from evaluate.methods.driver import run_single_chain

__all__ = ["AdaptiveSGHMCSettings", "METHOD", "run_adaptive_sghmc"]

DEFAULTS = l2e.adaptive_sghmc.DEFAULTS


@dataclasses.dataclass(frozen=True)
class AdaptiveSGHMCSettings:
    """step_size: ε per update; mdecay: momentum decay per update (both the published defaults; not tuned)."""

    step_size: float = DEFAULTS["step_size"]
    mdecay: float = DEFAULTS["mdecay"]

    def __post_init__(self):
        check_positive(self, "settings.adaptive_sghmc", "step_size", "mdecay")


def _kernel(task, step_size: float, mdecay: float):
    """The chunk kernel; the burn-in is the call argument args["burn_in"] (traced: one compiled chunk serves every
    budget)."""
    def kernel(key, state, batch, args):
        step = l2e.adaptive_sghmc.build_kernel(task.posterior, args["burn_in"])
        return step(key, state, batch, step_size, mdecay)

    return kernel


def run_adaptive_sghmc(ctx, key, hp: dict):
    """One scale-adapted SGHMC chain at the settings' (published) constants; the burn-in is the schedule's."""
    schedule = single_chain_schedule(ctx.cfg)
    burn_in = max(1, schedule.num_steps - schedule.num_samples * schedule.thinning)
    s = ctx.settings
    hp = {**hp, "step_size": s.step_size, "mdecay": s.mdecay, "burn_in": burn_in,
          "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    static = (float(s.step_size), float(s.mdecay))
    return run_single_chain(ctx, key, hp, schedule, ("adaptive_sghmc",) + static,
                            lambda: _kernel(ctx.task, *static), l2e.adaptive_sghmc.init,
                            {"burn_in": jnp.asarray(burn_in, jnp.int32)})


METHOD = Method("adaptive_sghmc", AdaptiveSGHMCSettings, run_adaptive_sghmc,
                schedule=lambda cfg, s: single_chain_schedule(cfg), audit=True, batch_chains=True,
                # the card: its published constants (no ε, C of the card), burn-in the first fifth
                card=lambda post, eps, c, smin, steps: (l2e.adaptive_sghmc(post, burn_in=steps // 5), always),
                # the timed calls start at update 0: the plain row is the burn-in step, "(window)" the frozen one
                step_cost=lambda post, fpost: {"adaptive_sghmc": l2e.adaptive_sghmc(post, burn_in=10**9),
                                               "adaptive_sghmc (window)": l2e.adaptive_sghmc(post, burn_in=1)})
