"""The functional prior of fSGLD / fSGHMC (Wu, Xuan & Lu, 2025): the GP-prior potential, its kernels and the
jitter escalation; the samplers are `l2e.fsgld` and `l2e.fsghmc` (docs/samplers.md § Functional SGLD / SGHMC).

Ũ(θ) = N·mean_{i∈B} nll_i(θ) + ½ Σ_c (f_c − m_c)ᵀ K_c⁻¹ (f_c − m_c)  [+ optional −log p_w(θ), a flagged deviation]

with f_c = f(X_M; θ)[:, c] the network outputs at M measurement points X_M redrawn every step from the step key,
m_c = m(X_M)[:, c] and K_c = k(X_M, X_M) (+ jitter).  ∇ of the prior term is J_Mᵀ K⁻¹(f_M − m_M): one extra
forward pass on X_M, the kernel (O(M²·dim)), one Cholesky (O(M³), X_M changes every step) and one VJP — no
Jacobian or NTK is formed.  The log-det term is constant and dropped; the prior term is not scaled by N/|B|.

Jitter: K + j·mean(diag K)·I with j = jitter·10^k (default jitter 1e-6), k the first of
0 … JITTER_TRIES − 1 whose Cholesky factor is finite — an in-graph `while_loop` (`escalating_cholesky`) in the
default float dtype for points redrawn every update; in float64 once (`fixed_measurement`) for fixed points.
Every step reports the jitter used and whether the factor was finite (`chol_ok`, AND-accumulated in the state;
`jitter`, the largest so far).  A non-finite factor makes the step's gradient non-finite.

Learning rates are in mean-loss units as in `l2e.sgld` / `l2e.sghmc`: fSGLD uses ε = lr/N, fSGHMC ε = sqrt(lr/N).
Both are `SamplingAlgorithm`s; the step key also draws the measurement points.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.types import PyTree

__all__ = ["JITTER_TRIES", "FunctionalPosterior", "Measurement", "PriorInfo", "escalating_cholesky",
           "fixed_measurement", "functional_posterior", "per_class_kernel", "rbf_kernel"]


# ----------------------------------------------------------------------------------------------- kernels


def rbf_kernel(lengthscale: float = 1.0, variance: float = 1.0) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The RBF kernel k(x, x') = variance·exp(−|x − x'|²/(2·lengthscale²)).

    Args:
      lengthscale: in input units.
      variance: in output units squared.
    Returns:
      k(X (M, ...), X' (M', ...)) -> (M, M'); inputs are flattened per row.
    """

    def k(x1, x2):
        x1 = x1.reshape(x1.shape[0], -1)
        x2 = x2.reshape(x2.shape[0], -1)
        d2 = jnp.sum(x1**2, -1)[:, None] + jnp.sum(x2**2, -1)[None, :] - 2.0 * x1 @ x2.T
        return variance * jnp.exp(-0.5 * jnp.maximum(d2, 0.0) / lengthscale**2)

    return k


def per_class_kernel(kernels) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """One independent GP per output: stack one kernel per class/logit.

    Args:
      kernels: C kernels, each (X, X') -> (M, M').
    Returns:
      k(X, X') -> (C, M, M').
    """

    def k(x1, x2):
        return jnp.stack([kc(x1, x2) for kc in kernels])

    return k


# ------------------------------------------------------------------------------------------- posterior


JITTER_TRIES = 7
"""Jitter escalation: relative jitters j·10^k, k = 0 … JITTER_TRIES − 1, the first with a finite factor is used."""


class PriorInfo(NamedTuple):
    """The prior term's diagnostics of one evaluation (scalars): chol_ok: bool, the Cholesky factor(s) of K_MM were
    finite (after escalation); prior_energy: f32, ½ Σ_c rᵀK⁻¹r (nats); jitter: f32, the relative jitter used
    (× mean diag K)."""

    chol_ok: jax.Array
    prior_energy: jax.Array
    jitter: jax.Array


class Measurement(NamedTuple):
    """The measurement points of one update and the factor of their kernel matrix.

    x_m: X_M (M, ...); chol: lower Cholesky of K + jitter, (M, M) or (C, M, M), for points redrawn every update
    (None otherwise); precision: (K + jitter)⁻¹, same shapes, for fixed points precomputed once (None otherwise);
    ok: bool scalar, the factor is finite; jitter: f32 scalar, the relative jitter used.
    """

    x_m: jax.Array
    chol: Optional[jax.Array]
    precision: Optional[jax.Array]
    ok: jax.Array
    jitter: jax.Array


