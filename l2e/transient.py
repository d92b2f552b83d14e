"""Transient-L2E: a learned, free-form burn-in in front of a correct, Fisher-preconditioned SGHMC window — the learned
family "free burn-in, correct window" (docs/sampling.md, Where a learned sampler can win). Tuning-free: no learning
rate; every constant is in units that transfer across data size and model.

Burn-in (updates t < freeze_step, τ = t / freeze_step): preconditioned Langevin (pSGLD's RMSprop form, Γ dropped)
with a learned schedule of its step η(τ) (parameter units per update) and temperature T_b(τ):

    v ← ρ·v + (1 − ρ)·ḡ²,   G = 1 / (λ + √v),   θ ← θ − (η/N)·G·∇Ũ + sqrt(2·(η/N)·T_b·G)·ξ,
    log η(τ) = log η₀ + B·tanh(a(τ)/B),   log T_b(τ) = log T + (1 − τ)·B·tanh(b(τ)/B),

a, b piecewise linear between KNOTS evenly spaced knots (φ["schedule"]), B = LOG_BOUND. The burn-in only has to
reach the typical set and spread. Over its last adapt_fraction it gathers Welford statistics of θ and ∇Ũ.

At the freeze (update freeze_step), from those statistics (n states):

    σ̂²_i = sqrt(Var θ_i / Var ∇_iŨ)                      the Fisher-divergence diagonal (Seyboldt et al., 2026); the
                                                          minibatch noise inside Var ∇Ũ makes it smaller (safer;
                                                          subtract_noise: Var ∇Ũ − V̂, at least 1 % of Var ∇Ũ);
    log M⁻¹_i = w·(log σ̂²_i − mean) + mean + B·tanh(h_φ(f_i)/B),   w = n/(n + SHRINK) (Stan's shrinkage),
    ε = κ₀·exp(B·tanh(k_φ/B)),   γ = (δ₀/ε)·exp(B·tanh(d_φ/B)),   r ~ N(0, T·M) drawn afresh,

with h_φ a per-coordinate MLP (φ["mass"]) on f_i = Mass-L2E's four features (l2e.mass.mass_features) and log σ̂²_i
relative to its mean; κ is the window's step in whitened units (a coordinate moves ≈ κ·σ̂_i per update), δ = γ·ε its
damping per update. A diagonal mass cannot whiten correlated directions, so ε is capped by the stiffest one:
ε ≤ STABILITY / sqrt(λ_max(M^{-1/2}HM^{-1/2})), λ_max by the power method on minibatch Hessian-vector products
(POWER_ITERATIONS of them, once per chain).

Minibatch noise (noise_halves): in the adaptation window each gradient is the mean of two half-batch gradients and
V̂ᵢ = mean (∇ᵢŨ₁ − ∇ᵢŨ₂)²/4 estimates the full batch's gradient-noise variance; the window raises each friction to
γᵢ = max(γ, 2·ε·V̂ᵢ·M⁻¹ᵢ/(2T)) and injects the thermostat's noise less the minibatch's (Chen et al.'s SGHMC
correction). Uncorrected, the momentum gains ε²Vᵢ per update, a T_kin excess ≈ ε·Vᵢ·M⁻¹ᵢ/(2γT).

Window (t ≥ freeze_step): SGHMC with mass M and friction Dᵢ = γᵢ·Mᵢ,

    r' = r − ε·∇Ũ(θ) − ε·γᵢ·r + N(0, 2·γᵢ·ε·T·M − ε²V̂),     θ' = θ + ε·M⁻¹r',

with ε·γᵢ capped at MAX_DAMPING = 1 per update (the update stays a contraction of r; where the cap binds, the
minibatch noise exceeds what the thermostat can absorb at this ε and that coordinate keeps some excess heat). Its
stationary law is exp(−U(θ)/T − ½rᵀM⁻¹r/T) for every constant M, ε, γᵢ when the minibatch noise's variance is V̂
(exact gradients: V̂ = 0, plain SGHMC): correct by construction whatever φ is, up to the noise estimate. (Where εγᵢ
is large T_kin overstates the error by the friction's Euler step, T/(1 − εγᵢ/2): docs/sampling.md.)

φ with every entry 0 (start "sghmc") is the hand-designed counterpart: a pSGLD burn-in at constant η₀ and T, then
SGHMC preconditioned by the Fisher diagonal at κ₀ and δ₀. The kernel's `learning_rate` is a dimensionless multiplier
of η and ε (1: the sampler as configured; the evaluation gives it no grid).

Ablations (TransientConfig.burn_in / .constants; each ignores part of φ): burn_in "constant" (η₀, T: pSGLD) or
"warm" (η₀ at T = 0, RMSprop descent, until the adaptation window, T in it); constants "fisher" (the uncorrected
Fisher diagonal, κ₀, δ₀) or "rmsprop" (the shape of the burn-in's 1/(λ + √v), Izmailov et al.'s preconditioned
SGHMC, at the Fisher diagonal's geometric-mean scale; κ₀, δ₀).
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from l2e.adaptation import corrected_sghmc, halved_gradients, rmsprop_langevin, top_curvature, welford
from l2e.chains import PHASES, adaptation_start, freeze_at, freeze_phase
from l2e.checks import check_choice, check_flag, check_in_range, check_positive, check_step_count
from l2e.mass import MASS_FEATURE_NAMES, mass_features
from l2e.meta_model import MetaMLP, check_mlp_shapes, check_tree, hidden_sizes, mlp_layers_names
from l2e.types import (
    LearnedSampler, Posterior, Protocol, PyTree, SamplingAlgorithm, Shipped, all_finite, normal_like, settled, tree_vdot,
    window_temperature,
)

__all__ = ["FEATURE_NAMES", "KNOTS", "LEARNED", "TransientConfig", "TransientInfo", "TransientState",
           "build_kernel", "chunk_phase", "init", "init_meta_params", "transient"]

KNOTS = 4
LOG_BOUND = 3.0
SHRINK = 5.0
NOISE_MARGIN = 2.0
"""γᵢ ≥ NOISE_MARGIN·ε·V̂ᵢ·M⁻¹ᵢ/(2T): the minibatch noise at most half of the window's thermostat noise."""
STABILITY = 1.0
"""ε·sqrt(λ_max(M⁻¹H)) ≤ STABILITY at the freeze: half the leapfrog's stability limit along the stiffest direction of
the preconditioned minibatch Hessian (a diagonal mass cannot whiten correlated directions)."""
POWER_ITERATIONS = 20
"""Power-method steps for that λ_max (Hessian-vector products, once per chain, at the freeze)."""
MAX_DAMPING = 1.0
"""ε·γᵢ ≤ MAX_DAMPING: the window's friction update r − εγᵢr stays a contraction."""
FEATURE_NAMES = MASS_FEATURE_NAMES + ("log_fisher_scale",)
BURN_INS, CONSTANTS = ("learned", "constant", "warm"), ("learned", "fisher", "rmsprop")
_TINY = 1e-30


