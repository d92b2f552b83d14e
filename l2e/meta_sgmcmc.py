"""Meta-SGMCMC (NNSGHMC; Gong, Li & Hernández-Lobato, ICLR 2019; docs/samplers.md § Meta-SGMCMC and Precond-L2E,
docs/sampling.md § Meta-SGMCMC and Precond-L2E).

The complete recipe (Ma et al., 2015) on z = (θ, p), H = U(θ) + ½‖p‖², with per-coordinate learned curl Q_i (either
sign) and diffusion D_i ≥ 0, and the correction Γ computed exactly, so exp(−H/T) is stationary whatever the heads
output (up to discretisation and minibatch-noise bias, as for SGHMC):

    dθ_i = Q_i p_i dt + T·Γθ_i dt,                     Γθ_i = −∂Q_i/∂p_i
    dp_i = −Q_i ∂_iU dt − D_i p_i dt + T·Γp_i dt + sqrt(2 D_i T) dW_i,   Γp_i = ∂Q_i/∂θ_i + ∂D_i/∂p_i

Heads (one per-coordinate MLP each, l2e.meta_model.MetaMLP, shared by all coordinates), with u = −Ũ(θ)/N the
minibatch log joint ÷ N (one scalar per chain, broadcast) and ĝ_i = ∂_iŨ/N:

    Q_i = clip(MLP_Q(u_scale·u, p_scale·p_i), −q_clip, q_clip)                         inputs 2 → hidden → 1
    D_i = clip(C·Q_i² + d_scale·|MLP_D(u_scale·u, p_scale·p_i, g_scale·ĝ_i)|, 0, d_max)  inputs 3 → hidden → 1

C is `friction` (the code's α = 0.01/ε). Only D sees the gradient (Q would need Hessians). Γ from the heads' input
derivatives (no Hessian): ∂Q_i/∂θ_i = ∂Q/∂u · ∂u/∂θ_i with ∂u/∂θ_i = −ĝ_i (the gradient already computed);
∂Q/∂p, ∂D/∂p by forward-mode derivatives of the heads in their scalar inputs (`jax.linearize` / `jax.jvp`; D's chain
rule through C·Q² included). Inputs use fixed scales, not the L2E per-tensor normalisation: normalising p over a
tensor makes Q_i depend on every p_j, and Γ would need the diagonal of a full Jacobian.

Step, ε = sqrt(lr/N), ξ ~ N(0, I):

    p⁺ = p − ε·Q(u, p)·∇Ũ − ε·D·p + ε·T·Γp + sqrt(2εDT)·ξ,   Q′ = Q(u, p⁺),   θ⁺ = θ + ε·Q′·p⁺ + ε·T·Γθ(p⁺)

Γθ is taken from Q′ (the public code's training step mixes Q(u, p) and Q′; its Γp has the curl sign flipped —
neither is copied). `gamma`: "exact" (default); "finite_difference" — central differences of the heads in their
scalar inputs (step `fd_step`), an approximation; "none" — Γ dropped (a wrong sampler, the tests' control). The
public code's test-time variant, secants against the previous step's head values with +1e-7 in the denominators, is
not offered: Q has two inputs that both change between steps, so a one-input secant divides Q's total change by one
input's change. Meta-training stop-gradients (docs/samplers.md § Meta-SGMCMC and Precond-L2E): the heads' inputs
(u, p, ĝ) and the ∇Ũ multiplicand are `stop_gradient`, so pathwise gradients reach φ through Q, D, Γ and the noise
scale along the linear θ/p paths.

Meta-parameters (`init_meta_params`): {"q": flax Dense tree 2 → hidden → 1, "d": 3 → hidden → 1}; hidden (10,) as
the MNIST code (92 parameters). start="sghmc" sets both output kernels to 0, Q's output bias to 1 and D's to 0:
Q ≡ 1, D ≡ C, Γ = 0 — SGHMC with friction C, exactly in exact arithmetic.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from l2e.checks import check_finite, check_in_range, check_positive
from l2e.diffusions import physical_step_size
from l2e.meta_model import MetaMLP, hidden_sizes, mlp_layers_names
from l2e.types import LearnedSampler, Posterior, PyTree, SamplingAlgorithm, Shipped, all_finite, settled

__all__ = ["GAMMA_MODES", "MetaSGMCMCConfig", "MetaSGMCMCInfo", "MetaSGMCMCState", "build_kernel",
           "gamma_terms", "init", "init_meta_params", "meta_sgmcmc"]

GAMMA_MODES = ("exact", "finite_difference", "none")


@dataclasses.dataclass(frozen=True)
class MetaSGMCMCConfig:
    """learning_rate: lr = ε²N; friction: C (D = C·Q² + …); temperature: T; q_clip, d_max: output clamps (code 5,
    1000); d_scale: s_D; u_scale, p_scale, g_scale: head input multipliers; gamma: "exact" | "finite_difference" |
    "none" (module doc); fd_step: the central-difference step of gamma="finite_difference"."""

    learning_rate: float = 0.5
    friction: float = 0.1
    temperature: float = 1.0
    q_clip: float = 5.0
    d_max: float = 1000.0
    d_scale: float = 1.0
    u_scale: float = 1.0
    p_scale: float = 1.0
    g_scale: float = 1.0
    gamma: str = "exact"
    fd_step: float = 1e-3

    def __post_init__(self):
        check_positive(learning_rate=self.learning_rate, friction=self.friction, temperature=self.temperature,
                       q_clip=self.q_clip, d_max=self.d_max, fd_step=self.fd_step)
        check_finite(u_scale=self.u_scale, p_scale=self.p_scale, g_scale=self.g_scale)
        check_in_range("d_scale", self.d_scale, 0.0, math.inf, include_high=False)  # D ≥ C·Q²: s_D·|MLP| ≥ 0
        if self.gamma not in GAMMA_MODES:
            raise ValueError(f"gamma must be one of {GAMMA_MODES}, got {self.gamma!r}")


class MetaSGMCMCState(NamedTuple):
    """position: θ (pytree); momentum: p (pytree like θ; θ moves by ε·Q·p); step: int32 scalar, updates done."""

    position: PyTree
    momentum: PyTree
    step: jax.Array


class MetaSGMCMCInfo(NamedTuple):
    """Per-step diagnostics of Meta-SGMCMC (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ p⁺·∇_pK = Σ p⁺² at the new momentum (K = ½‖p‖², nats; ≈ d·T at equilibrium, so its mean ÷ d is
    T_kin).
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (10,), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ = {"q": 2 → hidden → 1, "d": 3 → hidden → 1} (haiku-default init, as l2e.meta_model.MetaMLP).

    Args:
      key: PRNG key.
      hidden: hidden layer widths of both heads.
      start: "sghmc" — output kernels 0, Q's output bias 1 and D's 0, so Q ≡ 1, D ≡ C: exactly SGHMC with friction
        C; "random" — every layer random.
    Returns:
      φ, {"q": flax params of the Q head, "d": flax params of the D head}.
    """
    if start not in ("sghmc", "random"):
        raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")
    kq, kd = jax.random.split(key)
    q = MetaMLP(tuple(hidden), outputs=1).init(kq, jnp.zeros((1, 2)))["params"]
    d = MetaMLP(tuple(hidden), outputs=1).init(kd, jnp.zeros((1, 3)))["params"]
    if start == "sghmc":
        lq, ld = mlp_layers_names(q)[-1], mlp_layers_names(d)[-1]
        q = {**q, lq: {"kernel": jnp.zeros_like(q[lq]["kernel"]), "bias": jnp.ones_like(q[lq]["bias"])}}
        d = {**d, ld: jax.tree.map(jnp.zeros_like, d[ld])}
    return {"q": q, "d": d}


def init(position: PyTree) -> MetaSGMCMCState:
    """The Meta-SGMCMC state at `position`: p₀ = 0 (as SGHMC).

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      MetaSGMCMCState (step 0).
    """
    return MetaSGMCMCState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def _head(params: PyTree, cols: list[jax.Array]) -> jax.Array:
    """A per-coordinate head on stacked scalar inputs (each (d,)): (d,)."""
    return MetaMLP(hidden_sizes(params), outputs=1).apply({"params": params}, jnp.stack(cols, axis=1))[:, 0]


def _q_fn(phi: PyTree, cfg: MetaSGMCMCConfig):
    return lambda u, p: jnp.clip(_head(phi["q"], [cfg.u_scale * u, cfg.p_scale * p]), -cfg.q_clip, cfg.q_clip)


def _d_fn(phi: PyTree, cfg: MetaSGMCMCConfig, friction, u, g):
    q_fn = _q_fn(phi, cfg)

    def d_fn(p):
        m = _head(phi["d"], [cfg.u_scale * u, cfg.p_scale * p, cfg.g_scale * g])
        return jnp.clip(friction * jnp.square(q_fn(u, p)) + cfg.d_scale * jnp.abs(m), 0.0, cfg.d_max)

    return d_fn


class _Heads(NamedTuple):
    q: jax.Array      # Q(u, p)
    dq_du: jax.Array  # ∂Q/∂u at (u, p)
    d: jax.Array      # D(u, p, ĝ)
    dd_dp: jax.Array  # ∂D/∂p at (u, p, ĝ)


def heads(phi: PyTree, cfg: MetaSGMCMCConfig, friction, u: jax.Array, p: jax.Array, g: jax.Array) -> _Heads:
    """Q, ∂Q/∂u, D, ∂D/∂p: one forward-mode pass per head input needed (central differences of step cfg.fd_step
    when cfg.gamma == "finite_difference").

    Args:
      phi: the meta-parameters {"q": …, "d": …}.
      cfg: MetaSGMCMCConfig (clamps, input scales, gamma mode).
      friction: C.
      u: −Ũ/N broadcast to (d,).
      p: the momentum, (d,).
      g: ĝ = ∇Ũ/N, (d,).
    Returns:
      _Heads(q, dq_du, d, dd_dp), each (d,).
    """
    q_fn, d_fn = _q_fn(phi, cfg), _d_fn(phi, cfg, friction, u, g)
    if cfg.gamma == "finite_difference":
        h = cfg.fd_step
        dq_du = (q_fn(u + h, p) - q_fn(u - h, p)) / (2 * h)
        return _Heads(q_fn(u, p), dq_du, d_fn(p), (d_fn(p + h) - d_fn(p - h)) / (2 * h))
    ones, zeros = jnp.ones_like(p), jnp.zeros_like(p)
    q, dq_du = jax.jvp(q_fn, (u, p), (ones, zeros))
    d, dd_dp = jax.jvp(d_fn, (p,), (ones,))
    return _Heads(q, dq_du, d, dd_dp)


def q_and_dq_dp(phi: PyTree, cfg: MetaSGMCMCConfig, u: jax.Array, p: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(Q, ∂Q/∂p) at (u, p) (central differences when cfg.gamma == "finite_difference").

    Args:
      phi: the meta-parameters {"q": …, "d": …}.
      cfg: MetaSGMCMCConfig.
      u: −Ũ/N broadcast to (d,).
      p: the momentum, (d,).
    Returns:
      (Q, ∂Q/∂p), each (d,).
    """
    if cfg.gamma == "finite_difference":
        q_fn, h = _q_fn(phi, cfg), cfg.fd_step
        return q_fn(u, p), (q_fn(u, p + h) - q_fn(u, p - h)) / (2 * h)
    return jax.jvp(_q_fn(phi, cfg), (u, p), (jnp.zeros_like(p), jnp.ones_like(p)))


def gamma_terms(phi: PyTree, cfg: MetaSGMCMCConfig, friction, u, p, g) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Q, D, Γp) at (u, p, ĝ), exact: Γp = ∂Q/∂u·(−ĝ) + ∂D/∂p (without the factor T).

    Args:
      phi: the meta-parameters {"q": …, "d": …}.
      cfg: MetaSGMCMCConfig.
      friction: C.
      u: −Ũ/N broadcast to (d,).
      p: the momentum, (d,).
      g: ĝ = ∇Ũ/N, (d,).
    Returns:
      (Q, D, Γp), each (d,).
    """
    h = heads(phi, cfg, friction, u, p, g)
    return h.q, h.d, h.dq_du * (-g) + h.dd_dp


def build_kernel(posterior: Posterior, config: MetaSGMCMCConfig = MetaSGMCMCConfig()):
    """The Meta-SGMCMC kernel (module doc); the key draws the momentum noise ξ.

    Args:
      posterior: the model (`l2e.Posterior`).
      config: MetaSGMCMCConfig (clamps, scales, gamma mode static; lr, friction, temperature the call defaults).
    Returns:
      kernel(key, state, minibatch, meta_params, learning_rate=config.learning_rate, friction=config.friction,
      temperature=config.temperature) -> (MetaSGMCMCState, MetaSGMCMCInfo): meta_params φ = {"q", "d"} and the
      hyperparameters (learning_rate = ε²·N in mean-loss units, friction C, temperature T) are call arguments
      (traced for ES, backprop and tuning grids).
    """
    cfg, n = config, posterior.data_size

    def kernel(key, state: MetaSGMCMCState, minibatch, meta_params: PyTree, learning_rate=config.learning_rate,
               friction=config.friction, temperature=config.temperature):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, n)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        u_scalar = -(loss - posterior.log_prior(state.position) / n)  # −Ũ/N
        x, unravel = ravel_pytree(state.position)
        p = ravel_pytree(state.momentum)[0]
        gu = jax.lax.stop_gradient(ravel_pytree(grad_u)[0])
        g, p_in = gu / n, jax.lax.stop_gradient(p)
        u = jnp.broadcast_to(jax.lax.stop_gradient(u_scalar), p.shape)
        h = heads(meta_params, cfg, friction, u, p_in, g)
        gamma_p = jnp.zeros_like(p) if cfg.gamma == "none" else h.dq_du * (-g) + h.dd_dp
        z = jax.random.normal(key, p.shape, p.dtype)
        noise_std = jnp.sqrt(2.0 * eps * temperature * h.d)
        p_new = p - eps * h.q * gu - eps * h.d * p + eps * temperature * gamma_p + noise_std * z
        p_new_in = jax.lax.stop_gradient(p_new)
        q_new, dq_dp_new = q_and_dq_dp(meta_params, cfg, u, p_new_in)
        gamma_theta = jnp.zeros_like(p) if cfg.gamma == "none" else -dq_dp_new
        x_new = x + eps * q_new * p_new + eps * temperature * gamma_theta
        kinetic = jnp.sum(jnp.square(settled(p_new)))
        new = MetaSGMCMCState(unravel(x_new), unravel(p_new), state.step + 1)
        return new, MetaSGMCMCInfo(loss, all_finite(loss, kinetic), kinetic)

    return kernel


def meta_sgmcmc(posterior: Posterior, meta_params: PyTree, config: MetaSGMCMCConfig = MetaSGMCMCConfig()
                ) -> SamplingAlgorithm:
    """A ready Meta-SGMCMC sampler.

    Args:
      posterior: the model (`l2e.Posterior`).
      meta_params: φ = {"q": 2 → … → 1, "d": 3 → … → 1} (flax params).
      config: MetaSGMCMCConfig (lr = ε²·N, friction C, temperature T, clamps, scales, gamma mode).
    Returns:
      SamplingAlgorithm: init(position) -> MetaSGMCMCState, step(key, state, minibatch) -> (MetaSGMCMCState,
      MetaSGMCMCInfo).
    """
    kernel = build_kernel(posterior, config)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


HEAD_FEATURES = {"q": ("u", "p"), "d": ("u", "p", "g")}
"""The inputs of each head (module docstring): u = −Ũ/N, p the momentum, g = ∂Ũ/N."""

LEARNED = LearnedSampler(
    name="meta_sgmcmc", title="Meta-SGMCMC", config=MetaSGMCMCConfig, config_group="meta_sgmcmc", init=init,
    build_kernel=build_kernel, factory=meta_sgmcmc, features=HEAD_FEATURES, outputs=1,
    init_meta_params=init_meta_params, shipped=(Shipped("meta-sgmcmc", "meta_sgmcmc"), Shipped("precond-l2e", "precond_l2e")),
)
"""Meta-SGMCMC (and Precond-L2E, its parameterisation trained by ES) in the learned-sampler registry (l2e.learned)."""
