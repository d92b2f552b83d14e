"""SGNHT (stochastic gradient Nosé–Hoover thermostat, Ding et al. 2014; `l2e.sgnht`): one chain of G updates
with the SGHMC sample schedule; the scalar thermostat ξ replaces SGHMC's friction and adapts so that the kinetic
temperature tracks T = 1; tuned over the learning rate."""
from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, always, check_grid, check_positive, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain

__all__ = ["METHOD", "SGNHTSettings", "run_sgnht"]


@dataclasses.dataclass(frozen=True)
class SGNHTSettings:
    """lrs: learning rates lr = ε²·N (mean-loss units); diffusion: A, the injected noise's friction-equivalent
    (SGHMC's C) and ξ's initial value."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    diffusion: float = 1.0

    def __post_init__(self):
        check_grid(self, "settings.sgnht", "lrs")
        check_positive(self, "settings.sgnht", "diffusion")


def _kernel(task):
    step = l2e.sgnht.build_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], args["diffusion"])

    return kernel


def run_sgnht(ctx, key, hp: dict):
    """One SGNHT chain; hp: learning_rate.  The record holds the final thermostat ξ."""
    diffusion = float(ctx.settings.diffusion)
    hp = {**hp, "diffusion": diffusion, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
    args = {**lr_args(hp), "diffusion": jnp.asarray(diffusion, jnp.float32)}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("sgnht",), lambda: _kernel(ctx.task),
                            functools.partial(l2e.sgnht.init, thermostat=diffusion), args,
                            final_info=lambda st: {"final_thermostat": float(st.thermostat)})


METHOD = Method("sgnht", SGNHTSettings, run_sgnht, grid=lr_grid, schedule=lambda cfg, s: single_chain_schedule(cfg),
                grids=dict(full=dict(lrs=(0.003, 0.01, 0.03, 0.1))), batch_chains=True,
                card=lambda post, eps, c, smin, steps: (l2e.sgnht(post, eps**2 * post.data_size, c), always),
                step_cost=lambda post, fpost: {"sgnht": l2e.sgnht(post, 0.05)})