@dataclasses.dataclass(frozen=True)
class TransientConfig:
    """temperature: T; freeze_step: the first update of the sampling window (the constants freeze there);
    adapt_fraction: the last fraction of the burn-in whose states the statistics gather; base_step: η₀, the burn-in
    step in parameter units; base_kappa: κ₀, the window step in whitened units; base_damping: δ₀ = γε, the window's
    damping per update; rms_decay, rms_eps: ρ and λ of the burn-in's RMSprop preconditioner (λ bounds it,
    G ≤ 1/λ: where the likelihood gradient vanishes — a dead unit, a constant input — the prior's explicit-Euler
    step η·G/(N·σ_p²) would exceed 2 and diverge, as measured on digits with λ = 10⁻⁸); noise_halves: estimate
    the minibatch gradient-noise variance in the adaptation window from two half-batches (an even batch; every
    minibatch leaf's leading axis) and correct the window for it (False: exact gradients, or no batch axis);
    subtract_noise: the Fisher diagonal from Var ∇Ũ less that noise (needs noise_halves); burn_in, constants: the
    ablations of the module docstring ("learned": the sampler as meta-trained); window_fraction: the share of a
    chain of G updates the evaluation samples from (its K states evenly over the last window_fraction·G; the freeze
    at its start: freeze_step = G − K·⌊window_fraction·G/K⌋), a protocol choice the kernel does not read."""

    temperature: float = 1.0
    freeze_step: int = 1000
    adapt_fraction: float = 0.5
    base_step: float = 1e-3
    base_kappa: float = 0.3
    base_damping: float = 0.1
    rms_decay: float = 0.99
    rms_eps: float = 1e-4
    noise_halves: bool = True
    burn_in: str = "learned"
    constants: str = "learned"
    subtract_noise: bool = False
    window_fraction: float = 0.5

    def __post_init__(self):
        check_choice("burn_in", self.burn_in, BURN_INS), check_choice("constants", self.constants, CONSTANTS)
        check_positive(temperature=self.temperature, base_step=self.base_step, base_kappa=self.base_kappa,
                       base_damping=self.base_damping, rms_eps=self.rms_eps)
        check_step_count("freeze_step", self.freeze_step, 1)
        check_in_range("adapt_fraction", self.adapt_fraction, 0, 1, include_low=False)
        check_in_range("window_fraction", self.window_fraction, 0, 1, include_low=False, include_high=False)
        check_in_range("rms_decay", self.rms_decay, 0.0, 1.0, include_high=False)
        check_flag(noise_halves=self.noise_halves, subtract_noise=self.subtract_noise)


