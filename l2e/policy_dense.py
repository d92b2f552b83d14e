"""Policy-L2E's dense mass (`mass_rule="dense"`, l2e.policy): the Fisher-divergence metric as a full matrix.

The diagonal Fisher rule sets σ̂²ᵢ = sqrt(Var θᵢ / Var ∇ᵢŨ) coordinate by coordinate. Its matrix form is the Σ that
solves Σ·G·Σ = C, for C the chains' covariance of θ and G that of ∇Ũ (the metric nutpie adapts in low rank;
Seyboldt et al., 2024):

    Σ = C^½ (C^½ G C^½)^-½ C^½.

On a Gaussian target ∇U = H(θ − μ), so G = H·C·H whatever the chains' spread C, and Σ = H⁻¹ exactly: the frame is
right as soon as the chains span every direction, before they have arrived. That is what the diagonal misses on an
ill-conditioned linear regression (the diagonally scaled Hessian of the zoo's held-out linear regressions has a
condition number of 12–1,100).

A phase with a frame A = Σ^½ runs SGHMC in the coordinates u with θ = A·u: ∇_u Ũ = Aᵀ∇Ũ, the mass there is 1,
the minibatch noise V̂ᵤ = diag(Aᵀ V A) (V the half-batch noise's full covariance, gathered), the curvature cap
reads λ_max(AᵀHA), and the position moves by ε·A·M⁻¹r. The chains keep θ; the momenta live in u. Only where θ has
at most DENSE_MAX coordinates (the gathered statistics are M + 1 matrices d × d); a larger model keeps the
diagonal Fisher rule.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.adaptation import corrected_sghmc, flat, unflat
from l2e.reductions import chain_sum
from l2e.types import Posterior, PyTree

__all__ = ["DENSE_MAX", "Dense", "dense_size", "framed_posterior", "frame", "gather_dense", "init_dense",
           "move_dense", "to_frame"]

DENSE_MAX = 256
"""The most coordinates θ may have for the dense mass (above it, mass_rule "dense" is the diagonal Fisher rule)."""
_FLOOR = 1e-6
"""Eigenvalues of C, G and the product below _FLOOR × their largest are raised to it (a direction no chain moved
along keeps a finite mass)."""


class Dense(NamedTuple):
    """cx, cg: per chain (M, d, d) — the gathering window's co-moments Σ(θ − θ̄)(θ − θ̄)ᵀ and those of ∇Ũ; nv: (d, d),
    the live chains' mean of δδᵀ (δ = (∇Ũ₁ − ∇Ũ₂)/2, the half-batch noise); frame, frame_inv: A and A⁻¹ (d, d), the
    identity until the first dense adaptation point. d = 0 where θ has more than DENSE_MAX coordinates."""

    cx: jax.Array
    cg: jax.Array
    nv: jax.Array
    frame: jax.Array
    frame_inv: jax.Array


def dense_size(positions: PyTree) -> int:
    """d, θ's number of coordinates (one chain of `positions`, leaves (M, …)), or 0 where it exceeds DENSE_MAX."""
    d = sum(int(x[0].size) for x in jax.tree.leaves(positions))
    return d if d <= DENSE_MAX else 0


def init_dense(positions: PyTree) -> Dense:
    """Zero co-moments and the identity frame for M chains at `positions` (leaves (M, …))."""
    d, chains = dense_size(positions), jax.tree.leaves(positions)[0].shape[0]
    z = jnp.zeros((chains, d, d), jnp.float32)
    eye = jnp.eye(d, dtype=jnp.float32)
    return Dense(z, z, jnp.zeros((d, d), jnp.float32), eye, eye)


def gather_dense(dense: Dense, count, mean_x, mean_g, pre, grad_u, diff) -> Dense:
    """The co-moments with one more state per chain (θ before the update, ∇Ũ, δ); mean_x, mean_g: the per-chain
    Welford means before this state; count: states gathered with this one. The pooled noise averages the chains
    whose θ and δ are finite (a divergent chain's co-moments are left out where they are pooled, `frame`)."""
    if dense.frame.shape[0] == 0:
        return dense

    def comoment(c, mean, x):  # Welford's co-moment update, per chain
        x, m = jax.vmap(flat)(x), jax.vmap(flat)(mean)
        new = m + (x - m) / count
        return c + jnp.einsum("ci,cj->cij", x - m, x - new)

    d = jax.vmap(flat)(diff)
    alive = jnp.all(jnp.isfinite(d), axis=1) & jnp.all(jnp.isfinite(jax.vmap(flat)(pre)), axis=1)
    outer = chain_sum(jnp.einsum("ci,cj->cij", d, d), alive) / jnp.maximum(jnp.sum(alive), 1.0)
    return dense._replace(cx=comoment(dense.cx, mean_x, pre), cg=comoment(dense.cg, mean_g, grad_u),
                          nv=dense.nv + (outer - dense.nv) / count)


