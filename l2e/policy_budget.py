"""Policy-L2E's budget arithmetic (l2e.policy, which re-exports it): where the adaptation points fall, what they cost
in gradients, and how a budget of G minibatch gradients over M chains splits into updates, a freeze and K draws.
Every `config` here is an l2e.policy.PolicyConfig."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from l2e.chains import ChainSchedule

__all__ = ["BudgetPlan", "adaptation_gradients", "adaptation_points", "plan_budget", "split_budget"]


def adaptation_points(config) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ends, gather_starts): the adaptation points b₁ < … < b_P = freeze_step (b_p = round(p·freeze/P)) and, for
    each phase p < P, the first update of its gathering window [g_p, b_{p+1}): the last gather_fraction of the
    phase, at least 2 updates (a within-chain variance needs two states; every phase has ≥ 2, `split_budget`)."""
    ends = tuple(int(round(p * config.freeze_step / config.phases)) for p in range(1, config.phases + 1))
    starts = (0,) + ends[:-1]
    gathers = tuple(e - min(e - s, max(2, int(round(config.gather_fraction * (e - s))))) for s, e in zip(starts, ends))
    return ends, gathers


def adaptation_gradients(config, chains: int = 1) -> int:
    """Gradient-equivalents the adaptation points spend beyond the chains' updates: 2 per Hessian-vector product
    (forward over reverse) at each of the `phases` points — power_iterations + 1 of them on one chain ("first"), on
    each of `chains` ("all"), or on chain 0 and then one per chain (the Rayleigh quotients of "warm")."""
    per_point = {"first": config.power_iterations + 1, "all": (config.power_iterations + 1) * chains,
                 "warm": config.power_iterations + 1 + chains}[config.curvature]
    return 2 * per_point * config.phases


def split_budget(config, gradients: int, draws: int, chains: int) -> tuple[int, int, int, int]:
    """(updates per chain S, draws per chain k, thinning, freeze_step) of a run of `gradients` minibatch gradients
    and `draws` draws over `chains` chains: the adaptation points' gradients first, S = ⌊(G − those)/M⌋, k =
    max(1, ⌊K/M⌋) draws per chain evenly over the last window_fraction of its updates, the freeze where they start.
    ValueError when the freeze would leave fewer than 2 updates per phase."""
    steps = (gradients - adaptation_gradients(config, chains)) // chains
    per_chain = max(1, draws // chains)
    thinning = max(1, int(config.window_fraction * steps) // per_chain)
    freeze = steps - per_chain * thinning
    if freeze < 2 * config.phases:
        raise ValueError(f"a budget of {gradients} gradients leaves {steps} updates per chain for {chains} chains, "
                         f"too few for {config.phases} adaptation phases")
    return steps, per_chain, thinning, freeze


class BudgetPlan(NamedTuple):
    """steps: updates per chain; freeze_step: the window's first update; sample_steps: the numbers of updates done
    (1-based counts, ascending, the last = steps) after which every chain's θ is a draw."""

    steps: int
    freeze_step: int
    sample_steps: tuple[int, ...]


def plan_budget(config, gradients: int, draws: int, chains: int) -> tuple[object, BudgetPlan]:
    """(config with the plan's freeze_step, BudgetPlan) of `split_budget` (ValueError as it): the draws `thinning`
    updates apart after the freeze, the last after the final update."""
    steps, per_chain, thinning, freeze = split_budget(config, gradients, draws, chains)
    samples = ChainSchedule(steps, per_chain, thinning, batch_size=1, chunk=1).sample_steps  # the evaluation's draws
    return dataclasses.replace(config, freeze_step=freeze), BudgetPlan(steps, freeze, samples)
