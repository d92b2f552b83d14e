"""The statistics Policy-L2E's adaptation points read (l2e.policy): the M chains' gathering-window moments
(`gather`, update by update), and at an adaptation point the features per coordinate and globally and the mass
rule's log σ̂² (`features`; module docstring of l2e.policy)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from l2e.adaptation import flat, pooled_moments, welford
from l2e.reductions import chain_sum
from l2e.transient import SHRINK

__all__ = ["COORD_FEATURES", "GLOBAL_FEATURES", "LAG_Z", "features", "finite_statistics", "gather", "lagging"]

COORD_FEATURES = ("log_fisher_scale", "log_within_share", "log_noise_share", "grad_mean_z", "log_inv_mass")
GLOBAL_FEATURES = ("progress", "log_t_kin", "loss_trend", "log_rhat", "log_energy_var")
_TINY, _HUGE = 1e-30, 1e30
"""_HUGE caps the noise share's ratio below float32's overflow (a window whose ∇Ũ did not vary)."""
LAG_Z = 4.0
"""A chain lags (`lagging`) where its window's mean minibatch loss exceeds the best live chain's by more than LAG_Z ×
the live chains' median within-chain standard deviation of the loss."""


def _log_scales(config, var_x, var_g, mean_g, count) -> tuple[jax.Array, jax.Array]:
    """(log σ̂² of the mass rule shrunk toward its geometric mean, the Fisher diagonal's log σ̂² less its mean)."""
    fisher = 0.5 * (jnp.log(var_x) - jnp.log(var_g))
    if config.mass_rule == "variance":
        log_s2 = jnp.log(var_x)
    elif config.mass_rule == "scale":  # the shape of 1/sqrt(E[∇Ũ²]) at the Fisher diagonal's geometric mean
        log_s2 = -0.5 * jnp.log(var_g + jnp.square(mean_g))
        log_s2 = log_s2 - jnp.mean(log_s2) + jnp.mean(fisher)
    else:
        log_s2 = fisher
    mean = jnp.mean(log_s2)
    w = count / (count + SHRINK)
    return w * (log_s2 - mean) + mean, fisher - jnp.mean(fisher)


def finite_statistics(state) -> jax.Array:
    """(M,) bool: the chains whose gathering-window statistics are finite (not divergent)."""
    return jax.vmap(lambda *t: jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(t)]))
                    )(state.mean_x, state.m2_x, state.mean_g, state.m2_g, state.loss_mean, state.loss_m2)


def lagging(state) -> jax.Array:
    """(M,) bool: the finite chains that have not arrived where the others are — their gathering window's mean
    minibatch loss lies more than LAG_Z × the finite chains' median within-chain standard deviation of the loss
    above the best finite chain's. At stationarity two chains' window means differ by their standard error, a
    fraction of that deviation; a chain stuck on a plateau or still travelling lies far above."""
    finite = finite_statistics(state)
    sd = jnp.sqrt(state.loss_m2 / jnp.maximum(state.count - 1.0, 1.0))
    best = jnp.min(jnp.where(finite, state.loss_mean, jnp.inf))
    scale = jnp.nanmedian(jnp.where(finite, sd, jnp.nan))
    return finite & (state.loss_mean - best > LAG_Z * scale)


