"""Policy-L2E: a learned adaptation policy over M parallel chains — learn the adaptation, not the dynamics
(docs/samplers.md, "Policy-L2E").

M chains run together; their state holds every chain (leaves with a leading axis M) and each update takes one
minibatch per chain (leaves with a leading axis M). The burn-in of `freeze_step` updates is cut into `phases` equal
phases. Phase 0 is preconditioned Langevin at a constant step η₀ (pSGLD's RMSprop form, Γ dropped, as
Transient-L2E's burn-in): it only has to reach the typical set. Every later phase, and the sampling window after
`freeze_step`, is SGHMC with a mass, step and friction shared by the chains, set at the phase's start — an
*adaptation point* — from statistics the chains gathered over the last `gather_fraction` of the phase before:

    per coordinate i (pooled over the M chains' gathered states): Var θᵢ = Wᵢ + Bᵢ (within- and between-chain
    variance), Var ∇ᵢŨ, the minibatch noise V̂ᵢ (two half-batches, l2e.adaptation.halved_gradients), the mean
    gradient; globally: the phase's kinetic temperature, the energy's pooled variance, the loss trend and an R̂-like
    between/within ratio.

The hand-designed rule (`policy="rule"`, or φ with zero output layers: the "rule" start) reads them as

    log M⁻¹ᵢ = w·(log σ̂²ᵢ − mean) + mean,   σ̂²ᵢ = sqrt(Var θᵢ / Var ∇ᵢŨ)  (mass_rule "fisher": the Fisher-divergence
    diagonal; "variance": Var θᵢ, Stan's; "scale": 1/sqrt(E[∇ᵢŨ²]) at the Fisher diagonal's geometric mean,
    Springenberg et al.'s scale adaptation; "dense": the Fisher-divergence metric as a full matrix, Σ·Cov ∇Ũ·Σ =
    Cov θ, SGHMC run in the frame θ = Σ^½u with mass 1 there — l2e.policy_dense, up to DENSE_MAX coordinates, the
    "fisher" diagonal above), w = n/(n + SHRINK) for n pooled states;
    ε = κ₀·lr, capped by ε·sqrt(λ_max(M^{-1/2}HM^{-1/2})) ≤ STABILITY (power method on chain 0's minibatch Hessian);
    γ = δ₀/ε; γᵢ = min(max(γ, NOISE_MARGIN·ε·V̂ᵢ·M⁻¹ᵢ/(2T)), MAX_DAMPING/ε), the noise-corrected SGHMC of
    l2e.adaptation.corrected_sghmc; fresh momenta r ~ N(0, T·M).

The learned policy (`policy="learned"`) adds bounded corrections: a per-coordinate network h_φ (φ["mass"]) of the
coordinate's features and the global ones adds B·tanh(h/B) to log M⁻¹ᵢ; a global network (φ["window"], two outputs)
multiplies κ₀ and δ₀ by exp(B·tanh(·/B)), κ₀'s factor at most `max_step_gain` (1: φ may shorten the rule's step, never
lengthen it). After the freeze the constants stay fixed and the chains are SGHMC with mass M and friction γᵢ·Mᵢ (with
track_noise raised to each chain's running noise: l2e.policy_updates.chain_noise) at temperature T: stationary for the
posterior whatever φ is, up to the noise estimate — correct by construction. A step costs one minibatch gradient per
chain (halved in the gathering windows, and after phase 0 with track_noise: the same work); each adaptation point adds
power_iterations + 1 Hessian-vector products on one chain, on every chain with curvature="all", or on chain 0 plus one
per chain with curvature="warm" (`adaptation_gradients`). With control_variate, each adaptation point also moves a
shared anchor to the chains' pooled mean (a pass over the data) and the later phases are SGHMC-CV (two gradients per
update). A chain whose statistics are not finite (divergent) is left out of every pooled statistic and of the curvature
cap; with restart_lagging, so is a chain that lags far behind the others (l2e.policy_features.lagging), which is moved
onto a live chain before the freeze. The phase kernels (`build_kernel`'s phase, `chunk_phase`) run a phase's updates
without per-update branches.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from l2e.adaptation import ensemble_curvature, unflat
from l2e.policy_budget import (ANCHOR_SHARE, BudgetPlan, adaptation_gradients, adaptation_points, anchored,
                               burn_chains, chunk_phase, plan_budget, run_gradients, split_budget)
from l2e.control_variates import full_gradient_cost, full_nll_grad
from l2e.policy_dense import frame, framed_posterior, to_frame
from l2e.policy_features import COORD_FEATURES, GLOBAL_FEATURES, features, lagging
from l2e.policy_updates import (branch, chain_gradients, chain_noise, chains_finite, dense_active, gather_window,
                                grow, move, restart, splits, temperatures, track_gain)
from l2e.policy_state import PolicyInfo, PolicyState, init
from l2e.policy_params import check_meta_params, init_meta_params, load_meta_params, save_meta_params
from l2e.chains import per_chain_batches
from l2e.checks import check_choice, check_flag, check_in_range, check_positive, check_step_count
from l2e.meta_model import MetaMLP, hidden_sizes
from l2e.transient import MAX_DAMPING, NOISE_MARGIN, STABILITY
from l2e.types import PyTree, Posterior, SamplingAlgorithm, normal_like

__all__ = ["ANCHOR_SHARE", "BudgetPlan", "COORD_FEATURES", "GLOBAL_FEATURES", "PHASES", "PolicyConfig", "PolicyInfo",
           "PolicyState", "adaptation_gradients", "adaptation_points", "anchored", "build_kernel", "burn_chains",
           "check_meta_params", "chunk_kernels", "chunk_phase", "features", "for_budget", "grow", "init",
           "init_meta_params", "load_meta_params", "per_chain_batches", "plan_budget", "policy", "run_gradients",
           "save_meta_params", "split_budget"]

LOG_BOUND = 3.0
PHASES = ("psgld", "psgld_gather", "sghmc", "sghmc_gather")
"""The phase kernels (`build_kernel`'s phase, `chunk_phase`); the window after the freeze runs "sghmc" (the same
update: SGHMC with fixed constants, nothing gathered)."""
MASS_RULES, POLICIES = ("fisher", "variance", "scale", "dense"), ("learned", "rule")
CURVATURES = ("first", "all", "warm")
_TINY = 1e-30


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """temperature: T; freeze_step: the window's first update (per chain); phases: burn-in phases (≥ 2: phase 0's
    pSGLD, then phases − 1 adapted SGHMC phases; the last adaptation point is the freeze); gather_fraction: the last
    fraction of each phase whose states the statistics gather; base_step: η₀ of phase 0 (parameter units);
    base_kappa: κ₀, the SGHMC step in whitened units; base_damping: δ₀ = γε; rms_decay, rms_eps: phase 0's RMSprop
    ρ and λ; mass_rule: the rule's mass (module docstring); policy: "learned" (φ's corrections) or "rule" (φ
    unused: the hand-designed rule); noise_halves: estimate the minibatch noise from two half-batches in the
    gathering windows (an even batch) and correct SGHMC for it (False: exact gradients); power_iterations: for the
    stability cap; curvature: where the cap's λ_max is measured — "first": chain 0, "all": the largest over every
    chain (M times the Hessian-vector products; a chain elsewhere may be stiffer), "warm": chain 0's power method,
    then the largest of every chain's Rayleigh quotient along its top direction (one product per chain: a chain
    stiffer along the shared direction, as where a scale parameter differs, caps the step); window_fraction: the
    share of a chain of G updates the evaluation samples from (a protocol choice the kernel does not read);
    max_step_gain: the largest factor φ's κ output may multiply κ₀ by (≥ 1; the default e^LOG_BOUND leaves it
    unbounded beyond the tanh; 1 keeps the learned step at or below the rule's, which the curvature cap alone did not
    make safe on heteroscedastic yacht); control_variate: from the first adaptation point on, every chain's gradient
    is the control-variate estimate around a shared anchor (SGHMC-CV; l2e.control_variates), the anchor refreshed at
    every adaptation point to the live chains' pooled mean of the gathered θ (a pass over the data each: the kernel
    takes `data`; two minibatch gradients per update after phase 0, `run_gradients`); anchor_chunk: training examples
    per gradient call of that pass; relative_step: κ₀ counts against the stiffest preconditioned curvature, ε =
    κ₀/sqrt(λ_max) before the caps (where the minibatch noise inflates Var ∇Ũ the rule's mass is too small and κ₀ in
    its units too short a step; False: ε = κ₀); restart_lagging: at every adaptation point before the freeze, a
    chain that lags (l2e.policy_features.lagging: its window's mean loss far above the best chain's — stuck, or still
    travelling) is left out of the pooled statistics (but the window's V̂ and T_kin, pooled update by update over the
    finite chains) and moved onto the θ of a live chain drawn at random, from where the next phase's noise separates
    them (burn-in only: the window's SGHMC is unchanged); track_noise: after phase 0, every update splits its
    minibatch in two halves and each chain keeps a running gain of its noise over the phase's pooled V̂
    (l2e.policy_updates.track_gain), its V̂ and friction raised to cover it (`chain_noise`): where the chains move
    into a region of larger minibatch noise after the freeze (a heteroscedastic model's noise scale shrinking), the
    correction follows them instead of staying at the pooled V̂ (two half-batch gradients per update: the gathering
    windows' cost in every SGHMC update); track_every (with track_noise): the gains refresh on every k-th update only
    (its index a multiple of k; the others take one gradient; `chunk_kernels`); track_step (needs track_noise):
    where a chain's tracked noise passes the rule's heat cap, its step shrinks until it fits (`chain_noise`);
    burn_chains: M_b, the chains that run the burn-in (0: all M) — where fewer than M, the driver grows the state to M
    chains after freeze_step updates, before the freeze's adaptation point (`grow`: clones of the live chains, which
    the window's noise separates), and the budget counts M_b chains before the freeze (`split_budget`): a protocol
    choice the kernel does not read, as window_fraction (the evaluation's driver applies it; `for_budget` and the
    sampler card run M chains throughout)."""

    temperature: float = 1.0
    freeze_step: int = 1000
    phases: int = 3
    gather_fraction: float = 0.5
    base_step: float = 1e-2
    base_kappa: float = 0.15
    base_damping: float = 0.1
    rms_decay: float = 0.99
    rms_eps: float = 1e-4
    mass_rule: str = "fisher"
    policy: str = "learned"
    noise_halves: bool = True
    power_iterations: int = 10
    window_fraction: float = 0.5
    curvature: str = "first"
    max_step_gain: float = float(math.exp(LOG_BOUND))
    control_variate: bool = False
    anchor_chunk: int = 2048
    relative_step: bool = False
    restart_lagging: bool = False
    track_noise: bool = False
    track_step: bool = False
    track_every: int = 1
    burn_chains: int = 0

    def __post_init__(self):
        check_choice("mass_rule", self.mass_rule, MASS_RULES), check_choice("policy", self.policy, POLICIES)
        check_choice("curvature", self.curvature, CURVATURES)
        check_positive(temperature=self.temperature, base_step=self.base_step, base_kappa=self.base_kappa,
                       base_damping=self.base_damping, rms_eps=self.rms_eps)
        check_step_count("phases", self.phases, 2)
        check_step_count("freeze_step", self.freeze_step, 2 * self.phases)
        check_step_count("power_iterations", self.power_iterations, 1)
        check_in_range("gather_fraction", self.gather_fraction, 0, 1, include_low=False)
        check_in_range("window_fraction", self.window_fraction, 0, 1, include_low=False, include_high=False)
        check_in_range("rms_decay", self.rms_decay, 0.0, 1.0, include_high=False)
        check_flag(noise_halves=self.noise_halves, control_variate=self.control_variate,
                   relative_step=self.relative_step, restart_lagging=self.restart_lagging,
                   track_noise=self.track_noise, track_step=self.track_step)
        check_step_count("track_every", self.track_every, 1)
        for flag, on in (("track_step", self.track_step), ("track_every > 1", self.track_every > 1)):
            if on and not self.track_noise:
                raise ValueError(f"{flag} needs track_noise")
        check_step_count("anchor_chunk", self.anchor_chunk, 1)
        check_step_count("burn_chains", self.burn_chains, 0)
        check_in_range("max_step_gain", self.max_step_gain, 1.0, math.inf, include_high=False)


def _bounded(x):
    return LOG_BOUND * jnp.tanh(x / LOG_BOUND)


def _adapt(state: PolicyState, phi, config: PolicyConfig, posterior: Posterior, minibatch, key, scale,
           progress, data) -> PolicyState:
    """The next phase's constants at an adaptation point (module docstring), fresh momenta, statistics reset; with
    control_variate, the anchor moved to the live chains' pooled mean of θ (one pass over `data`)."""
    lag = None
    if config.restart_lagging:  # left out of the statistics and moved onto a live chain (module docstring)
        key, k_restart = jax.random.split(key)
        lag = lagging(state) & (progress < 1.0)  # not at the freeze: a copy needs a phase to separate
    coord, glob, stats = features(state, config, posterior.data_size, progress, lag)
    if config.restart_lagging:
        state = restart(state, lag, stats["alive"], k_restart)
    if config.control_variate:
        anchor = unflat(stats["centre"], state.anchor)
        state = state._replace(anchor=anchor, anchor_grad=full_nll_grad(posterior, anchor, data, config.anchor_chunk))
    log_s2, k_adj, d_adj = stats["log_s2"], 0.0, 0.0
    if config.policy == "learned":
        g = jnp.broadcast_to(glob, (coord.shape[0], glob.shape[0]))
        h = MetaMLP(hidden_sizes(phi["mass"]), outputs=1).apply({"params": phi["mass"]},
                                                               jnp.concatenate([coord, g], axis=1))[:, 0]
        out = MetaMLP(hidden_sizes(phi["window"]), outputs=2).apply({"params": phi["window"]}, glob[None])[0]
        log_s2, d_adj = log_s2 + _bounded(h), _bounded(out[1])
        k_adj = jnp.minimum(_bounded(out[0]), math.log(config.max_step_gain))
    target = posterior, state.position
    if dense_active(config, state.position):  # the frame's mass is 1; φ's mass head is not read (l2e.policy_dense)
        dense, stats["noise"] = frame(state.dense, jnp.maximum(state.count, 1.0), stats["alive"])
        log_s2, state = jnp.zeros_like(log_s2), state._replace(dense=dense)
        target = framed_posterior(posterior, dense.frame, state.inv_mass), to_frame(dense.frame_inv, state.position)
    inv_mass = unflat(jnp.exp(log_s2), state.inv_mass)
    k_power, k_mom = jax.random.split(key)
    lam = ensemble_curvature(*target, minibatch, inv_mass, k_power, config.power_iterations, config.curvature,
                             stats["alive"])
    noise = unflat(stats["noise"], state.inv_mass)
    heat = jnp.max(stats["noise"] * jnp.exp(log_s2))  # the largest V̂ᵢ·M⁻¹ᵢ: where the minibatch noise heats most
    kappa = config.base_kappa / (jnp.sqrt(lam + _TINY) if config.relative_step else 1.0)
    eps = jnp.minimum(kappa * jnp.exp(k_adj) * scale, jnp.minimum(
        STABILITY / jnp.sqrt(lam + _TINY), jnp.sqrt(2.0 * config.temperature * MAX_DAMPING / (NOISE_MARGIN * heat
                                                                                             + _TINY))))
    gamma = config.base_damping / eps * jnp.exp(d_adj)
    friction = jax.tree.map(lambda v, m: jnp.minimum(jnp.maximum(
        gamma, NOISE_MARGIN * eps * v * m / (2.0 * config.temperature)), MAX_DAMPING / eps), noise, inv_mass)
    z = normal_like(k_mom, state.position)
    mom = jax.tree.map(lambda zi, m: zi * jnp.sqrt(config.temperature / m), z, inv_mass)
    zeros = jax.tree.map(jnp.zeros_like, state.position)
    zc = jnp.zeros_like(state.loss_mean)
    return state._replace(momentum=mom, inv_mass=inv_mass, eps=eps.astype(jnp.float32), noise_var=noise,
                          friction=jax.tree.map(lambda f: f.astype(jnp.float32), friction),
                          count=jnp.zeros((), jnp.float32), mean_x=zeros, m2_x=zeros, mean_g=zeros, m2_g=zeros,
                          noise_acc=jax.tree.map(jnp.zeros_like, state.noise_acc), loss_mean=zc, loss_m2=zc,
                          loss_early=zc, kin=jnp.zeros((), jnp.float32), noise_gain=jnp.ones_like(zc))


def build_kernel(posterior: Posterior, config: PolicyConfig = PolicyConfig(), phase: str | None = None,
                 offset: int | None = None):
    """kernel(key, state, minibatches, meta_params, learning_rate=1.0, temperature=config.temperature, data=None) ->
    (PolicyState, PolicyInfo) — one update of all M chains.

    Args:
      posterior: the target (l2e.Posterior).
      config: PolicyConfig (static).
      phase: None, the general kernel (it branches on the update index); or one of PHASES, the kernel of updates
        that all lie in that phase and include no adaptation point (`chunk_phase`): the same chains to float32
        rounding, without the per-update branches (on XLA:CPU a gradient inside a `lax.cond` runs slower).
      offset: a phase kernel's updates' index modulo config.track_every (`chunk_kernels`); None: read from the step.
    Returns:
      The kernel: minibatches one per chain (every leaf's leading axis M; `per_chain_batches`); meta_params (φ) and
      learning_rate (a dimensionless multiplier of η₀ and κ₀: 1, the sampler as configured) are traced arguments;
      data: every training example, as posterior.nll takes a minibatch (the control variates' anchor pass; the
      general kernel of a control_variate config needs it — ValueError when traced without —, a phase kernel never
      reads it).
    """
    check_choice("phase", phase, PHASES + (None,))
    ends, gathers = adaptation_points(config)
    ends_a, gathers_a = jnp.asarray(ends, jnp.int32), jnp.asarray(gathers, jnp.int32)
    halves = jnp.asarray([max(1, (e - g) // 2) for e, g in zip(ends, gathers)], jnp.float32)
    n_data, phases, freeze = posterior.data_size, config.phases, int(config.freeze_step)

    def kernel(key, state: PolicyState, minibatches, meta_params, learning_rate=1.0, temperature=config.temperature,
               data=None):
        k_step, k_adapt = jax.random.split(key)
        if phase is None:
            if config.control_variate and data is None:
                raise ValueError("a control_variate kernel needs data (the anchor's pass over the training set)")
            hit = state.step == ends_a
            progress = (jnp.argmax(hit) + 1).astype(jnp.float32) / phases
            state = jax.lax.cond(jnp.any(hit), lambda s: _adapt(s, meta_params, config, posterior, minibatches,
                                                                k_adapt, learning_rate, progress, data),
                                 lambda s: s, state)
        index = jnp.sum(state.step >= ends_a)
        p = jnp.minimum(index, phases - 1)
        window = (index < phases) & (state.step >= gathers_a[p])  # the update lies in its phase's gathering window
        if phase is None:
            first, gathering = index == 0, window
        else:
            first, gathering = phase.startswith("psgld"), phase.endswith("gather")
        early = state.count < halves[p]
        split, refresh = splits(config, first, gathering, state.step, offset)
        loss, grad_u, noise = chain_gradients(posterior, config, state, minibatches, first, split)
        if config.track_noise:
            state = branch(refresh, lambda s: s._replace(noise_gain=track_gain(s, config, noise)), lambda s: s, state)
        pre = state.position
        tracked = chain_noise(state, config, temperature) if config.track_noise and first is not True else None
        state = move(state, grad_u, k_step, config, n_data, learning_rate, temperature, first, tracked)
        t_kin, sampling, kinetic = temperatures(state, freeze, tracked, config, temperature)
        finite = chains_finite(loss, state.position, kinetic, first)
        # a phase kernel gathers under the traced `window` too: a conditional, which XLA:CPU runs update by update
        # instead of deferring the statistics to the chunk's end (l2e.policy_features.gather)
        state = branch(window if gathering is True else gathering, lambda s: gather_window(
            s, config, pre, grad_u, noise, loss, t_kin, early, finite), lambda s: s, state)
        return state._replace(step=state.step + 1), PolicyInfo(loss, finite, kinetic, t_kin, sampling)

    return kernel


def chunk_kernels(posterior: Posterior, config: PolicyConfig, phase: str | None, length: int) -> tuple:
    """The kernels (`build_kernel`) a chunk of `length` updates of `phase` runs, l2e.chains.make_chunk's periodic
    tuple: for a phase kernel of a track_every k > 1 config and k dividing `length`, one per offset, none branching
    on whether its update refreshes the noise gains; else the one kernel."""
    k = config.track_every
    periodic = phase is not None and config.track_noise and k > 1 and length % k == 0
    return tuple(build_kernel(posterior, config, phase, o) for o in range(k)) if periodic else (
        build_kernel(posterior, config, phase),)


def policy(posterior: Posterior, meta_params: PyTree | None = None, config: PolicyConfig = PolicyConfig(),
           data=None) -> SamplingAlgorithm:
    """A ready Policy-L2E sampler of M chains (no learning rate).

    Args:
      posterior: the target (l2e.Posterior).
      meta_params: φ (`init_meta_params`); None: the hand-designed rule (φ unused).
      config: PolicyConfig (freeze_step: the window's first update).
      data: every training example (as posterior.nll takes a minibatch): the anchor's passes of a control_variate
        config, which needs it.
    Returns:
      SamplingAlgorithm: init(positions, leaves (M, …)) -> PolicyState; step(key, state, minibatches, leaves
      (M, …)) -> (state, PolicyInfo).
    Raises:
      ValueError: a control_variate config without data.
    """
    if config.control_variate and data is None:
        raise ValueError("a control_variate config needs data (the anchor's pass over the training set)")
    if meta_params is None:
        config = dataclasses.replace(config, policy="rule")
        meta_params = init_meta_params(jax.random.PRNGKey(0))
    meta_params = check_meta_params(meta_params, "meta_params")
    kernel = build_kernel(posterior, config)

    def step(key, state, minibatches):
        return kernel(key, state, minibatches, meta_params, data=data)

    return SamplingAlgorithm(init, step)


def for_budget(posterior: Posterior, gradients: int, chains: int = 10, draws: int = 10,
               meta_params: PyTree | str | None = "shipped", config: PolicyConfig = PolicyConfig(curvature="warm"),
               data=None, batch_size: int | None = None) -> tuple[SamplingAlgorithm, BudgetPlan]:
    """Policy-L2E for a budget of `gradients` minibatch gradients over `chains` chains, `draws` draws in all: no
    learning rate and no freeze step to choose (`plan_budget` places the freeze and the draws as the evaluation does).

    Args:
      posterior: the target (l2e.Posterior).
      gradients, chains, draws: G, M and K.
      meta_params: "shipped" (the shipped φ, meta-trained with curvature "warm", the default config's), a path of
        `save_meta_params`, a φ tree, or None / "rule" (the hand-designed rule).
      config: PolicyConfig; its freeze_step is replaced by the plan's.
      data, batch_size: with config.control_variate, the training set (`policy`) and the minibatch size B, which
        price the anchor's passes at ⌈N/B⌉ gradients each (N: data's rows; where they would take more than
        ANCHOR_SHARE of G the run is plain, `anchored`).
    Returns:
      (the sampler (`policy`), the BudgetPlan: run `steps` updates of every chain, keep every chain's θ after the
      updates counted in `sample_steps`).
    Raises:
      ValueError: a budget too small for the phases (`split_budget`), a φ that does not load, a control_variate
        config without data and batch_size, or burn_chains below `chains`.
    """
    if 0 < config.burn_chains < chains:
        raise ValueError("for_budget runs its chains throughout: burn_chains is the evaluation driver's protocol")
    if isinstance(meta_params, str):
        meta_params = None if meta_params == "rule" else load_meta_params(meta_params)
    anchor_pass = 0
    if config.control_variate:
        if data is None or batch_size is None:
            raise ValueError("a control_variate config needs data and batch_size (they price the anchor's passes)")
        anchor_pass = full_gradient_cost(int(jax.tree.leaves(data)[0].shape[0]), batch_size)
        config = anchored(config, gradients, anchor_pass, draws, chains)
    config, plan = plan_budget(config, gradients, draws, chains, anchor_pass)
    return policy(posterior, meta_params, config, data), plan