class TransientState(NamedTuple):
    """position, momentum: θ, r (r unused in the burn-in); step: updates done (int32); inv_mass: M⁻¹ (1 before the
    freeze); eps, gamma: ε and the base γ of the window (f32 scalars, 0 before the freeze); friction: the window's
    per-coordinate γᵢ ≥ γ (0 before the freeze); noise_var: V̂, the mean minibatch gradient-noise variance of ∇Ũ
    over the adaptation window; sq: the burn-in's RMSprop average of ḡ²; count: adaptation states so far (f32);
    mean_x, m2_x, mean_g, m2_g: Welford statistics of θ and ∇Ũ."""

    position: PyTree
    momentum: PyTree
    step: jax.Array
    inv_mass: PyTree
    eps: jax.Array
    gamma: jax.Array
    sq: PyTree
    count: jax.Array
    mean_x: PyTree
    m2_x: PyTree
    mean_g: PyTree
    m2_g: PyTree
    friction: PyTree
    noise_var: PyTree


class TransientInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32); is_finite: loss and Σθ'·θ' finite (bool); kinetic: Σ r'·M⁻¹r'
    in the window (≈ d·T), 0 before; t_kin, sampling: l2e.types.window_temperature's (for l2e.check_temperature)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    t_kin: jax.Array
    sampling: jax.Array