def escalating_cholesky(kmat: jax.Array, jitter: float, tries: int = JITTER_TRIES):
    """(L, relative jitter used, ok) for K + j·mean(diag K)·I, j = jitter·10^k for the first k < tries with a finite
    factor (in-graph `while_loop`, K's dtype); (…, M, M) batches share one j.

    Args:
      kmat: K, (M, M) or (…, M, M).
      jitter: the initial relative jitter j.
      tries: the number of jitters tried.
    Returns:
      (L: lower Cholesky factor, K's shape; the relative jitter used, a scalar; ok: bool scalar, False when no try
      gave a finite factor).
    """
    scale = jnp.mean(jnp.diagonal(kmat, axis1=-2, axis2=-1), axis=-1)
    eye = jnp.eye(kmat.shape[-1], dtype=kmat.dtype)

    def attempt(k):
        j = jnp.asarray(jitter, kmat.dtype) * jnp.asarray(10.0, kmat.dtype) ** k
        chol = jnp.linalg.cholesky(kmat + (j * scale)[..., None, None] * eye)
        return chol, j, jnp.all(jnp.isfinite(chol))

    def body(carry):
        k = carry[0] + 1
        return (k, *attempt(k))

    first = attempt(jnp.zeros((), jnp.int32))
    _, chol, j, ok = jax.lax.while_loop(lambda c: (~c[3]) & (c[0] < tries - 1), body,
                                        (jnp.zeros((), jnp.int32), *first))
    return chol, j, ok


def fixed_measurement(kernel: Callable, x_m, jitter: float, tries: int = JITTER_TRIES) -> Measurement:
    """The Measurement of points that never change: (K + j·mean(diag K)·I)⁻¹ computed once in float64 (numpy; the
    kernel evaluated under jax x64) with the same escalation as `escalating_cholesky`, stored in float32.

    Args:
      kernel: (X, X') -> (M, M) or (C, M, M).
      x_m: the fixed points X_M (M, ...).
      jitter: the initial relative jitter j.
      tries: the number of jitters tried.
    Returns:
      Measurement with `precision` set (NaN and ok False when no try gave a finite factor).
    """
    import numpy as np
    import scipy.linalg

    with jax.enable_x64(True):
        kmat = np.asarray(kernel(jnp.asarray(np.asarray(x_m), jnp.float64), jnp.asarray(np.asarray(x_m), jnp.float64)),
                          np.float64)
    eye = np.eye(kmat.shape[-1])
    scale = np.mean(np.diagonal(kmat, axis1=-2, axis2=-1), axis=-1)
    for k in range(tries):
        j = jitter * 10.0**k
        try:
            mats = (kmat + (j * np.asarray(scale))[..., None, None] * eye).reshape(-1, *kmat.shape[-2:])
            prec = np.stack([scipy.linalg.cho_solve((np.linalg.cholesky(m), True), eye) for m in mats])
        except np.linalg.LinAlgError:
            continue
        if np.all(np.isfinite(prec)):
            return Measurement(jnp.asarray(x_m), None, jnp.asarray(prec.reshape(kmat.shape), jnp.float32),
                               jnp.asarray(True), jnp.asarray(j, jnp.float32))
    return Measurement(jnp.asarray(x_m), None, jnp.full(kmat.shape, jnp.nan, jnp.float32), jnp.asarray(False),
                       jnp.asarray(jitter * 10.0 ** (tries - 1), jnp.float32))


