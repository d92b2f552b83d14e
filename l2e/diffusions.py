"""One-step updates shared by the kernels, written per coordinate.

Every update is elementwise: it applies to one pytree leaf (via `jax.tree.map`) and to a flat (d,) vector
alike (the fused L2E kernel). Step sizes, frictions and noise scales are scalars (Python floats or traced).
Units: ε is the physical step (ε = lr/N for Langevin, ε = sqrt(lr/N) for momentum methods with lr in
mean-loss units); ∇Ũ = N·ḡ − ∇log p(θ); z ~ N(0, 1).

Operation order is part of each function's contract (floating point): callers rely on bit-identical chains.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


# ------------------------------------------------------------------------ scalar coefficients


def physical_step_size(learning_rate, data_size: int):
    """ε = sqrt(lr / N): the physical step of a momentum sampler whose lr is in mean-loss units.

    Args:
      learning_rate: lr = ε²·N (scalar).
      data_size: N.
    Returns:
      ε, a scalar.
    """
    return jnp.sqrt(learning_rate / data_size)


def langevin_noise_std(step_size, temperature):
    """sqrt(2·ε·T): the noise scale of a Langevin step of size ε at temperature T.

    Args:
      step_size: ε (physical).
      temperature: T.
    Returns:
      a scalar (θ units).
    """
    return jnp.sqrt(2.0 * step_size * temperature)


def sghmc_noise_std(step_size, friction, temperature):
    """sqrt(2·C·ε·T): the momentum noise scale of SGHMC (friction C) at temperature T.

    Args:
      step_size: ε (physical).
      friction: C.
      temperature: T.
    Returns:
      a scalar (momentum units).
    """
    return jnp.sqrt(2.0 * friction * step_size * temperature)


# ------------------------------------------------------------------------ per-coordinate updates


def langevin(x: jax.Array, grad_u: jax.Array, z: jax.Array, step_size, noise_std) -> jax.Array:
    """Euler–Maruyama Langevin step: θ − ε·∇Ũ + σ·z.

    Args:
      x, grad_u, z: arrays of one shape: θ, ∇Ũ, standard normal noise.
      step_size: ε. noise_std: σ.
    Returns:
      θ', same shape.
    """
    return x - step_size * grad_u + noise_std * z


def preconditioned_langevin(x: jax.Array, grad_u: jax.Array, z: jax.Array, precond: jax.Array, step_size,
                            noise_std) -> jax.Array:
    """Langevin step with a diagonal preconditioner G (Γ term dropped): θ − ε·G·∇Ũ + σ·√G·z.

    Args:
      x, grad_u, z, precond: arrays of one shape: θ, ∇Ũ, standard normal noise, G.
      step_size: ε. noise_std: σ.
    Returns:
      θ', same shape.
    """
    return x - step_size * precond * grad_u + noise_std * jnp.sqrt(precond) * z


def sghmc_momentum(r: jax.Array, grad_u: jax.Array, z: jax.Array, step_size, friction, noise_std) -> jax.Array:
    """SGHMC momentum update (mass I): r − ε·∇Ũ − ε·C·r + σ·z. SGNHT passes its thermostat ξ as C.

    Args:
      r, grad_u, z: arrays of one shape: momentum, ∇Ũ, standard normal noise.
      step_size: ε. friction: C. noise_std: σ.
    Returns:
      r', same shape.
    """
    return r - step_size * grad_u - step_size * friction * r + noise_std * z


def learned_momentum(r: jax.Array, grad_u: jax.Array, alpha: jax.Array, beta: jax.Array, z: jax.Array, step_size,
                     friction, noise_std) -> jax.Array:
    """The SGHMC momentum update with a learned drift α and friction direction β (L2E):
    r − ε·(∇Ũ + α + C·β) + σ·z. α ≡ 0, β ≡ r is `sghmc_momentum` in exact arithmetic.

    Args:
      r, grad_u, alpha, beta, z: arrays of one shape: momentum, ∇Ũ, α, β, standard normal noise.
      step_size: ε. friction: C. noise_std: σ.
    Returns:
      r', same shape.
    """
    return r - step_size * (grad_u + alpha + friction * beta) + noise_std * z


def position_update(x: jax.Array, velocity: jax.Array, step_size) -> jax.Array:
    """θ + ε·v: the position half of SGHMC (v = r) and of L2E (v = β(θ, r')).

    Args:
      x, velocity: arrays of one shape: θ and v.
      step_size: ε.
    Returns:
      θ', same shape.
    """
    return x + step_size * velocity


def sgd_momentum(v: jax.Array, grad_u: jax.Array, z: jax.Array, momentum, step_size, noise_std) -> jax.Array:
    """SGHMC in SGD-with-momentum form (v in parameter units per step): μ·v − η·∇Ũ + σ·z, then θ ← θ + v.
    With v = ε·r, η = ε², μ = 1 − ε·C it is SGHMC; σ = 0 is heavy-ball SGD.

    Args:
      v, grad_u, z: arrays of one shape: velocity, ∇Ũ, standard normal noise.
      momentum: μ. step_size: η. noise_std: σ.
    Returns:
      v', same shape.
    """
    return momentum * v - step_size * grad_u + noise_std * z