def init(position: PyTree) -> TransientState:
    """The TransientState before the first update at θ₀ `position` (zero momentum and statistics, M⁻¹ = 1)."""
    zeros, ones = jax.tree.map(jnp.zeros_like, position), jax.tree.map(jnp.ones_like, position)
    z = jnp.zeros((), jnp.float32)
    return TransientState(position, zeros, jnp.zeros((), jnp.int32), ones, z, z, zeros, z, zeros, zeros, zeros,
                          zeros, zeros, zeros)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (8,), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ = {"schedule": {"eta": (KNOTS,), "temp": (KNOTS,)}, "window": {"kappa": (), "damping": ()},
    "mass": a Dense stack len(FEATURE_NAMES) → hidden → 1}.

    Args:
      key: PRNG key.
      hidden: hidden widths of the per-coordinate mass correction.
      start: "sghmc" — every schedule and window entry 0 and the mass MLP's output layer 0: the hand-designed
        counterpart (module docstring); "random" — the MLP random, the rest 0.
    Returns:
      φ (float32 leaves).
    """
    if start not in ("sghmc", "random"):
        raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")
    mass = MetaMLP(tuple(hidden), outputs=1).init(key, jnp.zeros((1, len(FEATURE_NAMES))))["params"]
    if start == "sghmc":
        last = mlp_layers_names(mass)[-1]
        mass = {**mass, last: jax.tree.map(jnp.zeros_like, mass[last])}
    zero = jnp.zeros((), jnp.float32)
    return {"schedule": {"eta": jnp.zeros(KNOTS), "temp": jnp.zeros(KNOTS)},
            "window": {"kappa": zero, "damping": zero}, "mass": mass}


def check_meta_params(tree: Any, where: str) -> PyTree:
    """A restored φ checked (ValueError naming `where`): the shapes of `init_meta_params`, finite; float32 numpy."""
    return check_tree(tree, where, {"schedule": {"eta": (KNOTS,), "temp": (KNOTS,)},
                                    "window": {"kappa": (), "damping": ()}}, "mass", len(FEATURE_NAMES), 1)


def _bounded(x):
    return LOG_BOUND * jnp.tanh(x / LOG_BOUND)


def _schedule(phi, tau):
    """(log η(τ) − log η₀, log T_b(τ) − log T) at τ ∈ [0, 1]."""
    knots = jnp.linspace(0.0, 1.0, KNOTS)
    a, b = (jnp.interp(tau, knots, phi["schedule"][name]) for name in ("eta", "temp"))
    return _bounded(a), (1.0 - tau) * _bounded(b)


def _freeze(state: TransientState, phi, config: TransientConfig, n_data: int, key, scale, posterior=None,
            minibatch=None) -> TransientState:
    """The window's constants from the burn-in statistics (module docstring) and a fresh momentum r ~ N(0, T·M)."""
    n = jnp.maximum(state.count - 1.0, 1.0)
    var_x = jax.tree.map(lambda m2: m2 / n + _TINY, state.m2_x)
    var_g = jax.tree.map(lambda m2, v: m2 / n - (jnp.minimum(v, 0.99 * m2 / n) if config.subtract_noise else 0.0)
                         + _TINY, state.m2_g, state.noise_var)
    log_s2 = jax.tree.map(lambda vx, vg: 0.5 * (jnp.log(vx) - jnp.log(vg)), var_x, var_g)
    leaves = jax.tree.leaves(log_s2)
    mean = sum(jnp.sum(v) for v in leaves) / sum(v.size for v in leaves)
    w = state.count / (state.count + SHRINK)
    log_s2 = jax.tree.map(lambda v: w * (v - mean) + mean, log_s2)
    if config.constants == "rmsprop":  # the burn-in preconditioner's shape at the Fisher diagonal's mean scale
        log_g = jax.tree.map(lambda v: -jnp.log(config.rms_eps + jnp.sqrt(v)), state.sq)
        g_mean = sum(jnp.sum(v) for v in jax.tree.leaves(log_g)) / sum(v.size for v in leaves)
        log_s2 = jax.tree.map(lambda v: v - g_mean + mean, log_g)
    if config.constants != "learned":  # the hand-designed rules: φ's mass correction, step and damping unused
        phi = init_meta_params(jax.random.PRNGKey(0), hidden_sizes(phi["mass"]), start="sghmc")
    avg_grad = jax.tree.map(lambda m: m / n_data, state.mean_g)
    avg_sq = jax.tree.map(lambda vg, m: (vg + m * m) / float(n_data) ** 2, var_g, state.mean_g)
    feats = jnp.concatenate([mass_features(state.position, avg_grad, avg_sq),
                             jnp.concatenate([(v - mean).reshape(-1, 1) for v in jax.tree.leaves(log_s2)])], axis=1)
    h = _bounded(MetaMLP(hidden_sizes(phi["mass"]), outputs=1).apply({"params": phi["mass"]}, feats)[:, 0])
    leaves_s, treedef = jax.tree.flatten(log_s2)
    bounds = np.cumsum([0] + [x.size for x in leaves_s])
    inv_mass = jax.tree.unflatten(treedef, [jnp.exp(v + h[lo:hi].reshape(v.shape)) for v, lo, hi in
                                            zip(leaves_s, bounds[:-1], bounds[1:])])
    eps = config.base_kappa * jnp.exp(_bounded(phi["window"]["kappa"])) * scale
    if posterior is not None:  # the stability cap: ε·sqrt(λ_max(M⁻¹H)) ≤ STABILITY (the leapfrog's limit is 2)
        key, k_power = jax.random.split(key)
        lam = top_curvature(posterior, state.position, minibatch, inv_mass, k_power, POWER_ITERATIONS)
        eps = jnp.minimum(eps, STABILITY / jnp.sqrt(lam + _TINY))
    gamma = config.base_damping / eps * jnp.exp(_bounded(phi["window"]["damping"]))
    # the gradient-noise correction: momentum gains ε²V̂ᵢ of variance per update from the minibatch noise; γᵢ is
    # raised until that is at most 1/NOISE_MARGIN of the thermostat's 2γᵢεT·Mᵢ, which is then injected less it
    friction = jax.tree.map(lambda v, m: jnp.minimum(jnp.maximum(
        gamma, NOISE_MARGIN * eps * v * m / (2.0 * config.temperature)), MAX_DAMPING / eps), state.noise_var, inv_mass)
    z = normal_like(key, state.position)
    mom = jax.tree.map(lambda zi, m: zi * jnp.sqrt(config.temperature / m), z, inv_mass)
    return state._replace(inv_mass=inv_mass, eps=eps.astype(jnp.float32), gamma=gamma.astype(jnp.float32),
                          momentum=mom, friction=jax.tree.map(lambda f: f.astype(jnp.float32), friction))


