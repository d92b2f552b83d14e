"""Kinetic-L2E (L2E paper App. D; docs/sampling.md § Kinetic-L2E): SGHMC with a learned kinetic energy

    K(θ, r) = ½‖r − μ_φ(θ)‖²,   μ_φ(θ) = mu_scale · MLP_φ(θ-only features)   (l2e.meta_model.apply_mu)

so β = ∇_rK = r − μ(θ) and α = ∇_θK = −J_μ(θ)ᵀ(r − μ(θ)), one `jax.vjp` of μ per step. The SGHMC recipe with this
K (Ma et al., 2015: D = diag(0, C), Q = [[0, −I], [I, 0]]; docs/sampling.md § The complete recipe), in L2E's
symplectic-Euler order (docs/l2e.md § The step as the paper specifies it):

    r' = r − ε·∇Ũ(θ) − ε·C·β(θ, r) − ε·α(θ, r) + N(0, 2CεT)
    θ' = θ + ε·(r' − μ(θ))

with ε = sqrt(lr/N). For the continuous dynamics exp(−(U + K)/T) is stationary; its θ-marginal is exp(−U/T) for
every μ (Z_K(θ) = ∫exp(−K/T)dr does not depend on θ) and r | θ ~ N(μ(θ), T·I). The features of μ are functions of
θ alone (never the minibatch gradient or its averages), so K is one scalar function of (θ, r): the three conditions
of docs/sampling.md § The complete recipe hold. μ ≡ 0 (`l2e.meta_model.init_mu_params(zero_output=True)`) is
SGHMC (tests/test_kinetic.py).

Algebra worth knowing (not a test): in p = r − μ(θ) the continuous dynamics are dθ = p dt,
dp = −∇U dt − C·p dt + (J_μᵀ − J_μ)·p dt + noise, i.e. SGHMC plus a curl from the antisymmetric part of J_μ. A
per-coordinate μ has an almost diagonal, hence almost symmetric, J_μ (off-diagonal terms come from the per-tensor
normalisation only), so what μ changes is the start (p₀ = −μ(θ₀) for r₀ = 0) and the O(ε) discretisation terms.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from l2e.checks import check_positive
from l2e.diffusions import physical_step_size, position_update, sghmc_noise_std
from l2e.meta_model import NUM_THETA_FEATURES, THETA_FEATURE_NAMES, apply_mu, check_mlp_shapes, init_mu_params
from l2e.types import (
    LearnedSampler, Posterior, PyTree, SamplingAlgorithm, Shipped, all_finite, normal_like, settled, tree_vdot,
)

__all__ = ["KineticConfig", "KineticInfo", "KineticState", "build_kernel", "energy", "gradients", "init", "kinetic",
           "kinetic_momentum", "mlp_mu_fn"]


@dataclasses.dataclass(frozen=True)
class KineticConfig:
    """Hyperparameters of the Kinetic-L2E step.

    learning_rate: lr = ε²·N (mean-loss units); friction: C; temperature: T; mu_scale: μ = mu_scale·MLP output.
    """

    learning_rate: float = 0.5
    friction: float = 0.1
    temperature: float = 1.0
    mu_scale: float = 1.0

    def __post_init__(self):
        check_positive(learning_rate=self.learning_rate, friction=self.friction, temperature=self.temperature,
                       mu_scale=self.mu_scale)


class KineticState(NamedTuple):
    """position: θ (pytree); momentum: r (pytree like θ; θ moves by ε·(r − μ(θ))); step: int32 scalar, updates
    done."""

    position: PyTree
    momentum: PyTree
    step: jax.Array


class KineticInfo(NamedTuple):
    """Per-step diagnostics of Kinetic-L2E (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ r'·∇_rK(θ, r') = Σ r'·(r' − μ(θ)) at the new momentum r' (nats; ≈ d·T at equilibrium, so its
    mean ÷ d is T_kin).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


# mu_fn(meta_params, position) -> μ(θ), a pytree shaped like position (already scaled)
MuFn = Callable[[PyTree, PyTree], PyTree]


def mlp_mu_fn(mu_scale: float) -> MuFn:
    """μ(θ) = mu_scale · the per-coordinate μ-MLP on θ-only features (l2e.meta_model.apply_mu).

    Args:
      mu_scale: the output multiplier.
    Returns:
      mu_fn(meta_params, position) -> μ(θ), a pytree shaped like `position` (momentum units).
    """

    def mu_fn(meta_params, position):
        return jax.tree.map(lambda m: mu_scale * m, apply_mu(meta_params, position))

    return mu_fn


def init(position: PyTree) -> KineticState:
    """The Kinetic-L2E state at `position`: momentum r₀ = 0 (as SGHMC; then p₀ = r₀ − μ(θ₀) = −μ(θ₀)).

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      KineticState (step 0).
    """
    return KineticState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def energy(mu_fn: MuFn, meta_params: PyTree, position: PyTree, momentum: PyTree) -> jax.Array:
    """K(θ, r) = ½‖r − μ(θ)‖².

    Args:
      mu_fn: μ (`MuFn`).
      meta_params: φ of μ.
      position: θ (pytree).
      momentum: r (pytree like θ).
    Returns:
      K, a scalar (nats).
    """
    mu = mu_fn(meta_params, position)
    return 0.5 * sum(jnp.sum(jnp.square(r - m)) for r, m in zip(jax.tree.leaves(momentum), jax.tree.leaves(mu)))


