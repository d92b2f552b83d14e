"""Functional SGLD / SGHMC (Wu, Xuan & Lu, 2025) — ordinary SGLD/SGHMC on a GP-prior potential (BASELINES §5).

Ũ(θ) = N·mean_{i∈B} nll_i(θ) + ½ Σ_c (f_c − m_c)ᵀ K_c⁻¹ (f_c − m_c)  [+ optional −log p_w(θ), a flagged deviation]

with f_c = f(X_M; θ)[:, c] the network outputs at M measurement points X_M redrawn every step from the step key,
m_c = m(X_M)[:, c] and K_c = k(X_M, X_M) (+ jitter).  ∇ of the prior term is J_Mᵀ K⁻¹(f_M − m_M): one extra
forward pass on X_M, the kernel (O(M²·dim)), one Cholesky (O(M³), X_M changes every step) and one VJP — no
Jacobian or NTK is formed.  The log-det term is constant and dropped; the prior term is not scaled by N/|B|.

Jitter: K + jitter·mean(diag K)·I with a *fixed* relative jitter (default 1e-6), in the default float dtype
(float32 unless jax_enable_x64).  The spec's "escalate ×10 on failure" needs data-dependent retries, which do not
fit a jitted step; instead every step reports whether the Cholesky factor was finite (`chol_ok` in the state,
AND-accumulated over the chain), so a failed factorisation is visible and the caller can rerun with a larger
jitter.  A non-finite factor makes the step's gradient non-finite.

Learning rates are in mean-loss units as in `l2e.sgld` / `l2e.sghmc`: fSGLD uses ε = lr/N, fSGHMC ε = sqrt(lr/N).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from l2e.sghmc import physical_step_size
from l2e.sgld import check_positive
from l2e.types import PyTree, normal_like


# ----------------------------------------------------------------------------------------------- kernels


def rbf_kernel(lengthscale: float = 1.0, variance: float = 1.0) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """k(x, x') = variance·exp(−|x − x'|²/(2·lengthscale²)).  Returned fn: (M, D), (M', D) -> (M, M')."""

    def k(x1, x2):
        x1 = x1.reshape(x1.shape[0], -1)
        x2 = x2.reshape(x2.shape[0], -1)
        d2 = jnp.sum(x1**2, -1)[:, None] + jnp.sum(x2**2, -1)[None, :] - 2.0 * x1 @ x2.T
        return variance * jnp.exp(-0.5 * jnp.maximum(d2, 0.0) / lengthscale**2)

    return k


def per_class_kernel(kernels) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Stack one kernel per class/logit: returned fn gives (C, M, M') — one independent GP per output."""

    def k(x1, x2):
        return jnp.stack([kc(x1, x2) for kc in kernels])

    return k


# ------------------------------------------------------------------------------------------- posterior


class PriorInfo(NamedTuple):
    chol_ok: jax.Array  # bool scalar: the Cholesky factor(s) of K_MM were finite
    prior_energy: jax.Array  # ½ Σ_c rᵀK⁻¹r at this step (nats)


class FunctionalPosterior(NamedTuple):
    """Potential of a functional-prior model.

    apply_fn: (params, X (M, ...)) -> f (M,) or (M, C), the network outputs (e.g. regression mean, logits).
    nll: (params, minibatch) -> scalar, the **mean** minibatch NLL (as in `Posterior`).
    measurement_sampler: (key, minibatch) -> X_M (M, ...), drawn anew every step.
    kernel: (X, X') -> (M, M') shared by all outputs, or (C, M, M') one GP per output.
    data_size: N.  prior_mean: X_M -> same shape as f (default 0).  jitter: relative jitter (× mean diag K).
    weight_log_prior: optional params -> log p_w(θ) (deviation from the paper, which has no weight prior).
    """

    apply_fn: Callable
    nll: Callable
    measurement_sampler: Callable
    kernel: Callable
    data_size: int
    prior_mean: Optional[Callable] = None
    jitter: float = 1e-6
    weight_log_prior: Optional[Callable] = None

    def prior_energy(self, params: PyTree, x_m: jax.Array) -> tuple[jax.Array, PriorInfo]:
        """½ Σ_c (f_c − m_c)ᵀ K_c⁻¹ (f_c − m_c) at measurement points x_m; returns (energy, PriorInfo)."""
        f = self.apply_fn(params, x_m)
        r = f if self.prior_mean is None else f - self.prior_mean(x_m)
        kmat = self.kernel(x_m, x_m)
        jit = self.jitter * jnp.mean(jnp.diagonal(kmat, axis1=-2, axis2=-1), axis=-1)
        eye = jnp.eye(kmat.shape[-1], dtype=kmat.dtype)
        kmat = kmat + jnp.asarray(jit)[..., None, None] * eye
        chol = jnp.linalg.cholesky(kmat)
        chol = jax.lax.stop_gradient(chol)  # K does not depend on θ
        if kmat.ndim == 2:  # shared kernel: r (M,) or (M, C) — columns are the per-output GPs
            a = jax.scipy.linalg.cho_solve((chol, True), r)
            energy = 0.5 * jnp.sum(r * a)
        else:  # (C, M, M): r must be (M, C)
            a = jax.vmap(lambda c, rc: jax.scipy.linalg.cho_solve((c, True), rc), in_axes=(0, 1), out_axes=1)(chol, r)
            energy = 0.5 * jnp.sum(r * a)
        ok = jnp.all(jnp.isfinite(chol))
        return energy, PriorInfo(ok, jax.lax.stop_gradient(energy))

    def potential(self, params: PyTree, minibatch: Any, x_m: jax.Array) -> tuple[jax.Array, PriorInfo]:
        """Ũ(θ) = N·nll + prior energy (− log p_w) at fixed x_m; returns (Ũ, PriorInfo)."""
        energy, info = self.prior_energy(params, x_m)
        u = self.data_size * self.nll(params, minibatch) + energy
        if self.weight_log_prior is not None:
            u = u - self.weight_log_prior(params)
        return u, info

    def potential_grad(self, params: PyTree, minibatch: Any, key: jax.Array) -> tuple[PyTree, PriorInfo]:
        """(∇Ũ, PriorInfo) with X_M drawn from `key`: N·ḡ + J_Mᵀ K⁻¹(f_M − m_M) [− ∇log p_w]."""
        x_m = self.measurement_sampler(key, minibatch)
        grad_u, info = jax.grad(self.potential, has_aux=True)(params, minibatch, x_m)
        return grad_u, info


