"""Policy-L2E's state and per-update info (l2e.policy, which re-exports them): every chain's θ, momentum and
gathering-window statistics with the phase's shared constants, and `init`, the state before the first update."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.policy_dense import Dense, init_dense
from l2e.types import PyTree

__all__ = ["PolicyInfo", "PolicyState", "init"]


class PolicyState(NamedTuple):
    """position, momentum, sq, mean_x, m2_x, mean_g, m2_g: per chain (leading axis M) — θ, r, phase 0's RMSprop
    average of ḡ², Welford statistics of θ and ∇Ũ over the phase's gathering window; inv_mass, friction,
    noise_var: shared M⁻¹, γᵢ and the V̂ the SGHMC phases correct for (no chain axis); eps: ε (0 in phase 0);
    noise_acc: the gathering window's running mean V̂ (pooled over chains); count: states gathered (f32);
    loss_mean, loss_m2: per chain, Welford moments of the minibatch loss; loss_early: per chain, the mean loss over
    the window's first half; kin: the window's running mean T_kin; step: updates done (int32); anchor, anchor_grad:
    the control variates' shared anchor θ̂ and mean NLL gradient over the data there (no chain axis; zeros and unread
    without control_variate); dense: mass_rule "dense"'s co-moments and frame (l2e.policy_dense.Dense);
    noise_gain: per chain, track_noise's running gain of its minibatch noise over noise_var (1 where not tracked)."""

    position: PyTree
    momentum: PyTree
    step: jax.Array
    inv_mass: PyTree
    eps: jax.Array
    friction: PyTree
    noise_var: PyTree
    sq: PyTree
    count: jax.Array
    mean_x: PyTree
    m2_x: PyTree
    mean_g: PyTree
    m2_g: PyTree
    noise_acc: PyTree
    loss_mean: jax.Array
    loss_m2: jax.Array
    loss_early: jax.Array
    kin: jax.Array
    anchor: PyTree
    anchor_grad: PyTree
    dense: Dense
    noise_gain: jax.Array


class PolicyInfo(NamedTuple):
    """Per chain (shape (M,)): loss, the mean minibatch NLL at the pre-update θ; is_finite; kinetic, Σ r'·M⁻¹r' after
    an SGHMC update (0 in phase 0); t_kin, l2e.types.window_temperature's; sampling: the update is in the window."""

    loss: jax.Array
    is_finite: jax.Array
    kinetic: jax.Array
    t_kin: jax.Array
    sampling: jax.Array


def _shared(tree: PyTree, fill: float) -> PyTree:
    return jax.tree.map(lambda x: jnp.full(x.shape[1:], fill, jnp.float32), tree)


def init(positions: PyTree) -> PolicyState:
    """The state before the first update of M chains at θ₀ = `positions` (leaves (M, …)): zero momenta and
    statistics, M⁻¹ = 1."""
    zeros = jax.tree.map(jnp.zeros_like, positions)
    chains = jax.tree.leaves(positions)[0].shape[0]
    z, zm = jnp.zeros((), jnp.float32), jnp.zeros((chains,), jnp.float32)
    return PolicyState(positions, zeros, jnp.zeros((), jnp.int32), _shared(positions, 1.0), z,
                       _shared(positions, 0.0), _shared(positions, 0.0), zeros, z, zeros, zeros, zeros, zeros,
                       _shared(positions, 0.0), zm, zm, zm, z, _shared(positions, 0.0), _shared(positions, 0.0),
                       init_dense(positions), jnp.ones((chains,), jnp.float32))