def _burn_in(state: TransientState, grad_u, noise, key, phi, config: TransientConfig, n_data: int, scale, freeze,
             adapt_start, phase: str | None = None) -> tuple[TransientState, jax.Array]:
    """One burn-in update (module docstring) and its statistics (none in the "burn_in" phase kernel, which runs
    before the adaptation window only)."""
    tau = state.step.astype(jnp.float32) / freeze
    log_eta, log_tb = _schedule(phi, tau) if config.burn_in == "learned" else (0.0, 0.0)
    eta = config.base_step * scale * jnp.exp(log_eta)
    temp_b = config.temperature * jnp.exp(log_tb)
    if config.burn_in == "warm":  # descent (T = 0) before the adaptation window, sampling at T inside it
        temp_b = 0.0 if phase == "burn_in" else jnp.where(state.step >= adapt_start, temp_b, 0.0)
    pos, sq = rmsprop_langevin(state.position, grad_u, state.sq, normal_like(key, state.position), eta, temp_b, n_data,
                               config.rms_decay, config.rms_eps)
    if phase == "burn_in":  # statically outside the adaptation window: the statistics stay as they are
        return state._replace(position=pos, sq=sq), jnp.zeros((), jnp.float32)
    inside = state.step >= adapt_start
    count = state.count + jnp.where(inside, 1.0, 0.0)
    safe = jnp.maximum(count, 1.0)
    mx, sx = welford(safe, state.mean_x, state.m2_x, state.position)
    mg, sg = welford(safe, state.mean_g, state.m2_g, grad_u)
    nv = jax.tree.map(lambda m, v: m + (v - m) / safe, state.noise_var, noise)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(inside, a, b), new, old)  # noqa: E731
    new = state._replace(position=pos, sq=sq, count=count, mean_x=keep(mx, state.mean_x), m2_x=keep(sx, state.m2_x),
                         mean_g=keep(mg, state.mean_g), m2_g=keep(sg, state.m2_g), noise_var=keep(nv, state.noise_var))
    return new, jnp.zeros((), jnp.float32)


def _window(state: TransientState, grad_u, key, temperature) -> tuple[TransientState, jax.Array]:
    """One window update: SGHMC with mass M, friction γᵢ·Mᵢ, the gradient noise's variance ε²V̂ subtracted from the
    injected noise (module docstring)."""
    pos, mom, velocity = corrected_sghmc(state.position, state.momentum, grad_u, state.inv_mass, state.friction,
                                         state.noise_var, state.eps, temperature, normal_like(key, state.position))
    return state._replace(position=pos, momentum=mom), tree_vdot(*settled((mom, velocity)))


