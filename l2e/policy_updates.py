"""Policy-L2E's per-update pieces (l2e.policy): every chain's gradients (two half-batches in the gathering windows,
the control-variate estimate where anchored), its move (phase 0's pSGLD or the phase's SGHMC, in the dense mass's
frame where that applies), its kinetic temperature, and the gathering of the window's statistics. `state` is an
l2e.policy.PolicyState, `config` a PolicyConfig (not imported: that module imports this one)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from l2e.adaptation import corrected_sghmc, flat, halved_difference, halved_gradients, rmsprop_langevin
from l2e.control_variates import Anchor, cv_posterior
from l2e.policy_dense import dense_size, gather_dense, move_dense
from l2e.policy_features import finite_statistics, gather, lagging
from l2e.transient import MAX_DAMPING, NOISE_MARGIN
from l2e.types import Posterior, all_finite, kinetic_temperature, normal_like, settled

__all__ = ["TRACK_DECAY", "branch", "chain_gradients", "chain_noise", "chains_finite", "dense_active", "grow",
           "move", "restart", "splits", "temperatures", "gather_window", "track_gain"]

TRACK_DECAY = 0.9
"""track_noise: the running noise gain's weight on its last value per update (a memory of about 10 updates; with
track_every k, TRACK_DECAY**k per refresh: the same memory in updates)."""


def track_gain(state, config, noise):
    """track_noise: every chain's running noise gain after one more update — the exponential average (TRACK_DECAY)
    of Σᵢ vᵢ·M⁻¹ᵢ ÷ Σᵢ V̂ᵢ·M⁻¹ᵢ, v this update's half-batch noise (δ² per coordinate; with the dense mass, of δ in
    the frame, Aᵀδ) and V̂ the phase's pooled one; unchanged where V̂ is 0 or the ratio is not finite."""
    m = state.inv_mass
    if dense_active(config, state.position):
        v = jnp.square(jax.vmap(lambda d: state.dense.frame.T @ flat(d))(noise))
        total = jnp.sum(v * flat(m)[None, :], axis=1)
    else:  # leaf by leaf, a matrix-vector product: no concatenated copy of every chain's noise, and in a gathering
        # window XLA:CPU reads the gathering's V̂ for it (as a reduction it wrote a second M×θ-sized copy of δ²)
        total = sum(v.reshape(v.shape[0], -1) @ mi.reshape(-1) for v, mi in zip(jax.tree.leaves(noise),
                                                                                jax.tree.leaves(m)))
    ref = sum(jnp.sum(v * mi) for v, mi in zip(jax.tree.leaves(state.noise_var), jax.tree.leaves(m)))
    ratio = total / jnp.where(ref > 0, ref, 1.0)
    decay = TRACK_DECAY ** config.track_every
    new = decay * state.noise_gain + (1.0 - decay) * ratio
    return jnp.where((ref > 0) & jnp.isfinite(ratio), new, state.noise_gain)


def _not(a):
    return (not a) if isinstance(a, bool) else ~a


def _both(a, b):
    """a and b: a Python bool where either decides it statically (a phase kernel), else a traced one."""
    if a is False or b is False:
        return False
    return b if a is True else a if b is True else a & b


def _either(a, b):
    """a or b, as `_both`."""
    if a is True or b is True:
        return True
    return b if a is False else a if b is False else a | b


def splits(config, first, gathering, step, offset):
    """(split, refresh) of one update: whether it takes two half-batch gradients (in the gathering windows, and where
    it refreshes), and whether it refreshes the chains' noise gains (track_noise: after phase 0, on the updates whose
    index is a multiple of track_every). Python bools where a phase kernel knows them (`offset`: the index modulo
    track_every; None: read from the traced `step`), else traced."""
    if not config.track_noise:
        return gathering, False
    every = config.track_every
    due = True if every == 1 else (offset % every == 0 if offset is not None else step % every == 0)
    refresh = _both(_not(first), due)
    return _either(gathering, refresh), refresh


def chains_finite(loss, position, kinetic, first):
    """(M,) bool: each chain's loss and settled position after the update are finite. In phase 0 (`first` True;
    traced: selected per update) read from the position; after it from the loss and `kinetic` (each chain's
    Σ r'·M⁻¹r', `temperatures`), as SGHMC's is_finite reads them: θ' = θ + ε·M⁻¹r' is finite where θ (its loss) and
    r' are, and the check costs no pass over θ'."""
    def by_position():
        return jax.vmap(lambda lo, x: all_finite(lo, sum(jnp.sum(v * v) for v in jax.tree.leaves(settled(x)))))(
            loss, position)

    if first is True:
        return by_position()
    by_kinetic = jnp.isfinite(loss) & jnp.isfinite(kinetic)
    return by_kinetic if first is False else jnp.where(first, by_position(), by_kinetic)


def per_chain(value, like):
    """`value` shaped to broadcast against `like`, a leaf with the chain axis first: a (M,) array reshaped to
    (M, 1, …); a scalar as it is."""
    return value.reshape((-1,) + (1,) * (like.ndim - 1)) if jnp.ndim(value) else value


