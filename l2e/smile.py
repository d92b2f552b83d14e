"""SMILE / pSMILE: minibatch microcanonical Langevin dynamics (Sommer et al., ICML 2026; docs/samplers.md § SMILE /
pSMILE). `l2e.smile` and `l2e.psmile` are both this module (`init`; `build_kernel`, pSMILE's `build_psmile_kernel`).

One step is one isokinetic McLachlan step of the ESH dynamics on the minibatch log density
ℓ_B(θ) = log p(θ) − S·mean-NLL_B(θ) (S = `likelihood_scale`, default N; the public code uses (N // B)·B):
velocity by b₁ε, position by ε/2, velocity by (1 − 2b₁)ε, position by ε/2, velocity by b₁ε — two new gradient
evaluations per step, both on the step's minibatch; the first velocity update reuses the stored gradient of the
previous step (its minibatch).  Velocity map (e = g/|g|, δ = h|g|/(d − 1), ζ = e^−δ):
u ← normalise(e(1 − ζ)(1 + ζ + (u·e)(1 − ζ)) + 2ζu), kinetic change (d − 1)[δ − log 2 + log(1 + u·e + (1 − u·e)ζ²)]
(blackjax 1.2.2's form, which the public code pins).  Position: θ ← θ + h·u.  Gradient entries that are NaN
become 0, then every entry is clipped to ±1e6.  The velocity starts at **zero** (stored gradient 0, stored log
density 0), so the first step only aligns it with the gradient; a reset zeroes it again.

Randomness.  SMILE as published is deterministic given its minibatches: the authors' BNN kernels have no partial
velocity refresh (decoherence length L = ∞), and the guardrail's reset zeroes the velocity rather than drawing one,
so the minibatch noise is the only stochasticity.  That is the default here (`decoherence_length=None`): the key is
then not used, and the chain is the public code's.  The key drives the one random ingredient the dynamics admit,
MCLMC's partial velocity refresh: with a finite `decoherence_length` L each step is wrapped, as blackjax's
`with_isokinetic_maruyama` wraps MCLMC's, in two half refreshes u ← normalise(u + ν·z), ν = sqrt((e^{ε/L} − 1)/d),
z ~ N(0, I) — one before the McLachlan step (key half 1), one after it (key half 2), both before a reset; they do
not enter ΔE (blackjax's `partially_refresh_momentum`; a zero velocity becomes a random unit one).

No kinetic temperature.  SMILE's velocity is isokinetic: |u| = 1 always, and its stationary law is uniform on the
sphere whatever the target's temperature, so there is no kinetic energy K with u ~ exp(−K/T).  The ESH kinetic energy
whose change enters ΔE, K(u) = (d − 1)·log|u|, has Σ u·∇_uK = d − 1 at every step, an identity: T_kin = ⟨Σ u·∇_uK⟩/d
would read (d − 1)/d for any chain, right or wrong.  So `SMILEInfo` has no `kinetic` field and the evaluation reports
no T_kin for SMILE (docs/sampling.md § Measuring it: kinetic and configurational temperature); the configurational
temperature on known targets still applies.

pSMILE (`preconditioned=True`): at the start of a step s = clip(σ, 1e-2, 1e4)/rms(clip(σ, 1e-2, 1e4)); positions
move by h·u/s and the velocity update sees g/s (the stored gradient is g/s with the s of the step that computed
it, as in the code); after the step, from its final raw gradient g: m ← clip(0.99m + 0.01g, ±1e6),
σ ← sqrt(max(0.99σ² + 0.01(g − m)², 1e-7)), from m = σ = 1.  Never frozen.

Tuner and guardrail (`tuner=True`; the public code's SMILET / NOISYSMILE step), t = 1, 2, … the step:
ΔE = kinetic change + (ℓ_stored − ℓ_new)·[ℓ_stored ≠ 0] (two different minibatches).  Gamma fit of |ΔE| from the
running mean m and standard deviation s: k = m²/(s² + 1e-6), θ = (s² + 1e-6)/m, Wilson–Hilferty quantiles
Q(p) = θk(1 − 1/(9k) + z_p/(3√k))³.  From t = 10: |ΔE| > Q(reset_prob) → the position reverts and the velocity is
zeroed (the stored gradient and log density of the rejected position are kept, as in the code); ε ← ε(1 − δ) if
|ΔE| > Q(1 − 2a/3), then ε ← ε(1 + δ) if |ΔE| < Q(a/3), ε clipped to [1e-8, 10].  Statistics (β = `smoothing`):
m = |ΔE| for t < 3, else (1 − β)m + β|ΔE|, clipped to [1e-6, 1e6]; v = (1 − β)s²·[t ≠ 1] + β(|ΔE| − m)²,
s = clip(sqrt(v / c_t), 1e-6, 1e7) with c_t = 1 for t < 5, else 1 − 0.5^(t − 4).  Shipped constants:
reset_prob 0.98, a = 0.1, δ = 0.02, β = 0.01.  A NaN ΔE (e.g. a NaN minibatch log density) turns the statistics NaN
and then nothing resets or adapts any more (the code's behaviour; `SMILEInfo.is_finite` reports it).

Checked against the authors' public code (EmanuelSommer/SMILE): the step above is its SMILET kernel (SMILE),
its NOISYSMILE kernel (pSMILE) and its SMILE kernel with a fixed ε (SMILE-naive; pSMILE-naive is NOISYSMILE with
reset_prob 1, a = δ = 0) — same order of operations, the same ΔE (the raw ΔE of the attempted step, minibatch log
densities of two different minibatches, resets included in the statistics and in the ε rule), the same clipping,
floors and 9-step hold, a zero initial velocity, stored gradient and log density.  Run side by side in float64 on
a 10-D Gaussian, with and without gradient noise, a transliteration of the public step and this one give the same
ε at every one of 3,000 steps, the same resets, and positions within 1e-14 (SMILE) / 1e-5 (pSMILE, rounding grown
by the dynamics); in float32 only the rounding differs.  The public code's defaults are reset_prob 0.99, a = 0.05;
every tuned experiment it ships sets 0.98 / 0.1 / 0.02 / 0.01 (`SHIPPED`).

Properties of the published tuner, confirmed in the public code and kept (this is the method, not a port error):
- the bias correction c_t divides the *stored* standard deviation at every step, so it compounds (early s is
  inflated by up to ∏(1 − 2^−j)^−½ ≈ 1.9);
- the rule compares |ΔE| with quantiles of its own running Gamma fit and has no set point (blackjax's MCLMC tuner
  instead steers ε to a target energy-error variance per dimension through Var ΔE ∝ ε⁶).  It shrinks ε when |ΔE| is
  above the 1 − 2a/3 quantile and grows it when below the a/3 quantile, by the same δ: when the fit is exact ε
  drifts down (log ε by ≈ −1e-3 per step for exponential |ΔE|, ≈ −6e-5 for half-normal |ΔE|);
- for a Gamma shape k = m²/(s² + 1e-6) < 0.574 the Wilson–Hilferty a/3 quantile is ≤ 0 and ε can only shrink
  (k < 0.028: the 1 − 2a/3 quantile too, every step shrinks; k < 0.018: the reset quantile too, every step
  resets).  The absolute 1e-6 in k means a mean |ΔE| below 7.6e-4 nats alone forces k < 0.574.
Why ε collapses.  With exact gradients |ΔE| is small and heavy-tailed (k < 0.574), so ε only shrinks; smaller ε,
smaller |ΔE|: ε reaches the 1e-8 floor within 5,000 steps from every ε₀ tried (1e-3 to 3; the public code does
the same, step for step).  With minibatch gradients ΔE is dominated by ℓ_B of two different minibatches, which
does not shrink with ε: the rule has nothing to steer, and ε random-walks from ε₀ with the drift above, so the
variance a chain reaches is set by ε₀ (too small: under-dispersed and slow; too large: over-dispersed by the
gradient noise).  That is why the authors choose ε₀ by a grid search per experiment (docs/samplers.md § SMILE /
pSMILE gives their protocol, which the evaluation methods `smile` / `psmile` follow); tests/test_smile.py measures
both regimes on Gaussians.
`tuner=False` gives the naive forms (SMILE-naive, pSMILE-naive): fixed ε, no reset.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from blackjax.mcmc.integrators import partially_refresh_momentum

from l2e.checks import check_flag, check_in_range, check_positive, is_concrete
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, settled, tree_size, tree_vdot

__all__ = ["B1", "SMILEInfo", "SMILEState", "build_kernel", "build_psmile_kernel", "esh_velocity_update", "init",
           "psmile", "smile", "SHIPPED"]

B1 = 0.1931833275037836  # McLachlan minimal-norm coefficients (blackjax `mclachlan_coefficients`)
A1 = 0.5
B2 = 1.0 - 2.0 * B1
MAX_GRAD = 1e6
SHIPPED = {"reset_prob": 0.98, "adaption_prob": 0.1, "adaption_strength": 0.02, "smoothing": 0.01}
"""The tuner constants of every shipped SMILE experiment (the code's defaults are 0.99 / 0.05 / 0.02 / 0.01)."""


class SMILEState(NamedTuple):
    """State of SMILE / pSMILE (pytrees shaped like θ unless a scalar is said).

    position: θ; velocity: u, a unit vector over all coordinates (dimensionless; zero at the start and after a
    reset); grad: stored ∇ℓ_B of the last evaluation (nats per θ unit; pSMILE: divided by that step's s);
    logdensity: scalar, stored ℓ_B of the last evaluation (nats; 0: none yet); step_size: scalar ε (θ units);
    de_mean, de_std: scalars, running mean and standard deviation of |ΔE| (nats); grad_mean, grad_sd: pSMILE's
    running gradient mean m and standard deviation σ (ones, unused without preconditioning); step: int32 scalar,
    steps done (the code's t − 1).
    """

    position: PyTree
    velocity: PyTree
    grad: PyTree
    logdensity: jax.Array
    step_size: jax.Array
    de_mean: jax.Array
    de_std: jax.Array
    grad_mean: PyTree
    grad_sd: PyTree
    step: jax.Array


class SMILEInfo(NamedTuple):
    """Per-step diagnostics of SMILE / pSMILE (all scalars).

    loss: f32, mean minibatch NLL at the step's last evaluation (the integrated position, before a possible reset;
    SMILE evaluates nothing at the pre-update position on this minibatch), nats per example; is_finite: bool, loss,
    ΔE and Σθ'² finite; energy_change: f32, ΔE = kinetic change of the three velocity updates + (ℓ_stored − ℓ_new)
    (nats; the tuner's input); step_size: f32, the ε this step used (θ units; pSMILE moves coordinate i by
    ε·u_i/s_i); reset: bool, the guardrail reverted this step.  No `kinetic`: T_kin is not defined for an
    isokinetic velocity (module doc).
    """

    loss: jax.Array
    is_finite: jax.Array
    energy_change: jax.Array
    step_size: jax.Array
    reset: jax.Array


def init(position: PyTree, step_size=1e-3) -> SMILEState:
    """The SMILE / pSMILE state at `position`: velocity, stored gradient and statistics zero; pSMILE's m = σ = 1.

    Args:
      position: θ, a pytree of float arrays with d ≥ 2 coordinates in all.
      step_size: the initial ε (θ units).
    Returns:
      SMILEState (step 0).
    """
    dtype = jax.tree.leaves(position)[0].dtype
    zeros = jax.tree.map(jnp.zeros_like, position)
    ones = jax.tree.map(jnp.ones_like, position)
    zero = jnp.zeros((), dtype)
    return SMILEState(position, zeros, zeros, zero, jnp.asarray(step_size, dtype), zero, zero, ones, ones,
                      jnp.zeros((), jnp.int32))


def _normalised(tree):
    """(tree / |tree|, |tree|); a tree of norm ≤ 1e-13 is returned unchanged (blackjax)."""
    norm = jnp.sqrt(tree_vdot(tree, tree))
    safe = jnp.where(norm > 1e-13, norm, 1.0)
    return jax.tree.map(lambda a: a / safe, tree), norm


def esh_velocity_update(velocity: PyTree, grad: PyTree, h) -> tuple[PyTree, jax.Array]:
    """The exact isokinetic (ESH) velocity map over time h for the log-density gradient `grad` (blackjax 1.2.2's form).

    A zero velocity is turned towards the gradient.

    Args:
      velocity: u, a unit (or zero) vector as a pytree (d ≥ 2 coordinates).
      grad: ∇ℓ, a pytree like `velocity` (nats per θ unit).
      h: the time step (θ units), a scalar.
    Returns:
      (new unit velocity, a pytree like `velocity`; kinetic-energy change (d − 1)[δ − log 2 + log(1 + u·e +
      (1 − u·e)ζ²)], a scalar in nats).
    """
    d = tree_size(velocity)
    e, gnorm = _normalised(grad)
    ue = tree_vdot(velocity, e)
    delta = h * gnorm / (d - 1)
    zeta = jnp.exp(-delta)
    raw = jax.tree.map(lambda ei, ui: ei * (1 - zeta) * (1 + zeta + ue * (1 - zeta)) + 2 * zeta * ui, e, velocity)
    new, _ = _normalised(raw)
    return new, (delta - math.log(2.0) + jnp.log(1 + ue + (1 - ue) * zeta**2)) * (d - 1)


def _precondition_scale(grad_sd: PyTree) -> PyTree:
    """s = clip(σ, 1e-2, 1e4) / rms(clip(σ, 1e-2, 1e4)) over every coordinate."""
    clipped = jax.tree.map(lambda s: jnp.clip(s, 1e-2, 1e4), grad_sd)
    rms = jnp.sqrt(tree_vdot(clipped, clipped) / tree_size(clipped))
    return jax.tree.map(lambda c: c / rms, clipped)


def _integrate(value_and_grad, state: SMILEState, eps, scale):
    """One McLachlan step: (position, velocity, stored gradient (/s), ℓ_B, loss, kinetic change)."""

    def move(x, u):
        if scale is None:
            return jax.tree.map(lambda xi, ui: xi + eps * A1 * ui, x, u)
        return jax.tree.map(lambda xi, ui, si: xi + eps * A1 * ui / si, x, u, scale)

    def evaluate(x):
        (logdensity, loss), g = value_and_grad(x)
        g = jax.tree.map(lambda a: jnp.where(jnp.isnan(a), 0.0, jnp.clip(a, -MAX_GRAD, MAX_GRAD)), g)
        if scale is not None:
            g = jax.tree.map(jnp.divide, g, scale)
        return g, logdensity, loss

    u, dk1 = esh_velocity_update(state.velocity, state.grad, eps * B1)
    x = move(state.position, u)
    g, _, _ = evaluate(x)
    u, dk2 = esh_velocity_update(u, g, eps * B2)
    x = move(x, u)
    g, logdensity, loss = evaluate(x)
    u, dk3 = esh_velocity_update(u, g, eps * B1)
    return x, u, g, logdensity, loss, dk1 + dk2 + dk3


def _gamma_quantile(p, shape, scale):
    """Wilson–Hilferty approximation of the Gamma(shape, scale) quantile at probability p."""
    z = jax.scipy.stats.norm.ppf(p)
    return scale * shape * (1 - 1 / (9 * shape) + z / (3 * jnp.sqrt(shape))) ** 3


def _tune(state: SMILEState, abs_de, reset_prob, adaption_prob, adaption_strength, smoothing):
    """(reset, new ε, new mean, new std) of the guardrail and step-size rule (module doc)."""
    t = state.step.astype(abs_de.dtype) + 1.0
    m, s = state.de_mean, state.de_std
    var = s**2 + 1e-6
    shape, scale = m**2 / var, var / m
    active = t >= 10.0
    reset = active & (abs_de > _gamma_quantile(reset_prob, shape, scale))
    eps = state.step_size
    new = jnp.where(abs_de > _gamma_quantile(1 - 2 * adaption_prob / 3, shape, scale), eps * (1 - adaption_strength),
                    eps)
    new = jnp.where(abs_de < _gamma_quantile(adaption_prob / 3, shape, scale), new * (1 + adaption_strength), new)
    new = jnp.where(active, jnp.clip(new, 1e-8, 10.0), eps)
    mean = jnp.clip(jnp.where(t < 3.0, abs_de, m * (1 - smoothing) + smoothing * abs_de), 1e-6, 1e6)
    v = s**2 * (t != 1.0) * (1 - smoothing) + smoothing * (abs_de - mean) ** 2
    correction = jnp.where(t < 5.0, 1.0, 1.0 - 0.5 ** (t - 4.0))
    std = jnp.clip(jnp.sqrt(v / correction), 1e-6, 1e7)
    return reset, new, mean, std


def _update_noise_stats(grad_mean: PyTree, grad_sd: PyTree, raw_grad: PyTree) -> tuple[PyTree, PyTree]:
    """pSMILE's gradient-noise EMAs from this step's final raw gradient (m first, then σ with the new m)."""
    mean = jax.tree.map(lambda m, g: jnp.clip(m * 0.99 + g * 0.01, -MAX_GRAD, MAX_GRAD), grad_mean, raw_grad)
    sd = jax.tree.map(lambda s, g, m: jnp.sqrt(jnp.maximum(s**2 * 0.99 + (g - m) ** 2 * 0.01, 1e-7)), grad_sd,
                      raw_grad, mean)
    return mean, sd


def _refresh(velocity: PyTree, key: jax.Array, eps, decoherence_length) -> PyTree:
    """Half of MCLMC's Maruyama partial velocity refresh over time ε/2 (blackjax's `partially_refresh_momentum`)."""
    return partially_refresh_momentum(velocity, key, 0.5 * eps, decoherence_length)


def build_kernel(posterior: Posterior, preconditioned: bool = False, tuner: bool = True,
                 likelihood_scale: float | None = None):
    """The SMILE step (module doc): one isokinetic McLachlan step on the minibatch log density, then the tuner.

    Args:
      posterior: the model (`l2e.Posterior`); SMILE targets ℓ_B = log p − S·mean NLL_B.
      preconditioned: pSMILE (static).
      tuner: the step-size rule and reset guardrail (static; False: the naive fixed-step form).
      likelihood_scale: S (None: N; the public code uses (N // B)·B).
    Returns:
      kernel(key, state, minibatch, reset_prob=0.98, adaption_prob=0.1, adaption_strength=0.02, smoothing=0.01,
      decoherence_length=None) -> (SMILEState, SMILEInfo).  The tuner constants (probabilities and fractions) may
      be traced and are ignored with `tuner=False`; decoherence_length L (θ units) turns on the partial velocity
      refresh drawn from `key` (None, the default: no refresh, and the key is not used).
    """
    scale_s = float(posterior.data_size if likelihood_scale is None else likelihood_scale)

    def logdensity(x, minibatch):
        loss = posterior.nll(x, minibatch)
        return posterior.log_prior(x) - scale_s * loss, loss

    def kernel(key: jax.Array, state: SMILEState, minibatch, reset_prob=SHIPPED["reset_prob"],
               adaption_prob=SHIPPED["adaption_prob"], adaption_strength=SHIPPED["adaption_strength"],
               smoothing=SHIPPED["smoothing"], decoherence_length=None):
        if tree_size(state.position) < 2:
            raise ValueError("SMILE needs at least 2 coordinates (the ESH map divides by d − 1)")
        scale = _precondition_scale(state.grad_sd) if preconditioned else None
        vg = jax.value_and_grad(lambda x: logdensity(x, minibatch), has_aux=True)
        if decoherence_length is not None:  # the key's only use (module doc: randomness)
            k_before, k_after = jax.random.split(key)
            state = state._replace(velocity=_refresh(state.velocity, k_before, state.step_size, decoherence_length))
        x, u, g, ld, loss, dk = _integrate(vg, state, state.step_size, scale)
        if decoherence_length is not None:
            u = _refresh(u, k_after, state.step_size, decoherence_length)
        de = dk + (state.logdensity - ld) * (state.logdensity != 0.0)
        if tuner:
            reset, eps, de_mean, de_std = _tune(state, jnp.abs(de), reset_prob, adaption_prob, adaption_strength,
                                                smoothing)
            x = jax.tree.map(lambda old, new: jnp.where(reset, old, new), state.position, x)
            u = jax.tree.map(lambda v: jnp.where(reset, jnp.zeros_like(v), v), u)
        else:
            reset, eps, de_mean, de_std = jnp.zeros((), bool), state.step_size, state.de_mean, state.de_std
        grad_mean, grad_sd = state.grad_mean, state.grad_sd
        if preconditioned:
            grad_mean, grad_sd = _update_noise_stats(grad_mean, grad_sd, jax.tree.map(jnp.multiply, g, scale))
        new = SMILEState(x, u, g, ld, eps, de_mean, de_std, grad_mean, grad_sd, state.step + 1)
        finite = all_finite(loss, de, tree_vdot(*settled((x, x))))
        return new, SMILEInfo(loss, finite, de, state.step_size, reset)

    return kernel


def build_psmile_kernel(posterior: Posterior, tuner: bool = True, likelihood_scale: float | None = None):
    """pSMILE's kernel: `build_kernel(posterior, preconditioned=True, tuner, likelihood_scale)`.

    Args:
      posterior: the model (`l2e.Posterior`).
      tuner: the step-size rule and reset guardrail (False: pSMILE-naive).
      likelihood_scale: S of ℓ_B = log p − S·mean NLL_B (None: N).
    Returns:
      kernel(key, state, minibatch, reset_prob, adaption_prob, adaption_strength, smoothing, decoherence_length)
      -> (SMILEState, SMILEInfo), as `build_kernel`.
    """
    return build_kernel(posterior, True, tuner, likelihood_scale)


def smile(posterior: Posterior, step_size: float = 1e-3, tuner: bool = True, preconditioned: bool = False,
          reset_prob: float = SHIPPED["reset_prob"], adaption_prob: float = SHIPPED["adaption_prob"],
          adaption_strength: float = SHIPPED["adaption_strength"], smoothing: float = SHIPPED["smoothing"],
          likelihood_scale: float | None = None, decoherence_length: float | None = None) -> SamplingAlgorithm:
    """SMILE (tuner on) or SMILE-naive (`tuner=False`); `preconditioned=True` gives pSMILE(-naive).

    Args:
      posterior: the model (`l2e.Posterior`).
      step_size: the initial (naive: fixed) ε > 0 (θ units).
      tuner: the step-size rule and reset guardrail.
      preconditioned: pSMILE.
      reset_prob: the Gamma quantile above which a step is reverted, in [0, 1].
      adaption_prob: a in [0, 1]: ε shrinks above the 1 − 2a/3 quantile, grows below a/3.
      adaption_strength: δ in [0, 1): the relative change of ε.
      smoothing: β in [0, 1]: the weight of a new |ΔE| in the running statistics.
      likelihood_scale: S of ℓ_B = log p − S·mean NLL_B (None: N).
      decoherence_length: L > 0 (θ units) of the partial velocity refresh drawn from the step key (∞: none); None
        (default, the published kernels): no refresh and the key is not used — deterministic given the minibatches.
    Returns:
      SamplingAlgorithm: init(position) -> SMILEState, step(key, state, minibatch) -> (SMILEState, SMILEInfo).
    """
    check_positive(step_size=step_size)
    check_flag(tuner=tuner, preconditioned=preconditioned)
    if likelihood_scale is not None:
        check_positive(likelihood_scale=likelihood_scale)
    check_in_range("reset_prob", reset_prob, 0.0, 1.0)
    check_in_range("adaption_prob", adaption_prob, 0.0, 1.0)
    check_in_range("adaption_strength", adaption_strength, 0.0, 1.0, include_high=False)
    check_in_range("smoothing", smoothing, 0.0, 1.0)
    if decoherence_length is not None and not (is_concrete(decoherence_length) and decoherence_length == math.inf):
        check_positive(decoherence_length=decoherence_length)
    kernel = build_kernel(posterior, preconditioned, tuner, likelihood_scale)

    def init_fn(position: PyTree) -> SMILEState:
        return init(position, step_size)

    def step(key: jax.Array, state: SMILEState, minibatch):
        return kernel(key, state, minibatch, reset_prob, adaption_prob, adaption_strength, smoothing,
                      decoherence_length)

    return SamplingAlgorithm(init_fn, step)


def psmile(posterior: Posterior, step_size: float = 1e-3, tuner: bool = True, **kwargs) -> SamplingAlgorithm:
    """pSMILE: `smile(..., preconditioned=True)`.

    Args:
      posterior: the model (`l2e.Posterior`).
      step_size: the initial (naive: fixed) ε > 0 (θ units).
      tuner: the step-size rule and reset guardrail (False: pSMILE-naive).
      **kwargs: the other arguments of `smile` (tuner constants, likelihood_scale, decoherence_length).
    Returns:
      SamplingAlgorithm: init(position) -> SMILEState, step(key, state, minibatch) -> (SMILEState, SMILEInfo).
    """
    return smile(posterior, step_size, tuner, preconditioned=True, **kwargs)