def build_kernel(posterior: Posterior, config: TransientConfig = TransientConfig(), phase: str | None = None):
    """kernel(key, state, minibatch, meta_params, learning_rate=1.0, temperature=config.temperature) ->
    (TransientState, TransientInfo).

    Args:
      posterior: the target (l2e.Posterior).
      config: TransientConfig; freeze_step and adapt_fraction are static.
      phase: None — one kernel for every update, which branches on the step (burn-in, adaptation window, the
        freeze, the window); or a kernel specialised to the updates of one phase (l2e.chains.PHASES), without those
        branches and with the same numbers there: "burn_in" before the adaptation window, "adapt" in it (up to
        freeze_step), "window" after freeze_step (the freeze update itself needs the general kernel; `chunk_phase`
        says which a run of updates may use).
    Returns:
      The kernel; meta_params (φ) and learning_rate (a dimensionless multiplier of η and ε) are traced arguments.
    """
    if phase not in (None,) + PHASES:
        raise ValueError(f"phase must be None or one of {', '.join(PHASES)}, got {phase!r}")
    freeze = int(config.freeze_step)
    adapt_start = adaptation_start(freeze, config.adapt_fraction)
    n_data = posterior.data_size

    def gradients(state, minibatch, inside):
        if phase is not None:  # the phase says whether this update is in the adaptation window
            inside = phase == "adapt"
        if config.noise_halves and inside is not False:
            return halved_gradients(posterior, state.position, minibatch, inside)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        return loss, grad_u, jax.tree.map(jnp.zeros_like, grad_u)

    def kernel(key: jax.Array, state: TransientState, minibatch, meta_params: PyTree, learning_rate=1.0,
               temperature=config.temperature):
        k_step, k_freeze = jax.random.split(key)

        def burn_in(s):
            return _burn_in(s, grad_u, noise, k_step, meta_params, config, n_data, learning_rate, freeze, adapt_start,
                            phase)

        if phase is None:
            state = jax.lax.cond(state.step == freeze,
                                 lambda s: _freeze(s, meta_params, config, n_data, k_freeze, learning_rate, posterior,
                                                   minibatch),
                                 lambda s: s, state)
        inside = (state.step >= adapt_start) & (state.step < freeze)
        loss, grad_u, noise = gradients(state, minibatch, inside)
        if phase in ("burn_in", "adapt"):
            state, kinetic = burn_in(state)
        elif phase == "window":
            state, kinetic = _window(state, grad_u, k_step, temperature)
        else:
            state, kinetic = jax.lax.cond(state.step < freeze, burn_in,
                                          lambda s: _window(s, grad_u, k_step, temperature), state)
        finite = all_finite(loss, tree_vdot(*settled((state.position, state.position))))
        window = window_temperature(state.momentum, state.inv_mass, state.friction, state.eps, state.step, freeze)
        return state._replace(step=state.step + 1), TransientInfo(loss, finite, kinetic, *window)

    return kernel


def chunk_phase(config: TransientConfig, start: int, length: int) -> str | None:
    """The phase of `build_kernel` that updates start, …, start + length − 1 may use (l2e.chains.freeze_phase)."""
    return freeze_phase(int(config.freeze_step), start, length, adaptation_start(config.freeze_step, config.adapt_fraction))


def transient(posterior: Posterior, meta_params: PyTree, config: TransientConfig = TransientConfig()
              ) -> SamplingAlgorithm:
    """A ready Transient-L2E sampler (no learning rate).

    Args:
      posterior: the target (l2e.Posterior).
      meta_params: φ (`init_meta_params`).
      config: TransientConfig (freeze_step: the first update of the sampling window).
    Returns:
      SamplingAlgorithm: init(position) -> TransientState; step(key, state, minibatch) -> (state, TransientInfo).
    """
    check_mlp_shapes(meta_params["mass"], len(FEATURE_NAMES), 1, "meta_params['mass']")
    kernel = build_kernel(posterior, config)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


LEARNED = LearnedSampler(
    name="transient", title="Transient-L2E", config=TransientConfig, config_group="transient", init=init,
    build_kernel=build_kernel, factory=transient, features=FEATURE_NAMES, outputs=1,
    init_meta_params=init_meta_params, counterpart="psgld burn-in + Fisher-preconditioned SGHMC",
    lrs=(1.0,), check=check_meta_params, shipped=(Shipped("transient", "l2e_transient"),),
    protocol=Protocol(tuning_free=True, window=freeze_at, window_fraction=lambda c: c.window_fraction, phases=PHASES,
                      phase_of=chunk_phase, splits_minibatch=lambda c: c.noise_halves),
)
"""Transient-L2E in the learned-sampler registry: tuning-free (its evaluation grid is the one multiplier 1)."""

