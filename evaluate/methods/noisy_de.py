"""Noisy ("unbiased") deep ensemble (docs/samplers.md, Evaluation-only baselines, parallel SGHMC): the deep-ensemble pipeline (K members, same
inits and minibatch keys, G/K updates, momentum, cosine-decayed lr) with the SGHMC noise of T = 1 added to the
velocity; the last iterate of each member is one sample."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from evaluate.budget import member_schedule
from evaluate.methods.base import Method, check_grid, check_in, lr_grid
from evaluate.methods.driver import lr_args, run_members
from l2e.diffusions import sgd_momentum
from l2e.types import all_finite, normal_like, tree_vdot

__all__ = ["METHOD", "NoisyDEInfo", "NoisyDESettings", "NoisyDEState", "run_noisy_de"]


@dataclasses.dataclass(frozen=True)
class NoisyDESettings:
    """lrs: initial learning rates (mean-loss units); momentum ∈ [0, 1) (a = 1 − momentum)."""

    lrs: tuple[float, ...] = (0.03, 0.1, 0.3)
    momentum: float = 0.9

    def __post_init__(self):
        check_grid(self, "settings.noisy_de", "lrs")
        check_in(self, "settings.noisy_de", "momentum", 0.0, 1.0, closed=False)


class NoisyDEState(NamedTuple):
    """Member state: parameters, velocity v (parameter units per update), update count."""

    position: Any
    velocity: Any
    step: jax.Array


class NoisyDEInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update parameters; is_finite: the loss and the new parameters are
    finite."""

    loss: jax.Array
    is_finite: jax.Array


def _kernel(task, steps: int, momentum: float, temperature: float = 1.0):
    """SGHMC in SGD-with-momentum form (`l2e.diffusions.sgd_momentum`; docs/samplers.md, Units and conventions), mean-loss units,
    a = 1 − momentum:  v ← momentum·v − (lr_t/N)·∇Ũ + N(0, 2·a·lr_t·T/N),  θ ← θ + v  (∇Ũ/N = ḡ − ∇log p(θ)/N),
    lr_t = lr·cosine decay to 0 over the member's updates.  T = 0 is heavy-ball SGD (lr inside the velocity;
    optax's sgd puts it outside — identical for a constant lr)."""
    n = task.data_size
    schedule = optax.cosine_decay_schedule(1.0, steps)

    def kernel(key, state, batch, args):
        lr = args["lr"] * schedule(state.step)
        loss, _, grad_u = task.posterior.value_and_potential_grad(state.position, batch)
        noise = normal_like(key, state.position)
        std = jnp.sqrt(2.0 * (1.0 - momentum) * lr * temperature / n)
        update = functools.partial(sgd_momentum, momentum=momentum, step_size=lr / n, noise_std=std)
        vel = jax.tree.map(update, state.velocity, grad_u, noise)
        pos = jax.tree.map(lambda x, v: x + v, state.position, vel)
        info = NoisyDEInfo(loss, all_finite(loss, tree_vdot(pos, pos)))
        return NoisyDEState(pos, vel, state.step + 1), info

    return kernel


def run_noisy_de(ctx, key, hp: dict):
    """K members of G/K updates; hp: learning_rate."""
    schedule = member_schedule(ctx.cfg)
    steps, momentum = schedule.num_steps, ctx.settings.momentum
    hp = {**hp, "optimizer": f"SGHMC in SGD-momentum form (momentum={momentum}, T=1) + cosine decay to 0",
          "steps_per_member": steps, "members": ctx.cfg.num_samples, "temperature": 1.0}

    def init(p):
        return NoisyDEState(p, jax.tree.map(jnp.zeros_like, p), jnp.zeros((), jnp.int32))

    return run_members(ctx, key, hp, schedule, ("noisy_de", steps, momentum),
                       lambda: _kernel(ctx.task, steps, momentum), init, lr_args(hp))


METHOD = Method("noisy_de", NoisyDESettings, run_noisy_de, grid=lr_grid, schedule=lambda cfg, s: member_schedule(cfg),
                chain_allocation=False, grids=dict(every=dict(lrs=(0.003, 0.01, 0.03, 0.1)), smoke=dict(lrs=(0.1,))))
