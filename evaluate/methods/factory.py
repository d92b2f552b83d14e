"""The common case of a rival: one chain of a minibatch sampler whose kernel takes its tuned hyperparameters as
traced scalars — `single_chain_method` builds its whole `Method`, so the rival's evaluation module is its settings
dataclass and one call (evaluate/methods/sghmc.py, baoab.py, sgld.py).

The chain: G updates from task.init_params(init key), K samples `cfg.sample_thinning` updates apart ending at update
G (the SGHMC sample schedule, evaluate.budget.single_chain_schedule), one compiled chunk for the whole grid (the
hyperparameters are float32 call arguments)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import jax.numpy as jnp

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method
from evaluate.methods.driver import run_single_chain

__all__ = ["ARG_NAMES", "single_chain_method"]

ARG_NAMES = {"learning_rate": "lr"}
"""The chunk-argument name of a hyperparameter whose name differs from its grid key."""


def _schedule(cfg, settings):
    return single_chain_schedule(cfg)


def single_chain_method(name: str, sampler, settings: type, grid: Callable[[Any], list[dict]], *,
                        hyper: tuple[str, ...] = ("learning_rate",), temperature: float = 1.0,
                        grids: Mapping[str, Mapping] | None = None, **fields) -> Method:
    """The Method `name` of a single-chain minibatch sampler.

    Args:
      name: the registry key.
      sampler: the sampler (an `l2e` SamplerAPI, or anything with `init(position)` and
        `build_kernel(posterior) -> kernel(key, state, minibatch, *hyper values)`).
      settings: the method's frozen settings dataclass (its tuning grid and checks).
      grid: settings -> the tuning points, each a dict holding every name of `hyper`.
      hyper: the grid keys passed to the kernel, in its argument order, as float32 scalars (traced).
      temperature: the T the sampler targets (recorded; the kinetic check reads it).
      grids: Method.grids (the presets' and the tests' settings).
      **fields: any other Method field (kinetic_check, card, step_cost, audit, …).
    Returns:
      the Method; its runner records hp (each hyperparameter as a float), the thinning and the temperature.
    """

    def make_kernel(task):
        step = sampler.build_kernel(task.posterior)

        def kernel(key, state, batch, args):
            return step(key, state, batch, *(args[ARG_NAMES.get(h, h)] for h in hyper))

        return kernel

    def run(ctx, key, hp: dict):
        first = grid(ctx.settings)[0]
        hp = {**hp, **{h: float(hp.get(h, first[h])) for h in hyper}, "thinning": ctx.cfg.sample_thinning,
              "temperature": temperature}
        args = {ARG_NAMES.get(h, h): jnp.asarray(hp[h], jnp.float32) for h in hyper}
        return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), (name,),
                                lambda: make_kernel(ctx.task), sampler.init, args)

    run.__name__ = run.__qualname__ = f"run_{name}"
    run.__doc__ = f"One {name} chain; hp: {', '.join(hyper)} (default: the grid's first point)."
    return Method(name, settings, run, grid=grid, schedule=_schedule, temperature=temperature,
                  grids=dict(grids or {}), **fields)