class FunctionalPosterior(NamedTuple):
    """Potential of a functional-prior model.

    apply_fn: (params, X (M, ...)) -> f (M,) or (M, C), the network outputs (e.g. regression mean, logits).
    nll: (params, minibatch) -> scalar, the **mean** minibatch NLL (as in `Posterior`).
    measurement_sampler: (key, minibatch) -> X_M (M, ...), drawn anew every step.
    kernel: (X, X') -> (M, M') shared by all outputs, or (C, M, M') one GP per output.
    data_size: N.  prior_mean: X_M -> same shape as f (default 0).  jitter: initial relative jitter (× mean diag
    K), escalated ×10 while the factor is not finite (`escalating_cholesky`).
    weight_log_prior: optional params -> log p_w(θ) (deviation from the paper, which has no weight prior).
    fixed: a `fixed_measurement` (points that never change, e.g. all training inputs): used instead of the sampler.
    """

    apply_fn: Callable
    nll: Callable
    measurement_sampler: Callable
    kernel: Callable
    data_size: int
    prior_mean: Optional[Callable] = None
    jitter: float = 1e-6
    weight_log_prior: Optional[Callable] = None
    fixed: Optional[Measurement] = None

    def measure(self, key: jax.Array, minibatch: Any) -> Measurement:
        """The measurement points of one update and the factor of their kernel matrix.

        Args:
          key: PRNG key of the points (unused for fixed points).
          minibatch: passed to `measurement_sampler`.
        Returns:
          a Measurement.
        """
        if self.fixed is not None:
            return self.fixed
        return self.measure_at(self.measurement_sampler(key, minibatch))

    def measure_at(self, x_m: jax.Array) -> Measurement:
        """The Measurement of given points (Cholesky with escalation).

        Args:
          x_m: X_M (M, ...).
        Returns:
          a Measurement with `chol` set.
        """
        chol, jit, ok = escalating_cholesky(jax.lax.stop_gradient(self.kernel(x_m, x_m)), self.jitter)
        return Measurement(x_m, chol, None, ok, jit)

    def prior_energy(self, params: PyTree, meas: Measurement) -> tuple[jax.Array, PriorInfo]:
        """The prior energy ½ Σ_c (f_c − m_c)ᵀ K_c⁻¹ (f_c − m_c) at the points of `meas`.

        Args:
          params: θ (pytree).
          meas: a Measurement.
        Returns:
          (energy: scalar, nats; PriorInfo).
        """
        x_m = meas.x_m
        f = self.apply_fn(params, x_m)
        r = f if self.prior_mean is None else f - self.prior_mean(x_m)
        fac = meas.precision if meas.precision is not None else meas.chol
        if fac.ndim == 2:  # shared kernel: r (M,) or (M, C) — columns are the per-output GPs
            a = fac @ r if meas.precision is not None else jax.scipy.linalg.cho_solve((fac, True), r)
        else:  # (C, M, M): r must be (M, C)
            solve = (lambda c, rc: c @ rc) if meas.precision is not None else \
                (lambda c, rc: jax.scipy.linalg.cho_solve((c, True), rc))
            a = jax.vmap(solve, in_axes=(0, 1), out_axes=1)(fac, r)
        energy = 0.5 * jnp.sum(r * a)
        return energy, PriorInfo(meas.ok, jax.lax.stop_gradient(energy), meas.jitter)

    def potential(self, params: PyTree, minibatch: Any, x_m: jax.Array) -> tuple[jax.Array, PriorInfo]:
        """Ũ(θ) = N·nll + prior energy (− log p_w) at fixed points.

        Args:
          params: θ (pytree).
          minibatch: passed to `nll`.
          x_m: X_M (M, ...).
        Returns:
          (Ũ: scalar, nats; PriorInfo).
        """
        u, (_, info) = self._potential_and_loss(params, minibatch, self.measure_at(x_m))
        return u, info

    def _potential_and_loss(self, params, minibatch, meas: Measurement):
        """(Ũ, (mean minibatch NLL, PriorInfo)) at the points of `meas`."""
        energy, info = self.prior_energy(params, meas)
        loss = self.nll(params, minibatch)
        u = self.data_size * loss + energy
        if self.weight_log_prior is not None:
            u = u - self.weight_log_prior(params)
        return u, (loss, info)

    def value_and_potential_grad(self, params: PyTree, minibatch: Any, key: jax.Array):
        """The loss and the potential gradient with X_M drawn from `key`.

        Args:
          params: θ (pytree).
          minibatch: passed to `nll` and `measurement_sampler`.
          key: PRNG key of the measurement points.
        Returns:
          (loss: mean minibatch NLL, scalar, nats per example; ∇Ũ = N·ḡ + J_Mᵀ K⁻¹(f_M − m_M) [− ∇log p_w], a
          pytree like θ; PriorInfo).
        """
        meas = self.measure(key, minibatch)
        (_, (loss, info)), grad_u = jax.value_and_grad(self._potential_and_loss, has_aux=True)(
            params, minibatch, meas)
        return loss, grad_u, info

    def potential_grad(self, params: PyTree, minibatch: Any, key: jax.Array) -> tuple[PyTree, PriorInfo]:
        """`value_and_potential_grad` without the loss.

        Args:
          params: θ (pytree).
          minibatch: passed to `nll` and `measurement_sampler`.
          key: PRNG key of the measurement points.
        Returns:
          (∇Ũ, a pytree like θ; PriorInfo).
        """
        _, grad_u, info = self.value_and_potential_grad(params, minibatch, key)
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
    fixed_points: Optional[jax.Array] = None,
) -> FunctionalPosterior:
    """Build a `FunctionalPosterior` (see its docstring for the argument contracts).

    Args:
      apply_fn: (params, X (M, ...)) -> f (M,) or (M, C).
      likelihood_nll: (params, minibatch) -> the mean minibatch NLL (scalar).
      measurement_sampler: (key, minibatch) -> X_M (M, ...).
      kernel: (X, X') -> (M, M') or (C, M, M').
      data_size: N > 0.
      prior_mean: X_M -> f's shape (None: 0).
      jitter: the initial relative jitter (× mean diag K).
      weight_log_prior: optional params -> log p_w(θ) (a flagged deviation).
      fixed_points: X_M to use at every update, their kernel matrix inverted once (`fixed_measurement`), instead
        of the sampler.
    Returns:
      a FunctionalPosterior.
    """
    check_positive(data_size=data_size, jitter=jitter)
    fixed = None if fixed_points is None else fixed_measurement(kernel, fixed_points, jitter)
    return FunctionalPosterior(apply_fn, likelihood_nll, measurement_sampler, kernel, data_size, prior_mean,
                               jitter, weight_log_prior, fixed)
