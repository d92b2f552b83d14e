"""What the control-variate rivals share (`sgld_cv`, `sghmc_cv`; l2e.control_variates, docs/samplers.md § SGLD-CV
and SGHMC-CV): the budget split of a chain, the anchor search, the runner, the card and step-cost builders.

One chain (of a chain allocation's M: each chain finds its own anchor from its own share G/M) within the shared budget
of G minibatch gradients of B examples, spent in this order:
1. the anchor search: S = round(anchor_fraction · (G − F)) updates of heavy-ball SGD (l2e.control_variates.
   build_sgd_kernel: momentum `anchor_momentum`, the sampler's tuned learning rate — mean-loss units, stable wherever
   the sampler is — decayed to 0 by a cosine) from task.init_params(init key), one minibatch gradient each;
2. the full-data gradient at the anchor θ̂: one pass over the n training examples, counted as F = ⌈n/B⌉ minibatch
   gradients;
3. the chain from θ̂: s = (G − F − S) / 2 updates of two minibatch gradients each (at θ and at θ̂), the odd gradient
   left by the halving going to the anchor search, so that S + F + 2s = G; K states kept s // K updates apart, the
   last after update s (the SGD search is the burn-in, as in Baker et al., whose chains start at θ̂).
A budget that cannot pay F and K updates (G − F < 2K) is overspent, never hidden: the run takes K updates after F
(and S = round(anchor_fraction · max(G − F, 0))), its grad_evals count what ran and hyperparameters.gradients says
"over_budget" — so on the budget curves such a point lies at its true cost. cfg.thinning is not used.

grad_evals = S + F + 2s; seconds: the anchor search and the chain, compilation excluded; flops_per_step: one CV update
(two gradients); a probe run (Run.probe, wall-time budgets) reports seconds per gradient evaluation (half an update,
the unit of G), the anchor's cost taken as that many gradients.

Batched (Method.batch_chains: the M chains of a chain allocation, registry.run_many's seeds and grid points): the
runner hands run_single_chain its chains' keys with a start (`_anchors`, batched.ChainCall.start) that runs every
chain's anchor search of a vmapped batch as one program — the SGD chunk vmapped over the chains (each its own start,
minibatch key and learning rate), then the full-data pass vmapped — before the sampling chunks; chain c keeps the
keys, start, minibatches and gradient count of the one-at-a-time path (tests/test_control_variates.py bounds the
difference), its seconds the batch's anchor search and chain over its real chains.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from base.io import ConfigError
from evaluate.methods.base import Method, always, check_in
from evaluate.methods.batch import ChainBatch
from evaluate.methods.batched import Deferred
from evaluate.methods.driver import chain_keys, chunk_fn, run_single_chain
from evaluate.methods.factory import ARG_NAMES
from l2e import control_variates as cv
from l2e.chains import ChainSchedule, run_chain
from l2e.types import SamplingAlgorithm

__all__ = ["ANCHOR_FRACTION", "ANCHOR_MOMENTUM", "CVPlan", "FULL_CHUNK", "check_anchor", "cv_plan", "make_method"]

ANCHOR_FRACTION = 0.25
"""The default share of G − F spent by the anchor's SGD (the rest samples at two gradients per update)."""
ANCHOR_MOMENTUM = 0.9
"""The default heavy-ball momentum of the anchor's SGD (the deep ensemble's)."""
FULL_CHUNK = 2048
"""Training examples per gradient call of the full-data pass (l2e.control_variates.full_nll_grad's chunk_size)."""


def check_anchor(settings, where: str) -> None:
    """The anchor fields every CV settings dataclass has: anchor_fraction and anchor_momentum in [0, 1)."""
    for name in ("anchor_fraction", "anchor_momentum"):
        if isinstance(getattr(settings, name), bool):
            raise ConfigError(f"{where}.{name} must be a number in [0, 1), got {getattr(settings, name)}")
        check_in(settings, where, name, 0.0, 1.0, closed=False)


class CVPlan(NamedTuple):
    """One chain's budget split (module doc): anchor_steps S, full_gradient F = ⌈n/B⌉, steps s (2 gradients each),
    thinning; budget: the G it was planned for."""

    anchor_steps: int
    full_gradient: int
    steps: int
    thinning: int
    budget: int

    @property
    def total(self) -> int:
        """S + F + 2s: the minibatch gradients the chain spends."""
        return self.anchor_steps + self.full_gradient + 2 * self.steps

    def record(self) -> dict:
        return {"anchor_sgd": self.anchor_steps, "full_gradient": self.full_gradient, "sampling": 2 * self.steps,
                "total": self.total, "budget": self.budget, "over_budget": self.total > self.budget}


