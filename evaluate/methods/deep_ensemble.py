"""Deep ensemble: K members, each from its own init and minibatch sequence, trained for G/K updates of SGD with
momentum (optax.sgd, heavy ball) and a cosine decay of the learning rate to 0, on the MAP objective
mean NLL − log p(θ)/N (the Gaussian prior acts as weight decay); each member's final parameters are one sample.
Its final run is also the warm start of the full-batch methods (docs/samplers.md, MCLMC and the MILE recipe)."""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import optax

from evaluate.budget import member_schedule
from evaluate.methods.base import Method, check_grid, check_in, lr_grid
from evaluate.methods.driver import lr_args, run_members
from l2e.types import all_finite, tree_vdot

__all__ = ["DEInfo", "DEState", "DeepEnsembleSettings", "METHOD", "run_deep_ensemble"]


@dataclasses.dataclass(frozen=True)
class DeepEnsembleSettings:
    """lrs: initial learning rates (mean-loss units); momentum: heavy-ball momentum ∈ [0, 1)."""

    lrs: tuple[float, ...] = (0.03, 0.1, 0.3)
    momentum: float = 0.9

    def __post_init__(self):
        check_grid(self, "settings.deep_ensemble", "lrs")
        check_in(self, "settings.deep_ensemble", "momentum", 0.0, 1.0, closed=False)


class DEState(NamedTuple):
    """Deep-ensemble member state: parameters and the optax optimiser state."""

    position: Any
    opt_state: Any


class DEInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update parameters (the MAP objective less its prior term);
    is_finite: the loss and the updated parameters are finite."""

    loss: jax.Array
    is_finite: jax.Array


def _optimizer(lr, steps: int, momentum: float) -> optax.GradientTransformation:
    return optax.sgd(optax.cosine_decay_schedule(lr, steps), momentum=momentum)


def _kernel(task, steps: int, momentum: float):
    n = task.data_size

    def objective(params, batch):
        nll = task.nll(params, batch)
        return nll - task.log_prior(params) / n, nll

    def kernel(key, state, batch, args):
        del key  # deterministic given the minibatch
        (_, nll), grads = jax.value_and_grad(objective, has_aux=True)(state.position, batch)
        updates, opt_state = _optimizer(args["lr"], steps, momentum).update(grads, state.opt_state, state.position)
        position = optax.apply_updates(state.position, updates)
        return DEState(position, opt_state), DEInfo(nll, all_finite(nll, tree_vdot(position, position)))

    return kernel


def run_deep_ensemble(ctx, key, hp: dict):
    """K members of G/K updates; hp: learning_rate."""
    schedule = member_schedule(ctx.cfg)
    steps, momentum = schedule.num_steps, ctx.settings.momentum
    hp = {**hp, "optimizer": f"sgd(momentum={momentum}) + cosine decay to 0", "steps_per_member": steps,
          "members": ctx.cfg.num_samples}
    opt = _optimizer(1.0, steps, momentum)  # the state's structure does not depend on lr
    return run_members(ctx, key, hp, schedule, ("deep_ensemble", steps, momentum),
                       lambda: _kernel(ctx.task, steps, momentum), lambda p: DEState(p, opt.init(p)), lr_args(hp))


METHOD = Method("deep_ensemble", DeepEnsembleSettings, run_deep_ensemble, grid=lr_grid, chain_allocation=False,
                schedule=lambda cfg, s: member_schedule(cfg), audit=True,
                grids=dict(every=dict(lrs=(0.003, 0.01, 0.03, 0.1)), smoke=dict(lrs=(0.1,))))
