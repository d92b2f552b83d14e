"""Policy-L2E's budget arithmetic (l2e.policy, which re-exports it): where the adaptation points fall (and which
phase kernel a chunk of updates may run with), what they cost in gradients, and how a budget of G minibatch
gradients over M chains splits into updates, a freeze and K draws. Every `config` here is an l2e.policy.PolicyConfig."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from l2e.chains import ChainSchedule

__all__ = ["ANCHOR_SHARE", "BudgetPlan", "adaptation_gradients", "adaptation_points", "anchored", "burn_chains",
           "chunk_phase", "plan_budget", "run_gradients", "split_budget"]


def adaptation_points(config) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ends, gather_starts): the adaptation points b₁ < … < b_P = freeze_step (b_p = round(p·freeze/P)) and, for
    each phase p < P, the first update of its gathering window [g_p, b_{p+1}): the last gather_fraction of the
    phase, at least 2 updates (a within-chain variance needs two states; every phase has ≥ 2, `split_budget`)."""
    ends = tuple(int(round(p * config.freeze_step / config.phases)) for p in range(1, config.phases + 1))
    starts = (0,) + ends[:-1]
    gathers = tuple(e - min(e - s, max(2, int(round(config.gather_fraction * (e - s))))) for s, e in zip(starts, ends))
    return ends, gathers


def burn_chains(config, chains: int) -> int:
    """M_b, the chains of the burn-in (config.burn_chains; 0: all `chains`). ValueError where it exceeds them."""
    if config.burn_chains > chains:
        raise ValueError(f"burn_chains ({config.burn_chains}) exceeds the chains ({chains})")
    return config.burn_chains or chains


def adaptation_gradients(config, chains: int = 1, anchor_pass: int = 0) -> int:
    """Gradient-equivalents the adaptation points spend beyond the chains' updates: 2 per Hessian-vector product
    (forward over reverse) at each of the `phases` points — power_iterations + 1 of them on one chain ("first"), on
    each chain ("all"), or on chain 0 and then one per chain (the Rayleigh quotients of "warm"), the points before
    the freeze over the burn-in's chains (`burn_chains`), the freeze's over all `chains` — and with control_variate
    the anchor's pass over the data at each, `anchor_pass` = ⌈N/B⌉ minibatch gradients
    (l2e.control_variates.full_gradient_cost)."""
    def per_point(m):
        return {"first": config.power_iterations + 1, "all": (config.power_iterations + 1) * m,
                "warm": config.power_iterations + 1 + m}[config.curvature]

    products = (config.phases - 1) * per_point(burn_chains(config, chains)) + per_point(chains)
    return 2 * products + (anchor_pass if config.control_variate else 0) * config.phases


ANCHOR_SHARE = 0.25
"""The largest share of a budget the control variates' anchor passes may take (`anchored`)."""


def anchored(config, gradients: int, anchor_pass: int, draws: int = 1, chains: int = 1):
    """config as it runs at a budget of G = `gradients` (`draws` draws over `chains` chains): with control_variate,
    kept where the anchor's passes (phases × anchor_pass = ⌈N/B⌉ minibatch gradients each) cost at most ANCHOR_SHARE
    of G and the anchored run fits (`split_budget`), else turned off (the plain minibatch gradient throughout: at a
    small budget the passes and the second gradients would leave too few updates)."""
    if not config.control_variate:
        return config
    if config.phases * anchor_pass <= ANCHOR_SHARE * gradients:
        try:
            split_budget(config, gradients, draws, chains, anchor_pass)
            return config
        except ValueError:
            pass
    return dataclasses.replace(config, control_variate=False)


def run_gradients(config, steps: int, chains: int, anchor_pass: int = 0) -> int:
    """Minibatch gradients of a run of `steps` updates with the window at config.freeze_step: one per update of each
    chain (the burn-in's `burn_chains` before the freeze, all `chains` from it), two from the first adaptation point
    on with control_variate (the gradient at the anchor on the same minibatch), and `adaptation_gradients`."""
    burn, first = min(steps, config.freeze_step), int(round(config.freeze_step / config.phases))
    m_b = burn_chains(config, chains)
    updates = m_b * burn + chains * (steps - burn)
    anchored = m_b * max(0, burn - first) + chains * max(0, steps - max(burn, first)) if config.control_variate else 0
    return updates + anchored + adaptation_gradients(config, chains, anchor_pass)