def cv_plan(num_steps: int, num_samples: int, rows: int, batch_size: int, anchor_fraction: float) -> CVPlan:
    """The budget split of one chain of G = num_steps gradients keeping K = num_samples states (module doc)."""
    full = cv.full_gradient_cost(rows, batch_size)
    avail = max(num_steps - full, 0)
    anchor = int(round(anchor_fraction * avail))
    steps = (avail - anchor) // 2
    if steps >= num_samples:
        anchor = avail - 2 * steps
    steps = max(steps, num_samples)
    return CVPlan(anchor, full, steps, max(1, steps // num_samples), num_steps)


def _rows(data) -> int:
    return int(jax.tree.leaves(data)[0].shape[0])


def _sgd_kernel(task):
    step = cv.build_sgd_kernel(task.posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], args["momentum"], args["num_steps"])

    return kernel


def _find_anchor(ctx, params, key, learning_rate: float, plan: CVPlan) -> tuple[cv.Anchor, float]:
    """(the anchor of one chain from `params`, wall seconds after compilation): plan.anchor_steps SGD updates
    (minibatch keys from `key`, as a chain's), then the full-data gradient there."""
    task, cfg = ctx.task, ctx.cfg
    state = cv.sgd_init(params)
    full = ctx.cache.get(("cv_full_grad", task.spec), lambda: jax.jit(functools.partial(
        cv.anchor_at, task.posterior, chunk_size=FULL_CHUNK)).lower(params, task.train_data).compile())
    run = None
    if plan.anchor_steps:
        schedule = ChainSchedule(plan.anchor_steps, 1, plan.anchor_steps, cfg.batch_size, cfg.chunk)
        ck, fn = chunk_fn(ctx, ("cv_anchor_sgd",), lambda: _sgd_kernel(task), schedule)
        args = {"lr": jnp.asarray(learning_rate, jnp.float32),
                "momentum": jnp.asarray(ctx.settings.anchor_momentum, jnp.float32),
                "num_steps": jnp.asarray(plan.anchor_steps, jnp.int32)}
        ctx.cache.warm_up(ck, fn, state, task.train_data, args)
        run = functools.partial(run_chain, fn, key=key, data=task.train_data, args=args, schedule=schedule)
    t0 = time.perf_counter()
    if run is not None:
        state = run(state).state
    anchor = jax.block_until_ready(full(state.position, task.train_data))
    return anchor, time.perf_counter() - t0


def _anchors(ctx, sampler, plan: CVPlan, state, keys, args):
    """The batched start of a vmapped batch of CV chains (batched.ChainCall.start): chain c's anchor searched from
    its placeholder state's position (task.init_params of its init key) as `_find_anchor` searches it — the SGD
    minibatches from the first half of split(chain key c), its learning rate args["lr"][c] — every chain's SGD
    updates in one vmapped chunk and the full-data pass vmapped; -> (the sampler states at the anchors, the second
    halves of the splits (the sampling chains' keys), wall seconds after compilation)."""
    task, cfg = ctx.task, ctx.cfg
    n = int(np.shape(keys)[0])
    split = jax.vmap(jax.random.split)(keys)
    anchor_keys, sample_keys = split[:, 0], split[:, 1]
    position = state.position
    sgd = cv.SGDState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((n,), jnp.int32))
    full = ctx.cache.get(("cv_full_grad", task.spec, "batched"), lambda: jax.jit(jax.vmap(functools.partial(
        cv.anchor_at, task.posterior, chunk_size=FULL_CHUNK), in_axes=(0, None))))
    # one discarded call per batch width, so that the timed pass below is not its compilation
    ctx.cache.get(("cv_full_grad", task.spec, "batched", "warm", n),
                  lambda: jax.block_until_ready(full(position, task.train_data)) is not None)
    run = None
    if plan.anchor_steps:
        schedule = ChainSchedule(plan.anchor_steps, 1, plan.anchor_steps, cfg.batch_size, cfg.chunk)
        sgd_args = {"lr": args["lr"], "momentum": jnp.full((n,), ctx.settings.anchor_momentum, jnp.float32),
                    "num_steps": jnp.full((n,), plan.anchor_steps, jnp.int32)}
        axes = jax.tree.map(lambda _: 0, sgd_args)  # every leaf per chain (batched.arg_axes of one chain's args)
        ck, fn = chunk_fn(ctx, ("cv_anchor_sgd",), lambda: _sgd_kernel(task), schedule, batched=True, arg_axes=axes)
        ctx.cache.warm_up(ck, fn, sgd, task.train_data, sgd_args, chains=n)
        run = functools.partial(run_chain, fn, key=anchor_keys, data=task.train_data, args=sgd_args,
                                schedule=schedule, info_axis=1)
    t0 = time.perf_counter()
    if run is not None:
        sgd = run(sgd).state
    anchor = jax.block_until_ready(full(sgd.position, task.train_data))
    seconds = time.perf_counter() - t0
    return jax.vmap(sampler.init)(anchor.position, anchor), sample_keys, seconds


def _placeholder(sampler, params):
    """The sampler's state at `params` with a zero anchor there: a probe's start (the step's cost does not depend on
    where the anchor is) and a batched chain's before `_anchors`."""
    return sampler.init(params, cv.Anchor(params, jax.tree.map(jnp.zeros_like, params)))


