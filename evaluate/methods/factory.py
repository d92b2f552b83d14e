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

__all__ = ["ARG_NAMES", "probe_sampler", "sampler_method", "single_chain_method"]

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
                  grids=dict(grids or {}), **{"batch_chains": True, **fields})


def _points(grid, name: str) -> list[dict]:
    """A user sampler's `grid` attribute as tuning points: None -> [{}]; {hp: values} -> their product; a list of
    {hp: value} dicts as is. TypeError naming `name` for anything else (values must be numbers or strings)."""
    import itertools

    if grid is None:
        return [{}]
    if isinstance(grid, dict):
        keys = list(grid)
        values = [list(v) if isinstance(v, (list, tuple)) else [v] for v in grid.values()]
        points = [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    elif isinstance(grid, (list, tuple)) and all(isinstance(p, dict) for p in grid):
        points = [dict(p) for p in grid]
    else:
        raise TypeError(f"{name}.grid must be a dict of hyperparameter -> values or a list of dicts, got "
                        f"{type(grid).__name__}")
    ok = lambda v: isinstance(v, (int, float, str)) and not isinstance(v, bool)  # noqa: E731
    if not points or not all(isinstance(k, str) and ok(v) for p in points for k, v in p.items()):
        raise TypeError(f"{name}.grid must hold at least one point of str -> number (or string) values")
    return points


def probe_sampler(factory, name: str, point: dict) -> None:
    """Check a user's sampler factory before anything runs: factory(posterior, **point) returns something with
    init(position) and step(key, state, minibatch) -> (state, info) whose state has the structure, shapes and dtypes
    of init's (traced abstractly on a 3-parameter Gaussian posterior: nothing is computed). TypeError naming what
    is wrong."""
    import inspect

    import jax

    from l2e.types import Posterior

    try:
        inspect.signature(factory).bind(object(), **point)
    except TypeError as e:
        raise TypeError(f"{name} must be a factory (posterior, **hyperparameters) -> sampler taking "
                        f"{sorted(point) or 'no hyperparameters'}: {e}") from None
    post = Posterior(lambda p, b: 0.5 * jnp.mean(jnp.sum((b - p["w"]) ** 2, -1)),
                     lambda p: -0.5 * jnp.sum(p["w"] ** 2), 100)
    alg = factory(post, **point)
    if not (callable(getattr(alg, "init", None)) and callable(getattr(alg, "step", None))):
        raise TypeError(f"{name}(posterior, …) returned a {type(alg).__name__}, not a sampler with init and step "
                        "(an l2e.SamplingAlgorithm)")
    position = {"w": jnp.zeros(3, jnp.float32)}
    state = jax.eval_shape(alg.init, position)
    out = jax.eval_shape(alg.step, jax.random.PRNGKey(0), state, jnp.zeros((4, 3), jnp.float32))
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{name}'s step must return (state, info), got {type(out).__name__}")
    want = jax.tree.map(lambda s: (s.shape, s.dtype), state)
    got = jax.tree.map(lambda s: (s.shape, s.dtype), out[0])
    if jax.tree.structure(state) != jax.tree.structure(out[0]) or want != got:
        raise TypeError(f"{name}'s step returns a state unlike its init's (structure, shapes or dtypes differ)")


def sampler_method(name: str, factory) -> Method:
    """The Method of a user's sampler factory `factory(posterior, **hyperparameters) -> SamplingAlgorithm`
    (`--method pkg.module:NAME`, $L2E_METHODS): one chain per run with the SGHMC sample schedule, tuned over
    `factory.grid` when it has one ({hp: values}, their product, or a list of points; else one run with no
    hyperparameters), each point compiled on its own (its hyperparameters are the factory's, fixed per point). On
    the sampler card at its grid's first point. Checked by `probe_sampler` when registered.

    Args:
      name: the method's name (the factory's attribute name).
      factory: the sampler factory.
    Returns:
      the Method (temperature 1; settings: an empty dataclass — the grid is the factory's).
    """
    import dataclasses

    from evaluate.methods.base import always

    if not callable(factory):
        raise TypeError(f"{name} is a {type(factory).__name__}, neither an evaluate.methods.Method nor a sampler "
                        "factory (posterior, **hyperparameters) -> SamplingAlgorithm")
    points = _points(getattr(factory, "grid", None), name)
    probe_sampler(factory, name, points[0])
    settings = dataclasses.make_dataclass(f"{name.title().replace('_', '')}Settings", [], frozen=True)

    def run(ctx, key, hp: dict):
        point = {k: hp[k] for k in points[0] if k in hp} or dict(points[0])
        alg = factory(ctx.task.posterior, **point)
        hp = {**hp, **point, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0}
        kernel = lambda key, state, batch, args: alg.step(key, state, batch)  # noqa: E731
        return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), (name, tuple(sorted(point.items()))),
                                lambda: kernel, alg.init, {})

    return Method(name, settings, run, grid=(lambda s: [dict(p) for p in points]) if points != [{}] else None,
                  schedule=_schedule, batch_chains=True,
                  card=lambda post, eps, c, smin, steps: (factory(post, **points[0]), always))