def functional_posterior(
    apply_fn: Callable,
    likelihood_nll: Callable,
    measurement_sampler: Callable,
    kernel: Callable,
    data_size: int,
    prior_mean: Optional[Callable] = None,
    jitter: float = 1e-6,
    weight_log_prior: Optional[Callable] = None,
) -> FunctionalPosterior:
    """Build a `FunctionalPosterior` (see its docstring for the argument contracts)."""
    check_positive(data_size=data_size, jitter=jitter)
    return FunctionalPosterior(apply_fn, likelihood_nll, measurement_sampler, kernel, data_size, prior_mean,
                               jitter, weight_log_prior)


# --------------------------------------------------------------------------------------------- samplers


class FSGLDState(NamedTuple):
    position: PyTree
    step: jax.Array  # int32
    chol_ok: jax.Array  # bool: every Cholesky so far was finite


class FSGHMCState(NamedTuple):
    position: PyTree
    momentum: PyTree
    step: jax.Array
    chol_ok: jax.Array


class FunctionalSampler(NamedTuple):
    """Like `SamplingAlgorithm`: init(position) -> state; step(key, state, minibatch) -> state.
    The step key also draws the measurement points."""

    init: Callable
    step: Callable


def fsgld(posterior: FunctionalPosterior, learning_rate: float, temperature: float = 1.0) -> FunctionalSampler:
    """fSGLD: θ ← θ − ε∇Ũ + sqrt(2εT)ξ, ε = lr/N (mean-loss units, as `l2e.sgld`)."""
    check_positive(learning_rate=learning_rate, temperature=temperature)
    eps = learning_rate / posterior.data_size

    def init(position: PyTree) -> FSGLDState:
        return FSGLDState(position, jnp.zeros((), jnp.int32), jnp.ones((), bool))

    def step(key: jax.Array, state: FSGLDState, minibatch) -> FSGLDState:
        k_m, k_n = jax.random.split(key)
        grad_u, info = posterior.potential_grad(state.position, minibatch, k_m)
        noise = normal_like(k_n, state.position)
        scale = jnp.sqrt(2.0 * eps * temperature)
        pos = jax.tree.map(lambda x, g, z: x - eps * g + scale * z, state.position, grad_u, noise)
        return FSGLDState(pos, state.step + 1, state.chol_ok & info.chol_ok)

    return FunctionalSampler(init, step)


def fsghmc(
    posterior: FunctionalPosterior,
    learning_rate: float,
    friction: float = 0.1,
    temperature: float = 1.0,
    resample_momentum_every: Optional[int] = None,
) -> FunctionalSampler:
    """fSGHMC, same update as `l2e.sghmc` (ε = sqrt(lr/N), mass I, persistent momentum starting at 0) on Ũ:
    r ← r − ε∇Ũ(θ) − εC·r + N(0, 2CεT),  θ ← θ + ε·r.
    `resample_momentum_every` = m: draw r ~ N(0, T·I) before every m-th update (Algorithm 2 per a third-party
    reading); None (default) = persistent momentum."""
    check_positive(learning_rate=learning_rate, friction=friction, temperature=temperature)
    if resample_momentum_every is not None:
        check_positive(resample_momentum_every=resample_momentum_every)
    eps = physical_step_size(learning_rate, posterior.data_size)
    noise_std = jnp.sqrt(2.0 * friction * eps * temperature)

    def init(position: PyTree) -> FSGHMCState:
        zeros = jax.tree.map(jnp.zeros_like, position)
        return FSGHMCState(position, zeros, jnp.zeros((), jnp.int32), jnp.ones((), bool))

    def step(key: jax.Array, state: FSGHMCState, minibatch) -> FSGHMCState:
        k_m, k_n, k_r = jax.random.split(key, 3)
        mom = state.momentum
        if resample_momentum_every is not None:
            fresh = jax.tree.map(lambda z: jnp.sqrt(temperature) * z, normal_like(k_r, mom))
            redraw = jnp.mod(state.step, resample_momentum_every) == 0
            mom = jax.tree.map(lambda a, b: jnp.where(redraw, a, b), fresh, mom)
        grad_u, info = posterior.potential_grad(state.position, minibatch, k_m)
        noise = normal_like(k_n, state.position)
        mom = jax.tree.map(lambda r, g, z: r - eps * g - eps * friction * r + noise_std * z, mom, grad_u, noise)
        pos = jax.tree.map(lambda x, r: x + eps * r, state.position, mom)
        return FSGHMCState(pos, mom, state.step + 1, state.chol_ok & info.chol_ok)

    return FunctionalSampler(init, step)