def _run(ctx, key, hp: dict, name: str, sampler, grid, hyper: tuple[str, ...], make_kernel):
    """One CV chain, or a batch of them (a ChainBatch or Deferred key: `_anchors`) (module doc); hp: the grid's
    hyperparameters (default: its first point)."""
    s, cfg, task = ctx.settings, ctx.cfg, ctx.task
    first = grid(s)[0]
    values = {h: float(hp.get(h, first[h])) for h in hyper}
    plan = cv_plan(cfg.num_steps, cfg.num_samples, _rows(task.train_data), cfg.batch_size, s.anchor_fraction)
    schedule = ChainSchedule(plan.steps, cfg.num_samples, plan.thinning, cfg.batch_size, cfg.chunk)
    record = {**hp, **values, "thinning": plan.thinning, "temperature": 1.0, "sampling_steps": plan.steps,
              "anchor": {"sgd_steps": plan.anchor_steps, "learning_rate": values["learning_rate"],
                         "momentum": s.anchor_momentum, "decay": "cosine to 0",
                         "full_gradient_examples": _rows(task.train_data)},
              "gradients": plan.record()}
    args = {ARG_NAMES.get(h, h): jnp.asarray(v, jnp.float32) for h, v in values.items()}
    if isinstance(key, (ChainBatch, Deferred)):  # the runner's result is run_single_chain's (Method.batch_chains)
        return run_single_chain(ctx, key, record, schedule, (name,), lambda: make_kernel(task),
                                functools.partial(_placeholder, sampler), args,
                                start=functools.partial(_anchors, ctx, sampler, plan), grad_evals=plan.total)
    init_key, chain_key = chain_keys(key)
    anchor_key, sample_key = jax.random.split(chain_key)
    spent = {"seconds": 0.0}

    def init_fn(params):
        if ctx.probe:
            return _placeholder(sampler, params)
        anchor, spent["seconds"] = _find_anchor(ctx, params, anchor_key, values["learning_rate"], plan)
        return sampler.init(anchor.position, anchor)

    res = run_single_chain(ctx, (init_key, sample_key), record, schedule, (name,), lambda: make_kernel(task),
                           init_fn, args)
    if ctx.probe:  # seconds per gradient evaluation (half an update), the unit of G
        return dataclasses.replace(res, measured_seconds_per_step=res.measured_seconds_per_step / 2)
    return dataclasses.replace(res, grad_evals=plan.total, seconds=res.seconds + spent["seconds"])


def _with_anchor(sampler, kernel: Callable, anchor_of: Callable) -> SamplingAlgorithm:
    """A SamplingAlgorithm of a CV sampler whose init(position) builds the anchor with anchor_of(position)."""
    return SamplingAlgorithm(lambda position: sampler.init(position, anchor_of(position)), kernel)


def make_method(name: str, sampler, settings: type, grid, hyper: tuple[str, ...], card_hyper: Callable,
                cost_hyper: tuple[float, ...], **fields) -> Method:
    """The Method of a CV sampler (module doc).

    Args:
      name: the registry key; sampler: l2e.sgld_cv or l2e.sghmc_cv; settings: its settings dataclass (with
        anchor_fraction and anchor_momentum); grid: settings -> tuning points holding every name of `hyper`, the
        kernel's hyperparameters in argument order ("learning_rate" first).
      card_hyper: (posterior, eps, friction, sigma_min) -> the kernel's hyperparameters on the sampler card, where the
        anchor is the chain's start with the exact gradient (the card's noise-free minibatch is ξ = 0, so the CV
        estimate is exact there: the card's noise does not depend on θ).
      cost_hyper: the hyperparameters of bench.step_cost's row (the anchor's values do not change the step's cost).
      **fields: other Method fields (grids, kinetic_check, …).
    """

    def make_kernel(task):
        step = sampler.build_kernel(task.posterior)

        def kernel(key, state, batch, args):
            return step(key, state, batch, *(args[ARG_NAMES.get(h, h)] for h in hyper))

        return kernel

    def run(ctx, key, hp):
        return _run(ctx, key, hp, name, sampler, grid, hyper, make_kernel)

    def card(post, eps, c, smin, steps):
        kernel = sampler.build_kernel(post)
        values = card_hyper(post, eps, c, smin)
        exact = lambda p: cv.anchor_at(post, p, jnp.zeros_like(p["x"]))  # noqa: E731
        return _with_anchor(sampler, lambda k, st, b: kernel(k, st, b, *values), exact), always

    def step_cost(post, fpost):
        kernel = sampler.build_kernel(post)
        zero = lambda p: cv.Anchor(p, jax.tree.map(jnp.zeros_like, p))  # noqa: E731
        return {name: _with_anchor(sampler, lambda k, st, b: kernel(k, st, b, *cost_hyper), zero)}

    run.__name__ = run.__qualname__ = f"run_{name}"
    return Method(name, settings, run, grid=grid, card=card, step_cost=step_cost,
                  batch_chains=True, **fields)