def chain_noise(state, config, temperature, eps=None):
    """track_noise: per chain (leaves with the chain axis) the V̂ the update corrects for, gain × the phase's V̂, the
    friction raised to cover it, min(max(γᵢ, NOISE_MARGIN·ε·gain·V̂ᵢ·M⁻¹ᵢ/(2T)), MAX_DAMPING/ε) (the rule's bound at
    the adaptation point, l2e.policy, with this chain's noise), and the step: ε, or with track_step each chain's
    s·ε, s = min(1, sqrt(MAX_DAMPING / h)), h = NOISE_MARGIN·ε²·gain·maxᵢ(V̂ᵢ·M⁻¹ᵢ)/(2T) — the rule's heat cap read
    with this chain's noise (the rule sets ε where h = MAX_DAMPING at gain 1: beyond it no friction under the cap
    absorbs the noise), its friction then capped at MAX_DAMPING/(s·ε). eps: that step, where already known."""
    g = state.noise_gain
    if eps is None:
        eps = state.eps
        if config.track_step:
            heat = jnp.max(jnp.stack([jnp.max(v * m) for v, m in zip(jax.tree.leaves(state.noise_var),
                                                                     jax.tree.leaves(state.inv_mass))]))
            h = NOISE_MARGIN * jnp.square(state.eps) * g * heat / (2.0 * temperature)
            eps = state.eps * jnp.sqrt(jnp.minimum(1.0, MAX_DAMPING / jnp.where(h > 0, h, MAX_DAMPING)))
    def chains(value, shared):  # (M,) or a scalar, shaped to broadcast against a leaf without the chain axis
        return value.reshape((-1,) + (1,) * shared.ndim) if jnp.ndim(value) else value

    noise = jax.tree.map(lambda v: chains(g, v) * v, state.noise_var)
    # the chains' factor ε·gain times one shared θ-sized array: an M×θ-sized operand of the step or of T_kin's sum
    # built from broadcasts is materialised by XLA:CPU, this product fuses
    scale = eps * g
    friction = jax.tree.map(lambda f, v, m: jnp.minimum(jnp.maximum(
        f, chains(scale, v) * (NOISE_MARGIN / (2.0 * temperature) * v * m)), MAX_DAMPING / chains(eps, v)),
        state.friction, state.noise_var, state.inv_mass)
    return noise, friction, eps


def move(state, grad_u, key, config, n_data: int, scale, temperature, first, tracked=None):
    """Every chain's update: in phase 0 (`first`) RMSprop-preconditioned Langevin at η₀ (l2e.adaptation.
    rmsprop_langevin), after it the noise-corrected SGHMC of the phase's constants (l2e.adaptation.corrected_sghmc;
    with mass_rule "dense", in the frame: l2e.policy_dense.move_dense); `tracked`: with track_noise, each chain's
    (V̂, friction, ε) (`chain_noise`; ε per chain with track_step), else None (the phase's shared ones)."""
    def psgld(s):
        pos, sq = rmsprop_langevin(s.position, grad_u, s.sq, normal_like(key, s.position), config.base_step * scale,
                                   temperature, n_data, config.rms_decay, config.rms_eps)
        return s._replace(position=pos, sq=sq)

    def sghmc(s):
        z = normal_like(key, s.position)
        noise, friction, eps = (s.noise_var, s.friction, s.eps) if tracked is None else tracked
        if dense_active(config, s.position):
            pos, mom = move_dense(s.position, s.momentum, grad_u, s.dense.frame, s.inv_mass, friction, noise, eps,
                                  temperature, z, chain_axis=tracked is not None)
        elif jnp.ndim(eps):  # track_step: each chain's ε
            pos, mom, _ = jax.vmap(corrected_sghmc, in_axes=(0, 0, 0, None, 0, 0, 0, None, 0))(
                s.position, s.momentum, grad_u, s.inv_mass, friction, noise, eps, temperature, z)
        else:
            pos, mom, _ = corrected_sghmc(s.position, s.momentum, grad_u, s.inv_mass, friction, noise, eps,
                                          temperature, z)
        return s._replace(position=pos, momentum=mom)

    return branch(first, psgld, sghmc, state)


def restart(state, lag, alive, key):
    """The state with every chain that `lag` marks ((M,) bool) moved to the θ (and phase 0's RMSprop average) of a
    chain drawn uniformly, with `key`, from those `alive` marks; unchanged where none is alive."""
    donor = jax.random.categorical(key, jnp.where(alive, 0.0, -jnp.inf), shape=lag.shape)
    move_ = lag & jnp.any(alive)

    def copy(x):
        return jnp.where(per_chain(move_, x), x[donor], x)

    return state._replace(position=jax.tree.map(copy, state.position), sq=jax.tree.map(copy, state.sq))


