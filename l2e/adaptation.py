"""Burn-in statistics shared by the samplers that adapt a diagonal preconditioner and then freeze it
(l2e.precond_sghmc, l2e.transient): Welford's running moments of a pytree, and the minibatch gradient with the
variance of its minibatch noise estimated from two half-batches; and the top curvature of the preconditioned
minibatch Hessian (power method); the burn-in's RMSprop-preconditioned Langevin move; and the frozen window's update,
SGHMC with a diagonal mass whose injected noise is corrected for the estimated minibatch noise (l2e.transient,
l2e.policy)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from l2e.reductions import chain_sum
from l2e.types import Posterior, PyTree, normal_like, tree_vdot

__all__ = [
    "corrected_sghmc", "ensemble_curvature", "flat", "halved_difference", "halved_gradients", "pooled_moments",
    "power_method", "rmsprop_langevin", "top_curvature", "unflat", "welford",
]


def welford(count, mean: PyTree, m2: PyTree, x: PyTree) -> tuple[PyTree, PyTree]:
    """Welford's update of a running mean and sum of squared deviations with the `count`-th value x (count ≥ 1)."""
    new_mean = jax.tree.map(lambda m, v: m + (v - m) / count, mean, x)
    return new_mean, jax.tree.map(lambda s, m, mn, v: s + (v - m) * (v - mn), m2, mean, new_mean, x)


def halved_gradients(posterior: Posterior, position: PyTree, minibatch, inside) -> tuple[jax.Array, PyTree, PyTree]:
    """(loss, ∇Ũ, V̂): where `inside` (the adaptation window: a traced bool, or a Python bool in a phase kernel, then
    without a branch), from the two halves of the minibatch along every leaf's leading axis — ∇Ũ their mean and
    V̂ = (∇Ũ₁ − ∇Ũ₂)²/4, the variance of the full batch's gradient noise; elsewhere one gradient and V̂ = 0."""
    return _halved(posterior, position, minibatch, inside, lambda a, b: 0.25 * jnp.square(a - b))


def halved_difference(posterior: Posterior, position: PyTree, minibatch, inside) -> tuple[jax.Array, PyTree, PyTree]:
    """`halved_gradients` with δ = (∇Ũ₁ − ∇Ũ₂)/2 in place of V̂ = δ² (the noise's signed sample, for its covariance
    across coordinates: l2e.policy_dense); elsewhere δ = 0."""
    return _halved(posterior, position, minibatch, inside, lambda a, b: 0.5 * (a - b))