def features(state, config, n_data: int, progress, lag=None) -> tuple[jax.Array, jax.Array, dict]:
    """(per-coordinate features (d, |COORD_FEATURES|), global features (|GLOBAL_FEATURES|,), the rule's statistics)
    at an adaptation point from the gathering window's statistics (module docstring), pooled over the live chains:
    a chain whose statistics are not finite (divergent) or that `lag` ((M,) bool, `lagging`; None: none) marks is
    left out (stats["alive"], (M,) bool); stats["centre"]: the live chains' pooled mean of θ (flat; the control
    variates' anchor)."""
    n = jnp.maximum(state.count, 1.0)
    alive = finite_statistics(state) if lag is None else finite_statistics(state) & ~lag
    chains = jnp.maximum(jnp.sum(alive), 1.0)
    w_x, b_x, centre = pooled_moments(state.mean_x, state.m2_x, n, alive)
    w_g, b_g, mu_g = pooled_moments(state.mean_g, state.m2_g, n, alive)
    var_x, var_g = w_x + _TINY, w_g + _TINY  # within chains: chains in different modes do not widen the mass
    noise = flat(state.noise_acc)
    log_s2, fisher = _log_scales(config, var_x, var_g, mu_g, n * chains)
    log_m = jnp.log(flat(state.inv_mass))
    coord = jnp.stack([fisher, jnp.log(var_x / (var_x + b_x)), jnp.log(jnp.minimum((noise + _TINY) / var_g, _HUGE)),
                       jnp.clip(mu_g / jnp.sqrt(var_g), -10.0, 10.0), log_m - jnp.mean(log_m)], axis=1)
    d = var_x.shape[0]
    def mean(v):  # over the live chains
        return jnp.sum(jnp.where(alive, v, 0.0)) / chains

    loss_var = mean(state.loss_m2) / jnp.maximum(n - 1.0, 1.0) + mean(jnp.square(state.loss_mean - mean(
        state.loss_mean)))
    trend = 2.0 * mean(state.loss_mean - state.loss_early) * n_data / jnp.sqrt(0.5 * d)
    t_kin = jnp.where(state.eps > 0, jnp.log(jnp.maximum(state.kin, _TINY) / config.temperature), 0.0)
    glob = jnp.stack([jnp.asarray(progress, jnp.float32), t_kin, jnp.arcsinh(trend),
                      jnp.mean(0.5 * jnp.log((var_x + b_x) / var_x)),
                      jnp.log(float(n_data) ** 2 * loss_var / (0.5 * d) + _TINY)])
    return coord, glob, {"log_s2": log_s2, "noise": noise, "alive": alive, "centre": centre}


def gather(state, pre, grad_u, noise, loss, t_kin, early, finite):
    """l2e.policy's gathering window's statistics with one more state per chain (θ before the update, its ∇Ũ, V̂,
    loss); the pooled V̂ and T_kin average the live chains only (a divergent chain's are not finite: left out):
    `finite` (per chain, the loss and θ' after the update finite: θ and ∇Ũ were), T_kin and the sum of V̂ finite
    (each chain's θ, ∇Ũ and V̂ read once, not three times).

    l2e.policy's kernels call it inside a conditional (`_branch` on a traced flag, in the phase kernels too). Called
    directly, nothing on the chains' path needs its result, so XLA:CPU deferred it to the end of a compiled chunk
    and kept every update's θ, ∇Ũ and V̂ live until then: a 10-update chunk of a 269k-parameter MLP's 4 chains held
    a 288 MB temporary buffer instead of 185, mapped fresh at every call, and its gathering updates cost 1.6–1.8 ×
    SGHMC's instead of 1.24–1.45 (docs/results.md, "Step cost")."""
    count = state.count + 1.0
    mx, sx = jax.vmap(welford, in_axes=(None, 0, 0, 0))(count, state.mean_x, state.m2_x, pre)
    mg, sg = jax.vmap(welford, in_axes=(None, 0, 0, 0))(count, state.mean_g, state.m2_g, grad_u)
    alive = finite & jnp.isfinite(t_kin) & jnp.isfinite(sum(jnp.sum(v, axis=tuple(range(1, v.ndim)))
                                                             for v in jax.tree.leaves(noise)))
    live = jnp.maximum(jnp.sum(alive), 1.0)

    def mean(v):  # over the live chains (axis 0)
        return chain_sum(v, alive) / live

    nv = jax.tree.map(lambda m, v: m + (mean(v) - m) / count, state.noise_acc, noise)
    delta = loss - state.loss_mean
    lm = state.loss_mean + delta / count
    early_mean = jnp.where(early, state.loss_early + (loss - state.loss_early) / count, state.loss_early)
    return state._replace(count=count, mean_x=mx, m2_x=sx, mean_g=mg, m2_g=sg, noise_acc=nv, loss_mean=lm,
                          loss_m2=state.loss_m2 + delta * (loss - lm), loss_early=early_mean,
                          kin=state.kin + (mean(t_kin) - state.kin) / count)
