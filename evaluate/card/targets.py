"""The sampler card's known targets (a 10-D isotropic Gaussian, a 100-D anisotropic Gaussian, a 2-D two-mode
mixture), its configuration and the minibatch-style posterior of a target with gradient noise (module doc of
evaluate.card)."""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from base.io import ConfigError
from l2e.types import Posterior

__all__ = ["CardConfig", "Target", "banana_target", "batch_noise", "builder_noise", "card_posterior",
           "default_targets", "gaussian_target", "half_batches", "mixture_target"]


class Target(NamedTuple):
    """A known target: energy U(θ) on a flat vector θ (d,), its exact mean and per-coordinate variance."""

    name: str
    energy: Callable[[jax.Array], jax.Array]
    mean: np.ndarray
    var: np.ndarray
    grad_scale: np.ndarray  # (d,) 1/σ_i: the scale of the gradient of coordinate i (noise units)
    sample: Callable[[jax.Array, int], jax.Array]  # (key, n) -> (n, d) exact draws
    moment: Callable[[jax.Array], jax.Array] | None = None  # a scalar statistic of θ beyond mean and variance
    moment_value: float | None = None  # its exact expectation
    moment_label: str = ""


def gaussian_target(name: str, sigmas) -> Target:
    sig = np.asarray(sigmas, np.float32)
    s = jnp.asarray(sig)
    return Target(name, lambda x: 0.5 * jnp.sum((x / s) ** 2), np.zeros_like(sig), sig**2, 1.0 / sig,
                  lambda key, n: jax.random.normal(key, (n, sig.size)) * s)


def mixture_target(name: str = "mixture-2d", offset: float = 1.0, scale: float = 0.5) -> Target:
    """½N((−m, 0), s²I) + ½N((m, 0), s²I): mean 0, variance (s² + m², s²)."""
    mu = jnp.asarray([offset, 0.0])

    def energy(x):
        a = -0.5 * jnp.sum(((x - mu) / scale) ** 2)
        b = -0.5 * jnp.sum(((x + mu) / scale) ** 2)
        return -jnp.logaddexp(a, b)

    def sample(key, n):
        k1, k2 = jax.random.split(key)
        sign = jnp.where(jax.random.bernoulli(k1, 0.5, (n, 1)), 1.0, -1.0)
        return sign * mu + scale * jax.random.normal(k2, (n, 2))

    return Target(name, energy, np.zeros(2, np.float32), np.asarray([scale**2 + offset**2, scale**2], np.float32),
                  np.full(2, 1.0 / scale, np.float32), sample)


def banana_target(name: str = "banana", scale: float = 0.5) -> Target:
    """θ1 ~ N(0, 1), θ2 | θ1 ~ N(θ1² − 1, s²): mean 0, variance (1, 2 + s²), E[θ1²θ2] = E[θ1⁴] − E[θ1²] = 2 (the
    curvature a Gaussian fit misses)."""

    def energy(x):
        return 0.5 * x[0] ** 2 + 0.5 * ((x[1] - x[0] ** 2 + 1.0) / scale) ** 2

    def sample(key, n):
        k1, k2 = jax.random.split(key)
        a = jax.random.normal(k1, (n,))
        return jnp.stack([a, a**2 - 1.0 + scale * jax.random.normal(k2, (n,))], axis=1)

    return Target(name, energy, np.zeros(2, np.float32), np.asarray([1.0, 2.0 + scale**2], np.float32),
                  np.asarray([1.0, 1.0 / scale], np.float32), sample, lambda x: x[0] ** 2 * x[1], 2.0, "E[θ1²θ2]")


def default_targets() -> tuple[Target, ...]:
    return (gaussian_target("gaussian-10d", np.ones(10)),
            gaussian_target("gaussian-100d-aniso", np.logspace(-1, 1, 100)),
            mixture_target(), banana_target())


@dataclasses.dataclass(frozen=True)
class CardConfig:
    """step_factor: ε = step_factor·σ_min; friction: C; noise: ν (relative gradient-noise scale);
    num_steps per chain (burn_in of them discarded), num_chains per seed, seeds of SGHMC's band."""

    step_factor: float = 0.1
    friction: float = 1.0
    noise: float = 0.5
    data_size: int = 1000
    num_steps: int = 40_000
    burn_in: int = 8_000
    num_chains: int = 4
    band_seeds: int = 3
    seed: int = 0

    def check(self) -> "CardConfig":
        """self, or ConfigError naming the first bad field (run after all overrides: fields depend on each other)."""
        for name in ("step_factor", "friction", "data_size", "num_steps", "num_chains", "band_seeds"):
            v = getattr(self, name)
            if not (0 < v < math.inf):
                raise ConfigError(f"{name} must be a positive finite number, got {v}")
        if not (0 <= self.noise < math.inf):
            raise ConfigError(f"noise must be a non-negative finite number, got {self.noise}")
        if not 0 <= self.burn_in < self.num_steps:
            raise ConfigError(f"burn_in ({self.burn_in}) must be in [0, num_steps = {self.num_steps})")
        from cli import limits

        for name, limit in (("num_steps", limits.MAX_STEPS), ("num_chains", limits.MAX_CHAINS),
                            ("band_seeds", limits.MAX_SAMPLES)):
            limits.at_most(name, getattr(self, name), limit)
        return self


def half_batches(sample_noise: Callable) -> Callable:
    """sample_noise(key) -> ξ made into a minibatch of two half-batches: rows(key) -> (ξ + ξ', ξ − ξ') stacked, ξ' an
    independent draw of ξ's law. The rows' mean (`batch_noise`) is ξ, the noise every other sampler sees, its law
    unchanged; each row has twice ξ's variance, as half a minibatch does, and half their difference, ξ', has ξ's
    variance: what a sampler that estimates its minibatch noise from two half-batches reads
    (l2e.adaptation.halved_gradients). The card and the analytic benchmark give it to a builder with
    `halves = True` (Policy-L2E's, Transient-L2E's, precond_fisher's)."""
    def rows(key):
        xi, other = sample_noise(key), sample_noise(jax.random.fold_in(key, 1))
        return jnp.stack([xi + other, xi - other])

    return rows


def builder_noise(builder, sample_noise: Callable) -> Callable:
    """The noise draw a card builder's sampler is given: `half_batches(sample_noise)` for a builder with
    `halves = True`, else `sample_noise` itself."""
    return half_batches(sample_noise) if getattr(builder, "halves", False) else sample_noise


def batch_noise(xi: jax.Array, x: jax.Array) -> jax.Array:
    """The noise of a minibatch for a position x: ξ itself (x's shape), or the mean of a batch of `half_batches`'
    rows (a leading row axis: both rows, or one half)."""
    return jnp.mean(xi, axis=0) if xi.ndim > x.ndim else xi


def card_posterior(target: Target, cfg: CardConfig) -> tuple[Posterior, Callable]:
    """(posterior, sample_noise(key) -> ξ (d,)) of `target` with gradient noise ν·grad_scale; the posterior also
    takes `half_batches`' rows."""
    n = cfg.data_size
    noise_std = jnp.asarray(cfg.noise * target.grad_scale)

    def nll(params, xi):
        x = params["x"]
        return (target.energy(x) + jnp.dot(x, batch_noise(xi, x))) / n

    post = Posterior(nll, lambda params: jnp.zeros(()), n)
    return post, lambda key: noise_std * jax.random.normal(key, noise_std.shape)