def _halved(posterior: Posterior, position: PyTree, minibatch, inside, spread):
    """(loss, mean of the halves' ∇Ũ, spread(∇Ũ₁, ∇Ũ₂) per leaf) where `inside`; else one gradient and zeros."""
    def halves(mb):
        first = jax.tree.map(lambda x: x[: x.shape[0] // 2], mb)
        second = jax.tree.map(lambda x: x[x.shape[0] // 2:], mb)
        # the halves' NLL gradients, the prior's once: ∇Ũ₁ − ∇Ũ₂ = N·(ḡ₁ − ḡ₂) (on XLA:CPU each ∇Ũₖ would be a
        # θ-sized array per chain written and read again)
        (l1, g1), (l2, g2) = (jax.value_and_grad(posterior.nll)(position, h) for h in (first, second))
        gp, n = jax.grad(posterior.log_prior)(position), posterior.data_size
        return (0.5 * (l1 + l2), jax.tree.map(lambda a, b, p: n * (0.5 * (a + b)) - p, g1, g2, gp),
                jax.tree.map(lambda a, b: spread(n * a, n * b), g1, g2))

    def whole(mb):
        loss, _, grad_u = posterior.value_and_potential_grad(position, mb)
        return loss, grad_u, jax.tree.map(jnp.zeros_like, grad_u)

    if isinstance(inside, bool):  # known when traced (a phase kernel): no branch
        return halves(minibatch) if inside else whole(minibatch)
    return jax.lax.cond(inside, halves, whole, minibatch)


def top_curvature(posterior: Posterior, position: PyTree, minibatch, inv_mass: PyTree, key,
                  iterations: int) -> jax.Array:
    """λ_max of M^{-1/2}·H·M^{-1/2} (the eigenvalues of M⁻¹H; M⁻¹ = `inv_mass`, diagonal; H the minibatch potential's
    Hessian at `position`) by `iterations` steps of the power method on Hessian-vector products (forward over
    reverse; one gradient's cost each) from a start vector drawn with `key`: |vᵀ·M^{-1/2}HM^{-1/2}·v| at the last."""
    return power_method(posterior, position, minibatch, inv_mass, normal_like(key, position), iterations)[0]


def power_method(posterior: Posterior, position: PyTree, minibatch, inv_mass: PyTree, start: PyTree,
                 iterations: int) -> tuple[jax.Array, PyTree]:
    """(|vᵀ·M^{-1/2}HM^{-1/2}·v|, v) after `iterations` (≥ 0) power-method steps from `start` (normalised first), as
    `top_curvature`; iterations + 1 Hessian-vector products. With 0 iterations, the Rayleigh quotient at `start`:
    a lower bound on λ_max that is exact along a shared top direction (l2e.policy's curvature "warm")."""
    def grad_u(p):
        return posterior.value_and_potential_grad(p, minibatch)[2]

    half = jax.tree.map(jnp.sqrt, inv_mass)

    def apply(v):  # M^{-1/2} H M^{-1/2} v
        hv = jax.jvp(grad_u, (position,), (jax.tree.map(jnp.multiply, half, v),))[1]
        return jax.tree.map(jnp.multiply, half, hv)

    def norm(v):
        return jnp.sqrt(tree_vdot(v, v)) + 1e-30

    def body(_, v):
        w = apply(v)
        return jax.tree.map(lambda x: x / norm(w), w)

    v = jax.lax.fori_loop(0, iterations, body, jax.tree.map(lambda x: x / norm(start), start))
    return jnp.abs(tree_vdot(v, apply(v))), v


def ensemble_curvature(posterior: Posterior, positions: PyTree, minibatches, inv_mass: PyTree, key, iterations: int,
                       where: str, alive: jax.Array) -> jax.Array:
    """λ_max of M^{-1/2}·H·M^{-1/2} for a set of chains (leaves with a leading chain axis; one minibatch per chain),
    over the live chains (`alive`, bool per chain; a divergent chain's is left out), by `where`:
    "first": the first live chain's power method (`top_curvature`); "all": the largest of every chain's;
    "warm": the first live chain's power method, then the largest of that and every chain's Rayleigh quotient along
    its top direction (`power_method` with 0 iterations; one product per chain)."""
    live = jax.tree.map(lambda x: x[jnp.argmax(alive)], (positions, minibatches))

    def largest(lams):
        return jnp.max(jnp.where(alive & jnp.isfinite(lams), lams, 0.0))

    if where == "all":
        keys = jax.random.split(key, alive.shape[0])
        return largest(jax.vmap(lambda p, mb, k: top_curvature(posterior, p, mb, inv_mass, k, iterations))(
            positions, minibatches, keys))
    lam, top = power_method(posterior, live[0], live[1], inv_mass, normal_like(key, live[0]), iterations)
    if where == "warm":
        lam = jnp.maximum(lam, largest(jax.vmap(lambda p, mb: power_method(posterior, p, mb, inv_mass, top, 0)[0])(
            positions, minibatches)))
    return lam


def rmsprop_langevin(position: PyTree, grad_u: PyTree, sq: PyTree, z: PyTree, eta, temperature, n_data: int,
                     decay: float, eps: float) -> tuple[PyTree, PyTree]:
    """One RMSprop-preconditioned Langevin update (pSGLD, Li et al., 2016, Γ dropped) with step η/N:

        v' = ρ·v + (1 − ρ)·(∇Ũ/N)²,   P = 1/(λ + √v'),   θ' = θ − (η/N)·P·∇Ũ + √(2·(η/N)·T·P)·ξ.

    `sq`: v, the running mean square; `z`: standard normal draws like `position`; `decay`, `eps`: ρ and λ.
    Returns (θ', v')."""
    sq = jax.tree.map(lambda v, g: decay * v + (1.0 - decay) * jnp.square(g / n_data), sq, grad_u)

    def move(x, g, v, zi):
        precond = 1.0 / (eps + jnp.sqrt(v))
        return x - (eta / n_data) * precond * g + jnp.sqrt(2.0 * (eta / n_data) * temperature * precond) * zi

    return jax.tree.map(move, position, grad_u, sq, z), sq


def corrected_sghmc(position: PyTree, momentum: PyTree, grad_u: PyTree, inv_mass: PyTree, friction: PyTree,
                    noise_var: PyTree, eps, temperature, z: PyTree) -> tuple[PyTree, PyTree, PyTree]:
    """One SGHMC update with mass M (M⁻¹ = `inv_mass`, diagonal), per-coordinate friction γᵢ (`friction`; the
    friction matrix γᵢ·Mᵢ) and the minibatch noise's estimated variance ε²V̂ᵢ (`noise_var`) subtracted from the
    thermostat's (Chen et al., 2014):

        r' = r − ε·∇Ũ − ε·γᵢ·r + N(0, 2·γᵢ·ε·T·Mᵢ − ε²V̂ᵢ)  (at least 0),     θ' = θ + ε·M⁻¹r'.

    `z`: standard normal draws like `position`. Returns (θ', r', M⁻¹r')."""
    def kick(r, g, m, zi, gi, v):
        var = jnp.maximum(2.0 * gi * eps * temperature / m - eps**2 * v, 0.0)  # momentum units (M = 1/m)
        return r - eps * g - eps * gi * r + jnp.sqrt(var) * zi

    mom = jax.tree.map(kick, momentum, grad_u, inv_mass, z, friction, noise_var)
    velocity = jax.tree.map(jnp.multiply, inv_mass, mom)
    return jax.tree.map(lambda x, v: x + eps * v, position, velocity), mom, velocity


def flat(tree: PyTree) -> jax.Array:
    """The leaves of `tree` raveled and joined (a vector)."""
    return jnp.concatenate([jnp.reshape(v, (-1,)) for v in jax.tree.leaves(tree)])


def unflat(vector: jax.Array, like: PyTree) -> PyTree:
    """`flat`'s inverse: a vector cut into the leaves of `like`."""
    leaves, treedef = jax.tree.flatten(like)
    bounds = np.cumsum([0] + [x.size for x in leaves])
    return jax.tree.unflatten(treedef, [vector[lo:hi].reshape(x.shape) for x, lo, hi in
                                        zip(leaves, bounds[:-1], bounds[1:])])


def pooled_moments(mean: PyTree, m2: PyTree, n, alive: jax.Array | None = None
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(within W, between B, pooled mean) per coordinate (flat) from per-chain Welford moments of n states each:
    W the mean within-chain variance, B the variance of the chain means (ddof 1); W + B ≈ the pooled variance.
    alive: (M,) bool, the chains to pool (a divergent chain's moments are left out; None: every chain)."""
    means, m2s = jax.vmap(flat)(mean), jax.vmap(flat)(m2)
    if alive is None:
        alive = jnp.ones(means.shape[0], bool)
    k = jnp.maximum(jnp.sum(alive), 1.0)
    centre = chain_sum(means, alive) / k
    within = chain_sum(m2s, alive) / k / jnp.maximum(n - 1.0, 1.0)
    spread = chain_sum(jnp.square(means - centre), alive)
    between = spread / jnp.maximum(k - 1.0, 1.0) if means.shape[0] > 1 else jnp.zeros_like(within)
    return within, between, centre