def gradients(mu_fn: MuFn, meta_params: PyTree, position: PyTree, momentum: PyTree):
    """(α, β, μ) = (∇_θK, ∇_rK, μ(θ)) at (θ, r): β = r − μ(θ), α = −J_μ(θ)ᵀβ (one vector–Jacobian product).

    Args:
      mu_fn: μ (`MuFn`).
      meta_params: φ of μ.
      position: θ (pytree).
      momentum: r (pytree like θ).
    Returns:
      (α, β, μ), three pytrees shaped like θ.
    """
    mu, vjp = jax.vjp(lambda x: mu_fn(meta_params, x), position)
    beta = jax.tree.map(jnp.subtract, momentum, mu)
    (jt_beta,) = vjp(beta)
    return jax.tree.map(jnp.negative, jt_beta), beta, mu


def kinetic_momentum(r: jax.Array, grad_u: jax.Array, alpha: jax.Array, beta: jax.Array, z: jax.Array, step_size,
                     friction, noise_std) -> jax.Array:
    """r − ε·∇Ũ − ε·C·β − ε·α + σ·z, per coordinate. With β = r and α = ±0 it is l2e.diffusions.sghmc_momentum
    operation for operation (x − ε·(±0) = x exactly).

    Args:
      r, grad_u, alpha, beta, z: arrays of one shape: momentum, ∇Ũ, α = ∇_θK, β = ∇_rK, standard normal noise.
      step_size: ε (physical).
      friction: C.
      noise_std: σ = sqrt(2CεT).
    Returns:
      the new momentum r', same shape.
    """
    return r - step_size * grad_u - step_size * friction * beta - step_size * alpha + noise_std * z


def build_kernel(posterior: Posterior, config: KineticConfig = KineticConfig(), mu_fn: MuFn | None = None):
    """The Kinetic-L2E kernel (module doc); the key draws the momentum noise.

    meta_params and the hyperparameters are call arguments (traced for ES and tuning grids).

    Args:
      posterior: the model (`l2e.Posterior`).
      config: KineticConfig (mu_scale static; lr, friction, temperature the call defaults).
      mu_fn: a custom μ (`MuFn`); None: `mlp_mu_fn(config.mu_scale)`.
    Returns:
      kernel(key, state, minibatch, meta_params, learning_rate=config.learning_rate, friction=config.friction,
      temperature=config.temperature) -> (KineticState, KineticInfo): meta_params φ of μ; learning_rate = ε²·N
      (mean-loss units), friction C, temperature T scalars.
    """
    mu_fn = mlp_mu_fn(config.mu_scale) if mu_fn is None else mu_fn

    def kernel(key: jax.Array, state: KineticState, minibatch, meta_params: PyTree,
               learning_rate=config.learning_rate, friction=config.friction, temperature=config.temperature):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        alpha, beta, mu = gradients(mu_fn, meta_params, state.position, state.momentum)
        noise = normal_like(key, state.position)

        def kick(r, gu, a, b, z):
            return kinetic_momentum(r, gu, a, b, z, eps, friction, noise_std)

        mom = jax.tree.map(kick, state.momentum, grad_u, alpha, beta, noise)
        velocity = jax.tree.map(jnp.subtract, mom, mu)  # ∇_rK(θ, r') = r' − μ(θ)
        pos = jax.tree.map(lambda x, v: position_update(x, v, eps), state.position, velocity)
        kinetic = tree_vdot(*settled((mom, velocity)))
        return KineticState(pos, mom, state.step + 1), KineticInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def kinetic(posterior: Posterior, meta_params: PyTree, config: KineticConfig = KineticConfig(),
            mu_fn: MuFn | None = None) -> SamplingAlgorithm:
    """A ready Kinetic-L2E sampler.

    Args:
      posterior: the model (`l2e.Posterior`).
      meta_params: φ of the μ-MLP (3 → … → 1, flax params).
      config: KineticConfig (lr = ε²·N, friction C, temperature T, mu_scale).
      mu_fn: a custom μ; None: the μ-MLP.
    Returns:
      SamplingAlgorithm: init(position) -> KineticState, step(key, state, minibatch) -> (KineticState,
      KineticInfo).
    Raises:
      ValueError: `meta_params` is not a 3 → … → 1 meta-model (with `mu_fn=None`).
    """
    if mu_fn is None:
        check_mlp_shapes(meta_params, NUM_THETA_FEATURES, 1)
    kernel = build_kernel(posterior, config, mu_fn)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (32, 32), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ of the μ-MLP, NUM_THETA_FEATURES → hidden → 1 (haiku-default init).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      start: "sghmc" — the output layer at 0, so μ ≡ 0 and the step is exactly SGHMC; "random" — every layer random.
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (3, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 1), (1,)}}.
    """
    if start not in ("sghmc", "random"):
        raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")
    return init_mu_params(key, hidden, zero_output=start == "sghmc")


LEARNED = LearnedSampler(
    name="kinetic", title="Kinetic-L2E", config=KineticConfig, config_group="kinetic", init=init,
    build_kernel=build_kernel, factory=kinetic, features=THETA_FEATURE_NAMES, outputs=1,
    init_meta_params=init_meta_params, shipped=(Shipped("kinetic", "l2e_kinetic"),),
)
"""Kinetic-L2E in the learned-sampler registry (l2e.learned)."""
