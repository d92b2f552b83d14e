"""Scale-adapted SGHMC (Springenberg, Klein, Falkner & Hutter, NeurIPS 2016, "Bayesian optimization with robust
Bayesian neural networks", Eqs. 8–10): SGHMC whose diagonal preconditioner and noise come from burn-in estimates of
the gradient's magnitude, with its published defaults and no grid.

In the paper's variables (v a velocity in parameter units per update, ε the step, M̂⁻¹ = 1/sqrt(v̂)):

    v ← v − ε²·M̂⁻¹·∇Ũ(θ) − m·v + N(0, 2ε²·m·M̂⁻¹·T − ε⁴),     θ ← θ + v,

with m the momentum decay ("mdecay", the friction per update: m = ε·M̂⁻¹·C) and the variance clamped at 1e-16 from
below. During burn-in (updates t < burn_in) the estimates are updated before they are used, per coordinate:

    τ ← τ − τ·ĝ²/(v̂ + δ) + 1,   r = 1/(τ + 1) (from τ before this update),   ĝ ← ĝ − r·ĝ + r·∇Ũ,
    v̂ ← v̂ − r·v̂ + r·∇Ũ²,

starting from τ = ĝ = v̂ = 1 (an adaptive averaging window: τ grows while the gradient's mean is small against its
spread); then they are frozen. ∇Ũ = N·ḡ − ∇log p(θ) (the authors scale the mean loss's gradient by N). Published
defaults (the authors' public implementation): ε = 1e-2, m = 0.05, δ = 1e-16, 3,000 burn-in updates, momentum
starting at 0. Here the burn-in is the evaluation's (the updates before the sampling window), T multiplies the
injected noise's friction term (T = 1 is the published method), and the momentum in SGHMC's units is
r = v·M̂/ε, whose kinetic term Σ r·∇_rK = Σ v²·sqrt(v̂)/ε² (≈ d·T at equilibrium) is reported.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.checks import check_in_range, check_positive, check_step_count
from l2e.types import Posterior, PyTree, SamplingAlgorithm, all_finite, normal_like, settled, tree_vdot

__all__ = ["DEFAULTS", "AdaptiveSGHMCInfo", "AdaptiveSGHMCState", "adaptive_sghmc", "build_kernel", "init"]

DEFAULTS = {"step_size": 1e-2, "mdecay": 0.05, "delta": 1e-16, "burn_in": 3000}
"""The published defaults (Springenberg et al. 2016, the authors' implementation)."""


class AdaptiveSGHMCState(NamedTuple):
    """position: θ; velocity: v (parameter units per update); tau, mean_grad, sq_grad: the burn-in estimates τ, ĝ,
    v̂ per coordinate (units of ∇Ũ and ∇Ũ²); step: updates done (int32 scalar)."""

    position: PyTree
    velocity: PyTree
    tau: PyTree
    mean_grad: PyTree
    sq_grad: PyTree
    step: jax.Array


class AdaptiveSGHMCInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and kinetic finite (bool scalar);
    kinetic: Σ v'²·sqrt(v̂)/ε², the SGHMC momentum's Σ r·∇_rK at the new velocity (≈ d·T at equilibrium)."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init(position: PyTree) -> AdaptiveSGHMCState:
    """The state before the first update: v = 0, τ = ĝ = v̂ = 1.

    Args:
      position: θ₀, a pytree of float32 arrays.
    Returns:
      AdaptiveSGHMCState.
    """
    ones = jax.tree.map(jnp.ones_like, position)
    return AdaptiveSGHMCState(position, jax.tree.map(jnp.zeros_like, position), ones, ones, ones,
                              jnp.zeros((), jnp.int32))


def build_kernel(posterior: Posterior, burn_in: int = DEFAULTS["burn_in"]):
    """kernel(key, state, minibatch, step_size=1e-2, mdecay=0.05, temperature=1.0, delta=1e-16) ->
    (AdaptiveSGHMCState, AdaptiveSGHMCInfo).

    Args:
      posterior: the target (l2e.Posterior).
      burn_in: updates during which the estimates adapt (an int, or a traced integer scalar); frozen from update `burn_in` on.
    Returns:
      The kernel; step_size = ε (per update, dimensionless: the preconditioner carries the units), mdecay = m.
    """
    check_step_count("burn_in", burn_in, 0)

    def adapt(state, grad_u, delta):
        def leaf(tau, g, v, gu):
            r = 1.0 / (tau + 1.0)
            return tau - tau * (g * g / (v + delta)) + 1.0, g - g * r + r * gu, v - v * r + r * gu * gu

        out = jax.tree.map(leaf, state.tau, state.mean_grad, state.sq_grad, grad_u)
        outer = jax.tree.structure(state.position)
        tau, g, v = jax.tree.transpose(outer, jax.tree.structure((0, 0, 0)), out)
        return state._replace(tau=tau, mean_grad=g, sq_grad=v)

    def kernel(key: jax.Array, state: AdaptiveSGHMCState, minibatch, step_size=DEFAULTS["step_size"],
               mdecay=DEFAULTS["mdecay"], temperature=1.0, delta=DEFAULTS["delta"]):
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        state = jax.lax.cond(state.step < burn_in, lambda s: adapt(s, grad_u, delta), lambda s: s, state)
        z = normal_like(key, state.position)
        eps2 = step_size * step_size

        def move(v, gu, vhat, zi):
            minv = 1.0 / (jnp.sqrt(vhat) + delta)
            sigma = jnp.sqrt(jnp.maximum(2.0 * eps2 * mdecay * minv * temperature - eps2 * eps2, 1e-16))
            return v - eps2 * minv * gu - mdecay * v + sigma * zi

        vel = jax.tree.map(move, state.velocity, grad_u, state.sq_grad, z)
        pos = jax.tree.map(jnp.add, state.position, vel)
        weighted = jax.tree.map(lambda v, vhat: v * (jnp.sqrt(vhat) + delta) / eps2, vel, state.sq_grad)
        kinetic = tree_vdot(*settled((vel, weighted)))
        new = state._replace(position=pos, velocity=vel, step=state.step + 1)
        return new, AdaptiveSGHMCInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def adaptive_sghmc(posterior: Posterior, step_size: float = DEFAULTS["step_size"], mdecay: float = DEFAULTS["mdecay"],
                   temperature: float = 1.0, burn_in: int = DEFAULTS["burn_in"], delta: float = DEFAULTS["delta"]
                   ) -> SamplingAlgorithm:
    """Scale-adapted SGHMC (module docstring) with the published defaults.

    Args:
      posterior: the target (l2e.Posterior).
      step_size: ε per update (published 1e-2).
      mdecay: the momentum decay m per update (published 0.05).
      temperature: T (1 is the published method).
      burn_in: updates during which the estimates adapt.
      delta: δ, the stabiliser of M̂⁻¹ = 1/(sqrt v̂ + δ).
    Returns:
      SamplingAlgorithm: init(position) -> AdaptiveSGHMCState; step(key, state, minibatch) -> (state, info).
    """
    check_positive(step_size=step_size, mdecay=mdecay, temperature=temperature, delta=delta)
    check_in_range("mdecay", mdecay, 0.0, 1.0, include_low=False)  # the friction per update: above 1 it blows up
    kernel = build_kernel(posterior, burn_in)

    def step(key: jax.Array, state: AdaptiveSGHMCState, minibatch):
        return kernel(key, state, minibatch, step_size, mdecay, temperature, delta)

    return SamplingAlgorithm(init, step)