def grow(state, chains: int):
    """The state of `chains` ≥ M chains before the freeze's adaptation point (burn_chains, l2e.policy.PolicyConfig):
    the M chains as they are and chains − M clones of the live ones (finite gathered statistics and not lagging,
    l2e.policy_features.lagging; every finite chain where none is, every chain where none is finite), round robin over
    them in chain order. Every per-chain field is the donor's, but a clone's gathered loss statistics are NaN: the
    freeze's adaptation point then pools the M chains' statistics only (a clone holds none of its own) and gives every
    chain fresh momenta, from where the window's noise separates the clones from their donors."""
    m = state.loss_mean.shape[0]
    if chains < m:
        raise ValueError(f"cannot grow {m} chains to {chains}")
    finite = finite_statistics(state)
    live = finite & ~lagging(state)
    live = jnp.where(jnp.any(live), live, jnp.where(jnp.any(finite), finite, True))
    order = jnp.argsort(~live, stable=True)  # the live chains first, in chain order
    donors = order[jnp.arange(chains - m) % jnp.sum(live)]
    index = jnp.concatenate([jnp.arange(m), donors])
    clone = jnp.arange(chains) >= m

    def take(x):
        return x[index]

    nan = jnp.where(clone, jnp.nan, 0.0)
    dense = state.dense._replace(cx=take(state.dense.cx), cg=take(state.dense.cg))
    return state._replace(**{f: jax.tree.map(take, getattr(state, f)) for f in (
        "position", "momentum", "sq", "mean_x", "m2_x", "mean_g", "m2_g", "noise_gain", "loss_early")},
        loss_mean=take(state.loss_mean) + nan, loss_m2=take(state.loss_m2) + nan, dense=dense)


def temperatures(state, freeze: int, tracked=None, config=None, temperature=None):
    """Per chain: (T_kin and `sampling` of l2e.types.window_temperature, the kinetic Σ r'·M⁻¹r') after an update,
    l2e.types.kinetic_temperature over the chains (a friction shared by them: one matrix-vector product, no θ-sized
    array of each chain's damping); `tracked` (as `move`'s; config and temperature then needed): each chain's
    friction recomputed behind the barrier from the shared fields, the chain's gain and step (`chain_noise`)."""
    if tracked is None:
        r, m, friction, eps = settled((state.momentum, state.inv_mass, state.friction, state.eps))
    else:
        r, m, f, v, g, eps = settled((state.momentum, state.inv_mass, state.friction, state.noise_var,
                                      state.noise_gain, tracked[2]))
        _, friction, _ = chain_noise(state._replace(inv_mass=m, friction=f, noise_var=v, noise_gain=g), config,
                                     temperature, eps)
    axes = (0, None, None if tracked is None else 0, 0 if jnp.ndim(eps) else None)
    t_kin, kinetic = jax.vmap(kinetic_temperature, in_axes=axes)(r, m, friction, eps)
    return t_kin, jnp.broadcast_to(state.step >= freeze, t_kin.shape), kinetic


def _gradients(posterior: Posterior, config, positions, minibatches, gather):
    """Every chain's (loss, ∇Ũ, V̂): from two half-batches where gathering with noise_halves (l2e.adaptation)."""
    if config.noise_halves:  # mass_rule "dense": δ = (∇Ũ₁ − ∇Ũ₂)/2 instead of V̂ = δ² (`gather_window`)
        split = halved_difference if dense_active(config, positions) else halved_gradients
        return jax.vmap(lambda p, mb: split(posterior, p, mb, gather))(positions, minibatches)
    loss, _, grad_u = jax.vmap(posterior.value_and_potential_grad)(positions, minibatches)
    return loss, grad_u, jax.tree.map(jnp.zeros_like, grad_u)


def dense_active(config, positions) -> bool:
    """Whether mass_rule "dense" applies: θ has at most l2e.policy_dense.DENSE_MAX coordinates."""
    return config.mass_rule == "dense" and dense_size(positions) > 0


def gather_window(state, config, pre, grad_u, noise, loss, t_kin, early, finite):
    """l2e.policy_features.gather, and with the dense mass first the co-moments (`noise` is then δ); finite: per
    chain, the update's loss and θ' finite (`chains_finite`)."""
    if dense_active(config, pre):
        state = state._replace(dense=gather_dense(state.dense, state.count + 1.0, state.mean_x, state.mean_g, pre,
                                                  grad_u, noise))
        noise = jax.tree.map(jnp.square, noise)
    return gather(state, pre, grad_u, noise, loss, t_kin, early, finite)


def chain_gradients(posterior: Posterior, config, state, minibatches, first, gathering):
    """Every chain's (loss, ∇Ũ, V̂) at its θ (`_gradients`): in phase 0 (`first`) the minibatch gradient, after it with
    control_variate the control-variate estimate around the state's anchor (two minibatch gradients)."""
    if not config.control_variate:
        return _gradients(posterior, config, state.position, minibatches, gathering)
    anchored = cv_posterior(posterior, Anchor(state.anchor, state.anchor_grad))
    return branch(first, lambda mb: _gradients(posterior, config, state.position, mb, gathering),
                   lambda mb: _gradients(anchored, config, state.position, mb, gathering), minibatches)


def branch(flag, yes, no, state):
    """yes(state) or no(state): a Python bool (a phase kernel) decides statically, a traced one by lax.cond."""
    if isinstance(flag, bool):
        return yes(state) if flag else no(state)
    return jax.lax.cond(flag, yes, no, state)
