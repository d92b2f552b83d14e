"""pSGLD (docs/samplers.md, pSGLD): RMSprop-preconditioned SGLD, Γ dropped, T = 1; one chain of G updates with the SGHMC
sample schedule; lr in mean-loss units."""
from __future__ import annotations

import dataclasses

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, always, check_grid, check_in, check_positive, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain

__all__ = ["METHOD", "PSGLDSettings", "run_psgld"]


@dataclasses.dataclass(frozen=True)
class PSGLDSettings:
    """lrs: learning rates (ε·N); rho: RMSprop decay ρ ∈ [0, 1]; lam: stabiliser λ > 0."""

    lrs: tuple[float, ...] = (0.001, 0.003, 0.01)
    rho: float = 0.99
    lam: float = 1e-5

    def __post_init__(self):
        check_grid(self, "settings.psgld", "lrs")
        check_positive(self, "settings.psgld", "lam")
        check_in(self, "settings.psgld", "rho", 0.0, 1.0)


def _kernel(task, rho: float, lam: float):
    step = l2e.psgld.build_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], rho, lam)

    return kernel


def run_psgld(ctx, key, hp: dict):
    """One pSGLD chain; hp: learning_rate."""
    rho, lam = ctx.settings.rho, ctx.settings.lam
    hp = {**hp, "rho": rho, "lam": lam, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("psgld", rho, lam),
                            lambda: _kernel(ctx.task, rho, lam), l2e.psgld.init, lr_args(hp))


METHOD = Method("psgld", PSGLDSettings, run_psgld, grid=lr_grid, schedule=lambda cfg, s: single_chain_schedule(cfg),
                audit=True, batch_chains=True, grids=dict(every=dict(lrs=(0.0003, 0.001, 0.003)), full=dict(lrs=(0.0003, 0.001, 0.003, 0.01)),
                                       smoke=dict(lrs=(0.003,))),
                # the card's lr: G·lr/N ≈ h where the gradient is of scale 1/σ_min
                card=lambda post, eps, c, smin, steps: (l2e.psgld(post, eps), always),
                step_cost=lambda post, fpost: {"psgld": l2e.psgld(post, 1e-3)})