def _sqrt_and_inverse(m: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(m^½, m^-½) of a symmetric matrix, its eigenvalues floored at _FLOOR × the largest."""
    w, q = jnp.linalg.eigh(0.5 * (m + m.T))
    w = jnp.maximum(w, _FLOOR * jnp.max(w) + 1e-30)
    return (q * jnp.sqrt(w)) @ q.T, (q / jnp.sqrt(w)) @ q.T


def frame(dense: Dense, n, alive) -> tuple[Dense, jax.Array]:
    """At an adaptation point: (the state with the new frame A, A⁻¹ and its co-moments reset, V̂ᵤ = diag(AᵀVA)) from
    the live chains' pooled within-chain covariances of θ and ∇Ũ over n states each (module docstring).

    Solved in the previous frame's coordinates (C and G mapped by its A₀⁻¹ and A₀ᵀ, their off-diagonals shrunk by
    m/(m + d) for m = n × live chains, the diagonal rule's scale σ̂ᵢ = (Cᵢᵢ/Gᵢᵢ)^¼ taken out first), so that in
    float32 each adaptation point refines the last: A = A₀·S·R with R² the scaled Σ."""
    k = jnp.maximum(jnp.sum(alive), 1.0)
    d = dense.frame.shape[0]
    w = n * k / (n * k + d)

    def pooled(cm, left, right):
        cov = left @ (cm / k / jnp.maximum(n - 1.0, 1.0)) @ right
        return w * cov + (1.0 - w) * jnp.diag(jnp.diag(cov))

    a0, a0_inv = dense.frame, dense.frame_inv
    c = pooled(chain_sum(dense.cx, alive), a0_inv, a0_inv.T)
    g = pooled(chain_sum(dense.cg, alive), a0.T, a0)
    s = jnp.power((jnp.diag(c) + 1e-30) / (jnp.diag(g) + 1e-30), 0.25)
    c_half, _ = _sqrt_and_inverse(c / s[:, None] / s[None, :])
    _, middle = _sqrt_and_inverse(c_half @ (g * s[:, None] * s[None, :]) @ c_half)
    root, root_inv = _sqrt_and_inverse(c_half @ middle @ c_half)
    a, a_inv = a0 @ (s[:, None] * root), (root_inv / s[None, :]) @ a0_inv
    noise = jnp.maximum(jnp.einsum("ji,jk,ki->i", a, dense.nv, a), 0.0)
    z = jnp.zeros_like(dense.cx)
    return Dense(z, z, jnp.zeros_like(dense.nv), a, a_inv), noise


def framed_posterior(posterior: Posterior, a: jax.Array, like: PyTree) -> Posterior:
    """The posterior of u with θ = A·u (`like`: one chain's θ, for the shapes)."""
    def theta(u):
        return unflat(a @ flat(u), like)

    return Posterior(lambda u, mb: posterior.nll(theta(u), mb), lambda u: posterior.log_prior(theta(u)),
                     posterior.data_size)


def to_frame(m: jax.Array, positions: PyTree) -> PyTree:
    """Every chain's θ (leaves (M, …)) mapped by the matrix m (u = A⁻¹θ for m = A⁻¹), in θ's shapes."""
    like = jax.tree.map(lambda x: x[0], positions)
    return jax.vmap(lambda p: unflat(m @ flat(p), like))(positions)


def move_dense(position, momentum, grad_u, a, inv_mass, friction, noise_var, eps, temperature, z,
               chain_axis: bool = False):
    """Every chain's SGHMC update in the frame (l2e.adaptation.corrected_sghmc on u with ∇_u Ũ = Aᵀ∇Ũ; θ' = θ +
    ε·A·M⁻¹r'). inv_mass, friction, noise_var: the frame's, in θ's shapes (no chain axis; friction and noise_var with
    one where `chain_axis`: each chain's); eps: ε, or (M,) each chain's. Returns (θ', r')."""
    like = jax.tree.map(lambda x: x[0], position)

    def one(p, r, g, zi, f, v, e):
        _, mom, velocity = corrected_sghmc(jnp.zeros_like(flat(p)), flat(r), a.T @ flat(g), flat(inv_mass),
                                           flat(f), flat(v), e, temperature, flat(zi))
        return jax.tree.map(jnp.add, p, unflat(e * (a @ velocity), like)), unflat(mom, like)

    axis = 0 if chain_axis else None
    return jax.vmap(one, in_axes=(0, 0, 0, 0, axis, axis, 0 if jnp.ndim(eps) else None))(
        position, momentum, grad_u, z, friction, noise_var, eps)