def split_budget(config, gradients: int, draws: int, chains: int, anchor_pass: int = 0) -> tuple[int, int, int, int]:
    """(updates per chain S, draws per chain k, thinning, freeze_step) of a run of `gradients` minibatch gradients
    and `draws` draws over `chains` chains: the adaptation points' gradients first, S = ⌊(G − those)/M⌋ (with
    control_variate the largest S whose `run_gradients` fit in G), k = max(1, ⌊K/M⌋) draws per chain evenly over the
    last window_fraction of its updates, the freeze where they start. With track_every p > 1, S and (where it is at
    least p) the thinning are multiples of p, the thinning the nearest (at most p − 1 updates per chain unspent;
    unaligned where the budget is too small for it): every draw then falls on a multiple of p, and chunks of a
    multiple of p updates run the tracked phases' periodic kernels (l2e.policy.chunk_kernels). With burn_chains
    M_b < M, fewer chains before the freeze (`_split_grown`). ValueError when the freeze would leave fewer than 2
    updates per phase, for control_variate without anchor_pass ≥ 1 (⌈N/B⌉), or for burn_chains above `chains`."""
    if config.control_variate and anchor_pass < 1:
        raise ValueError("control_variate needs anchor_pass >= 1: the minibatch gradients of one pass over the data")
    per_chain = max(1, draws // chains)
    if burn_chains(config, chains) < chains:
        return _split_grown(config, gradients, per_chain, chains, anchor_pass)

    def split(p):
        def window(steps):
            thinning = int(config.window_fraction * steps) // per_chain
            if thinning >= p:  # the nearest multiple of p, or the one below where the nearest leaves no burn-in
                near = int(round(thinning / p)) * p
                thinning = near if steps - per_chain * near >= 2 * config.phases else thinning // p * p
            return max(1, thinning), steps - per_chain * max(1, thinning)

        steps = (gradients - adaptation_gradients(config, chains, anchor_pass)) // chains // p * p
        while config.control_variate and steps > 0 and run_gradients(dataclasses.replace(
                config, freeze_step=max(window(steps)[1], 2 * config.phases)), steps, chains, anchor_pass) > gradients:
            steps -= p
        return (steps,) + window(steps)

    steps, thinning, freeze = split(config.track_every)
    if freeze < 2 * config.phases and config.track_every > 1:  # too small a budget to align
        steps, thinning, freeze = split(1)
    if freeze < 2 * config.phases:
        raise ValueError(f"a budget of {gradients} gradients leaves {steps} updates per chain for {chains} chains, "
                         f"too few for {config.phases} adaptation phases")
    return steps, per_chain, thinning, freeze


def _split_grown(config, gradients: int, per_chain: int, chains: int, anchor_pass: int) -> tuple[int, int, int, int]:
    """`split_budget` where M_b = burn_chains < M chains run the burn-in: the window's M·k·thinning updates (two
    gradients each with control_variate) take window_fraction of the gradients the adaptation points leave, the
    burn-in's M_b chains the rest (with control_variate the latest freeze whose `run_gradients` fit in G); no
    alignment to track_every."""
    m_b, spare = burn_chains(config, chains), gradients - adaptation_gradients(config, chains, anchor_pass)
    cost = 2 if config.control_variate else 1  # gradients per window update of a chain
    thinning = max(1, int(config.window_fraction * spare / (cost * chains)) // per_chain)
    freeze = (spare - cost * chains * per_chain * thinning) // m_b
    while config.control_variate and freeze >= 2 * config.phases and run_gradients(dataclasses.replace(
            config, freeze_step=freeze), freeze + per_chain * thinning, chains, anchor_pass) > gradients:
        freeze -= 1
    if freeze < 2 * config.phases:
        raise ValueError(f"a budget of {gradients} gradients leaves {max(freeze, 0)} burn-in updates per chain for "
                         f"{m_b} chains, too few for {config.phases} adaptation phases")
    return freeze + per_chain * thinning, per_chain, thinning, freeze


class BudgetPlan(NamedTuple):
    """steps: updates per chain; freeze_step: the window's first update; sample_steps: the numbers of updates done
    (1-based counts, ascending, the last = steps) after which every chain's θ is a draw."""

    steps: int
    freeze_step: int
    sample_steps: tuple[int, ...]


def plan_budget(config, gradients: int, draws: int, chains: int, anchor_pass: int = 0) -> tuple[object, BudgetPlan]:
    """(config with the plan's freeze_step, BudgetPlan) of `split_budget` (ValueError as it): the draws `thinning`
    updates apart after the freeze, the last after the final update."""
    steps, per_chain, thinning, freeze = split_budget(config, gradients, draws, chains, anchor_pass)
    samples = ChainSchedule(steps, per_chain, thinning, batch_size=1, chunk=1).sample_steps  # the evaluation's draws
    return dataclasses.replace(config, freeze_step=freeze), BudgetPlan(steps, freeze, samples)


def chunk_phase(config, start: int, length: int) -> str | None:
    """The phase kernel (l2e.policy.PHASES) that updates start, …, start + length − 1 may run with: all in one phase's
    segment before its gathering window ("psgld", "sghmc"), all inside it ("psgld_gather", "sghmc_gather"), or all
    after the freeze ("sghmc", the same update), none of them an adaptation point; None (the general kernel)
    otherwise."""
    ends, gathers = adaptation_points(config)
    end = start + length - 1
    if start > ends[-1]:
        return "sghmc"
    begins = (0,) + tuple(e + 1 for e in ends[:-1])  # the update after an adaptation point starts its segment
    for p, (b, g, e) in enumerate(zip(begins, gathers, ends)):
        name = "psgld" if p == 0 else "sghmc"
        if b <= start and end < g:
            return name
        if g <= start and end < e:
            return name + "_gather"
    return None
