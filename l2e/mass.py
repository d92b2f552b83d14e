"""Mass-L2E: SGHMC with a learned diagonal mass matrix, set from burn-in gradient statistics and frozen before the
sampling window (docs/sampling.md § Mass-L2E; issue 13, "a preconditioner learned from burn-in
statistics").

During the sampling window (steps t ≥ freeze_step) the kinetic energy is

    K(r) = ½ Σ_i r_i² / M_i,   M_i = exp(m_φ(s_i)) constant,

so β = ∇_rK = r / M, α = ∇_θK = 0: one scalar K, a symmetric Jacobian ∂(α, β)/∂(θ, r) = diag(0, 1/M), and the
SGHMC recipe (Ma et al., 2015) with this K and a constant per-coordinate friction C_i = C · exp(c_φ(s_i)),

    r' = r − ε·∇Ũ(θ) − ε·C_i·r/M_i + N(0, 2·C_i·ε·T),     θ' = θ + ε·r'/M_i,

has exp(−U(θ)/T − K(r)/T) as its stationary density for every φ (ε = sqrt(lr/N)): the θ-marginal is the tempered
posterior whatever the meta-parameters are. The learned part m_φ, c_φ is one per-coordinate MLP
(NUM_MASS_FEATURES → hidden → 2, bounded outputs ±LOG_BOUND) evaluated once, at step freeze_step, on statistics of
the burn-in (s_i below); the minibatch gradient enters only those frozen constants, never K during the window.

Before freeze_step the step is SGHMC with M = 1, C_i = C and accumulates exponential averages (decay STATS_DECAY)
of the per-datum gradient g = ∇Ũ/N and of g². At freeze_step the constants are set and the momentum rescaled,
r ← r·sqrt(M) (a burn-in move: r ~ N(0, T) becomes r ~ N(0, M·T), the window's stationary law). Features of
coordinate i in tensor t (all logs, the per-tensor means over that tensor's coordinates):

    0: log rms_i − mean_t(log rms)      (gradient scale within the tensor; rms = sqrt(avg g²))
    1: mean_t(log rms) − mean(log rms)  (the tensor's gradient scale against the whole network's)
    2: log(|avg g|_i / rms_i)           (signal-to-noise of the gradient; 0 = pure drift)
    3: log rms_t(θ)                     (the tensor's weight scale at the freeze)

An output layer of zeros gives M ≡ 1, C_i ≡ C: exactly `l2e.sghmc` (tests/test_mass.py). Cost per step after
the freeze: SGHMC's plus two multiplies per coordinate.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from l2e.chains import freeze_at
from l2e.checks import check_positive, check_step_count
from l2e.diffusions import physical_step_size, sghmc_noise_std
from l2e.meta_model import MetaMLP, check_mlp_shapes, hidden_sizes, mlp_layers_names
from l2e.types import (
    LearnedSampler, Posterior, Protocol, PyTree, SamplingAlgorithm, Shipped, all_finite, normal_like, settled, tree_vdot,
    window_temperature,
)

__all__ = ["LOG_BOUND", "MASS_FEATURE_NAMES", "NUM_MASS_FEATURES", "MassConfig", "MassInfo", "MassState",
           "build_kernel", "constants", "energy", "init", "init_mass_params", "mass", "mass_features", "rms_preconditioner_params"]

MASS_FEATURE_NAMES = ("log_rms_in_tensor", "log_rms_tensor", "log_snr", "log_theta_rms_tensor")
NUM_MASS_FEATURES = len(MASS_FEATURE_NAMES)
LOG_BOUND = 3.0
"""|log M_i| and |log C_i/C| are at most this (LOG_BOUND·tanh(output / LOG_BOUND)): M within e^±3 ≈ [0.05, 20]."""
STATS_DECAY = 0.99
_TINY = 1e-12


@dataclasses.dataclass(frozen=True)
class MassConfig:
    """Hyperparameters of the Mass-L2E step.

    learning_rate: lr = ε²·N (mean-loss units); friction: C (the burn-in friction and the scale of C_i);
    temperature: T; freeze_step: the update at which M, C_i are set and frozen (the first update of the sampling
    window: samples taken at or after it target exp(−U/T) exactly in continuous time).
    """

    learning_rate: float = 0.5
    friction: float = 0.1
    temperature: float = 1.0
    freeze_step: int = 1000

    def __post_init__(self):
        check_positive(learning_rate=self.learning_rate, friction=self.friction, temperature=self.temperature)
        check_step_count("freeze_step", self.freeze_step, 1)


class MassState(NamedTuple):
    """State of Mass-L2E (pytrees shaped like θ unless a scalar is said).

    position, momentum: θ, r (θ moves by ε·r/M); step: int32 scalar, updates done; mass, friction: M and C_i/C per
    coordinate (dimensionless, 1 before the freeze); avg_grad, avg_sq: burn-in averages of the per-datum gradient
    g = ∇Ũ/N and of g² (frozen with the constants).
    """

    position: PyTree
    momentum: PyTree
    step: jax.Array
    mass: PyTree
    friction: PyTree
    avg_grad: PyTree
    avg_sq: PyTree


class MassInfo(NamedTuple):
    """Per-step diagnostics of Mass-L2E (scalars).

    loss: f32, mean minibatch NLL at the pre-update θ (nats per example); is_finite: bool, loss and kinetic finite;
    kinetic: f32, Σ r'·∇_rK(r') = Σ r'²/M at the new momentum (nats; ≈ d·T at equilibrium, so its mean ÷ d is
    T_kin; M = 1 before the freeze); t_kin: f32, the same ÷ d with the friction's splitting bias divided out (T at
    equilibrium: l2e.types.window_temperature); sampling: bool, the update is in the sampling window (from
    freeze_step on): `l2e.check_temperature(infos)` reads these two.
    """

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    t_kin: jax.Array
    sampling: jax.Array


def init(position: PyTree) -> MassState:
    """The Mass-L2E state at `position`: r₀ = 0, M = 1, C_i/C = 1, zero averages.

    Args:
      position: θ, a pytree of float arrays.
    Returns:
      MassState (step 0).
    """
    zeros = jax.tree.map(jnp.zeros_like, position)
    ones = jax.tree.map(jnp.ones_like, position)
    return MassState(position, zeros, jnp.zeros((), jnp.int32), ones, ones, zeros, zeros)


def init_mass_params(key: jax.Array, hidden: Sequence[int] = (16,), zero_output: bool = True) -> PyTree:
    """Meta-parameters φ: NUM_MASS_FEATURES → hidden → 2 (haiku-default init).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      zero_output: the output layer is 0, so M ≡ 1 and C_i ≡ C (SGHMC).
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (4, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 2), (2,)}}.
    """
    params = MetaMLP(tuple(hidden), outputs=2).init(key, jnp.zeros((1, NUM_MASS_FEATURES)))["params"]
    if zero_output:
        last = mlp_layers_names(params)[-1]
        params = {**params, last: jax.tree.map(jnp.zeros_like, params[last])}
    return params


def rms_preconditioner_params(a: float = 1.0, b: float = 2.0) -> PyTree:
    """Hand-set meta-parameters: log M = a·(f0 + f1), log C_i/C = b·(f0 + f1) (the coordinate's log gradient RMS
    relative to the network's), through a 2-unit ReLU layer (relu(x) − relu(−x) = x); the ablation's hand-designed
    preconditioner and the tests' meta-parameters far from SGHMC.

    Args:
      a: the log-mass slope.
      b: the log-friction slope.
    Returns:
      φ, {"Dense_0": {"kernel": (4, 2), "bias": (2,)}, "Dense_1": {"kernel": (2, 2), "bias": (2,)}} (before the
      LOG_BOUND squashing).
    """
    k0 = np.zeros((NUM_MASS_FEATURES, 2), np.float32)
    k0[0] = [1, -1]
    k0[1] = [1, -1]
    k1 = np.asarray([[a, b], [-a, -b]], np.float32)
    return {"Dense_0": {"kernel": jnp.asarray(k0), "bias": jnp.zeros(2)},
            "Dense_1": {"kernel": jnp.asarray(k1), "bias": jnp.zeros(2)}}


def mass_features(position: PyTree, avg_grad: PyTree, avg_sq: PyTree) -> jax.Array:
    """The burn-in features of every coordinate (module docstring), leaves in jax.tree order.

    Args:
      position: θ (pytree).
      avg_grad: the burn-in average of g = ∇Ũ/N (pytree like θ).
      avg_sq: the burn-in average of g² (pytree like θ).
    Returns:
      (d, NUM_MASS_FEATURES) float32 (logs, dimensionless).
    """
    pos, mean_g, mean_sq = (jax.tree.leaves(t) for t in (position, avg_grad, avg_sq))
    log_rms = [0.5 * jnp.log(s.reshape(-1) + _TINY) for s in mean_sq]
    tensor_mean = [jnp.mean(lr) for lr in log_rms]
    global_mean = jnp.sum(jnp.stack([jnp.sum(lr) for lr in log_rms])) / sum(lr.size for lr in log_rms)
    cols = []
    for x, g, lr, tm in zip(pos, mean_g, log_rms, tensor_mean):
        snr = jnp.log(jnp.abs(g.reshape(-1)) + _TINY) - lr
        theta_rms = 0.5 * jnp.log(jnp.mean(jnp.square(x)) + _TINY)
        n = lr.size
        cols.append(jnp.stack([lr - tm, jnp.full((n,), tm - global_mean), jnp.maximum(snr, -10.0),
                               jnp.full((n,), theta_rms)], axis=1))
    return jnp.concatenate(cols).astype(jnp.float32)


def constants(meta_params: PyTree, position: PyTree, avg_grad: PyTree, avg_sq: PyTree) -> tuple[PyTree, PyTree]:
    """(M, C_i/C) per coordinate from the meta-model on `mass_features`, each within e^±LOG_BOUND.

    Args:
      meta_params: φ (NUM_MASS_FEATURES → … → 2).
      position: θ (pytree).
      avg_grad: the burn-in average of g = ∇Ũ/N (pytree like θ).
      avg_sq: the burn-in average of g² (pytree like θ).
    Returns:
      (M, C_i/C), two pytrees shaped like `position` (dimensionless).
    """
    out = MetaMLP(hidden_sizes(meta_params), outputs=2).apply({"params": meta_params},
                                                              mass_features(position, avg_grad, avg_sq))
    out = LOG_BOUND * jnp.tanh(out / LOG_BOUND)
    leaves, treedef = jax.tree.flatten(position)
    bounds = [0]
    for x in leaves:
        bounds.append(bounds[-1] + x.size)

    def split(col):
        return jax.tree.unflatten(treedef, [jnp.exp(out[lo:hi, col]).reshape(x.shape).astype(x.dtype)
                                            for lo, hi, x in zip(bounds[:-1], bounds[1:], leaves)])

    return split(0), split(1)


def energy(mass_tree: PyTree, momentum: PyTree) -> jax.Array:
    """K(r) = ½ Σ r²/M, the window's kinetic energy.

    Args:
      mass_tree: M (pytree like r).
      momentum: r (pytree).
    Returns:
      K, a scalar (nats).
    """
    return 0.5 * sum(jnp.sum(jnp.square(r) / m) for r, m in zip(jax.tree.leaves(momentum), jax.tree.leaves(mass_tree)))


def _freeze(state: MassState, meta_params: PyTree) -> MassState:
    """The state at the freeze: M, C_i set from the burn-in statistics, r rescaled by sqrt(M)."""
    m, c = constants(meta_params, state.position, state.avg_grad, state.avg_sq)
    mom = jax.tree.map(lambda r, mi: r * jnp.sqrt(mi), state.momentum, m)
    return state._replace(momentum=mom, mass=m, friction=c)


def _update_stats(state: MassState, grad_u: PyTree, data_size: int) -> tuple[PyTree, PyTree]:
    """Burn-in averages of g = ∇Ũ/N and g² (frozen from freeze_step on)."""
    return (jax.tree.map(lambda a, g: STATS_DECAY * a + (1 - STATS_DECAY) * (g / data_size), state.avg_grad, grad_u),
            jax.tree.map(lambda a, g: STATS_DECAY * a + (1 - STATS_DECAY) * jnp.square(g / data_size),
                         state.avg_sq, grad_u))


def build_kernel(posterior: Posterior, config: MassConfig = MassConfig()):
    """The Mass-L2E kernel (module doc); the key draws the momentum noise.

    meta_params and the hyperparameters are call arguments (traced for ES and tuning grids); freeze_step is
    static (config).

    Args:
      posterior: the model (`l2e.Posterior`).
      config: MassConfig (freeze_step static; lr, friction, temperature the call defaults).
    Returns:
      kernel(key, state, minibatch, meta_params, learning_rate=config.learning_rate, friction=config.friction,
      temperature=config.temperature) -> (MassState, MassInfo): meta_params φ (4 → … → 2); learning_rate = ε²·N
      (mean-loss units), friction C, temperature T scalars.
    """
    freeze = int(config.freeze_step)

    def kernel(key: jax.Array, state: MassState, minibatch, meta_params: PyTree,
               learning_rate=config.learning_rate, friction=config.friction, temperature=config.temperature):
        with jax.ensure_compile_time_eval():
            eps = physical_step_size(learning_rate, posterior.data_size)
            noise_std = sghmc_noise_std(eps, friction, temperature)
        state = jax.lax.cond(state.step == freeze, lambda s: _freeze(s, meta_params), lambda s: s, state)
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        noise = normal_like(key, state.position)

        def kick(r, gu, m, c, z):  # r − ε∇Ũ − ε·C_i·r/M + sqrt(C_i)·σ·z
            return r - eps * gu - eps * (friction * c) * (r / m) + noise_std * jnp.sqrt(c) * z

        mom = jax.tree.map(kick, state.momentum, grad_u, state.mass, state.friction, noise)
        velocity = jax.tree.map(jnp.divide, mom, state.mass)  # ∇_rK(r') = r'/M
        pos = jax.tree.map(lambda x, v: x + eps * v, state.position, velocity)
        burn_in = state.step < freeze
        new_g, new_sq = _update_stats(state, grad_u, posterior.data_size)
        avg_g = jax.tree.map(lambda n, o: jnp.where(burn_in, n, o), new_g, state.avg_grad)
        avg_sq = jax.tree.map(lambda n, o: jnp.where(burn_in, n, o), new_sq, state.avg_sq)
        kinetic = tree_vdot(*settled((mom, velocity)))
        new = MassState(pos, mom, state.step + 1, state.mass, state.friction, avg_g, avg_sq)
        inv_mass = jax.tree.map(lambda m: 1.0 / m, state.mass)
        gamma = jax.tree.map(lambda c, m: friction * c / m, state.friction, state.mass)  # the damping's ε·γᵢ
        return new, MassInfo(loss, all_finite(loss, kinetic), kinetic,
                             *window_temperature(mom, inv_mass, gamma, eps, state.step, freeze))

    return kernel


def mass(posterior: Posterior, meta_params: PyTree, config: MassConfig = MassConfig()) -> SamplingAlgorithm:
    """A ready Mass-L2E sampler.

    Args:
      posterior: the model (`l2e.Posterior`).
      meta_params: φ (NUM_MASS_FEATURES → … → 2, flax params).
      config: MassConfig (lr = ε²·N, friction C, temperature T, freeze_step: pass the first update you keep).
    Returns:
      SamplingAlgorithm: init(position) -> MassState, step(key, state, minibatch) -> (MassState, MassInfo).
    Raises:
      ValueError: `meta_params` is not a 4 → … → 2 meta-model.
    """
    check_mlp_shapes(meta_params, NUM_MASS_FEATURES, 2)
    kernel = build_kernel(posterior, config)

    def step(key, state, minibatch):
        return kernel(key, state, minibatch, meta_params)

    return SamplingAlgorithm(init, step)


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (16,), start: str = "sghmc") -> PyTree:
    """Meta-parameters φ, NUM_MASS_FEATURES → hidden → 2 (haiku-default init).

    Args:
      key: PRNG key.
      hidden: hidden layer widths.
      start: "sghmc" — the output layer at 0, so M ≡ 1 and C_i ≡ C: exactly SGHMC; "random" — every layer random.
    Returns:
      φ, a flax params dict {"Dense_0": {"kernel": (4, h1), "bias": (h1,)}, …, "Dense_n": {… (h_n, 2), (2,)}}.
    """
    if start not in ("sghmc", "random"):
        raise ValueError(f"start must be 'sghmc' or 'random', got {start!r}")
    return init_mass_params(key, hidden, zero_output=start == "sghmc")


LEARNED = LearnedSampler(
    name="mass", title="Mass-L2E", config=MassConfig, config_group="mass", init=init, build_kernel=build_kernel,
    factory=mass, features=MASS_FEATURE_NAMES, outputs=2, init_meta_params=init_meta_params, protocol=Protocol(window=freeze_at),
    shipped=(Shipped("mass", "l2e_mass"),),
)
"""Mass-L2E in the learned-sampler registry (l2e.learned): the default meta-training preset's sampler."""
