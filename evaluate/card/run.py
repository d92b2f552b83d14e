"""Running the sampler card: every sampler on every target, pooled statistics after burn-in (module doc of
evaluate.card); the hand-designed samplers' and a learned sampler's card builders."""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from l2e import learned
from evaluate.methods.base import always
from evaluate.card.targets import CardConfig, Target, builder_noise, card_posterior, default_targets
from l2e.diagnostics import virial

__all__ = ["SamplerBuilder", "always", "hand_designed", "learned_builder", "run_sampler", "sampler_card"]


# name -> (posterior, eps, friction, sigma_min, cfg, num_steps) -> (SamplingAlgorithm, weight(state) -> 0/1)
SamplerBuilder = Callable[..., tuple[l2e.SamplingAlgorithm, Callable]]


def hand_designed() -> dict[str, SamplerBuilder]:
    """The card builders of the hand-designed samplers, by method name: every registered method with a card builder
    (Method.card: e.g. sgld, sghmc, csghmc, psgld, sgnht, baoab, precond_rmsprop / precond_fisher with the mass
    adapted over the first fifth, adaptive_sghmc with its published constants, warm_sghmc with Adam for the first
    tenth; step rules in the module doc of evaluate.card), in registry order.

    Returns:
      {name: builder(post, eps, c, smin, steps) -> (SamplingAlgorithm, weight(state) -> () 0/1)}.
    """
    from evaluate.methods.registry import REGISTRY

    return {name: m.card for name, m in REGISTRY.items() if m.card is not None}


def learned_builder(meta_params, config, factory: Callable = l2e.l2e) -> SamplerBuilder:
    """The card builder of a learned sampler at the card's ε and C, with the rest of the checkpoint's configuration
    (output scales, noise mode, temperature); ε may be traced (the analytic benchmark's step-size sweep compiles
    once).

    Args:
      meta_params, config: a checkpoint's meta-parameters and sampler configuration (`l2e.load_meta_params`).
      factory: (posterior, meta_params, config) -> SamplingAlgorithm, e.g. l2e.l2e, l2e.kinetic, l2e.mass.

    Returns:
      builder(post, eps, c, smin, steps) -> (SamplingAlgorithm at lr = ε²N and friction C, `always`); with
      `halves = True` where the sampler splits its minibatches (Protocol.splits_minibatch: Transient-L2E's noise
      estimate), so that the card gives it two half-batch rows per noise draw (evaluate.card.half_batches).
    """

    entry = learned.kind_of_config(config)

    def build(post, eps, c, smin, steps):  # a tuning-free sampler (Protocol.tuning_free) runs as configured
        cfg = (config if entry.tuning_free
               else dataclasses.replace(config, learning_rate=eps**2 * post.data_size, friction=c))
        return factory(post, meta_params, cfg), always

    build.halves = entry.splits_minibatch(config)
    return build


class _Sums(NamedTuple):
    weight: jax.Array
    x: jax.Array
    x2: jax.Array
    kinetic: jax.Array
    virial: jax.Array
    moment: jax.Array
    finite: jax.Array


def _chain_stats(alg, weight_fn, target: Target, sample_noise, key, x0, cfg: CardConfig):
    """Weighted sums of θ, θ², kinetic term and θ·∇U after burn-in over one chain (lax.scan, vector targets)."""
    grad_u = jax.grad(target.energy)
    d = x0.shape[0]
    zero = jnp.zeros(())
    sums0 = _Sums(zero, jnp.zeros(d), jnp.zeros(d), zero, zero, zero, jnp.ones((), bool))
    moment = target.moment or (lambda x: jnp.zeros(()))

    def body(carry, t):
        state, sums = carry
        k_noise, k_step = jax.random.split(jax.random.fold_in(key, t))
        state, info = alg.step(k_step, state, sample_noise(k_noise))
        x = state.position["x"]
        w = jnp.where(t >= cfg.burn_in, weight_fn(state), 0.0)
        kin = getattr(info, "kinetic", jnp.zeros(()))
        sums = _Sums(sums.weight + w, sums.x + w * x, sums.x2 + w * x * x, sums.kinetic + w * kin,
                     sums.virial + w * virial(x, grad_u), sums.moment + w * moment(x),
                     sums.finite & jnp.all(jnp.isfinite(x)))
        return (state, sums), None

    (_, sums), _ = jax.lax.scan(body, (alg.init({"x": x0}), sums0), jnp.arange(cfg.num_steps))
    return sums


def _ensemble_stats(alg, weight_fn, target: Target, sample_noise, key, x0s, cfg: CardConfig):
    """`_chain_stats` of the cfg.num_chains chains of an ensemble sampler (its state holds them all, each with its
    own noise: a builder with `ensemble = True`, e.g. l2e.policy): the same sums, one per chain."""
    grad_u = jax.grad(target.energy)
    m, d = x0s.shape
    zm = jnp.zeros(m)
    sums0 = _Sums(zm, jnp.zeros((m, d)), jnp.zeros((m, d)), zm, zm, zm, jnp.ones(m, bool))
    moment = jax.vmap(target.moment or (lambda x: jnp.zeros(())))

    def body(carry, t):
        state, sums = carry
        k_noise, k_step = jax.random.split(jax.random.fold_in(key, t))
        state, info = alg.step(k_step, state, jax.vmap(sample_noise)(jax.random.split(k_noise, m)))
        x = state.position["x"]
        w = jnp.where(t >= cfg.burn_in, weight_fn(state), 0.0) * jnp.ones(m)
        kin = getattr(info, "kinetic", zm)
        sums = _Sums(sums.weight + w, sums.x + w[:, None] * x, sums.x2 + w[:, None] * x * x, sums.kinetic + w * kin,
                     sums.virial + w * jax.vmap(lambda xi: virial(xi, grad_u))(x), sums.moment + w * moment(x),
                     sums.finite & jnp.all(jnp.isfinite(x), axis=1))
        return (state, sums), None

    (_, sums), _ = jax.lax.scan(body, (alg.init({"x": x0s}), sums0), jnp.arange(cfg.num_steps))
    return sums


def run_sampler(name: str, builder: SamplerBuilder, target: Target, cfg: CardConfig, seed: int) -> dict:
    """One sampler on one target: cfg.num_chains chains from exact draws, pooled statistics after burn-in.

    Args:
      name: the row's sampler label; builder: its card builder; target, cfg: what and how long to run.
      seed: folded into PRNGKey(cfg.seed) (SGHMC's band runs seeds 0 … band_seeds − 1).

    Returns:
      {"sampler", "target", "seed", "diverged_chains"} and, unless every chain diverged, "step_size" (ε),
      "friction", "mean_error" (mean |E θ_i − μ_i|/σ_i), "var_ratio_median", "var_ratio_q05", "var_ratio_q95"
      (Var θ_i / σ_i² over coordinates), "t_kin" (None without a kinetic Info field) and "t_conf" (both in units
      of the target temperature), "moment" (None, or the target's extra statistic: label, value, exact).
    """
    post, sample_noise = card_posterior(target, cfg)
    sample_noise = builder_noise(builder, sample_noise)  # half-batch rows for a sampler that splits its batch
    smin = float(1.0 / np.max(target.grad_scale))  # σ_min
    eps = cfg.step_factor * smin
    alg, weight = builder(post, eps, cfg.friction, smin, cfg.num_steps)
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), seed)
    x0 = target.sample(jax.random.fold_in(key, 1), cfg.num_chains)
    ensemble = getattr(builder, "ensemble", False)
    if ensemble:  # one state of every chain
        run = jax.jit(lambda k, x: _ensemble_stats(alg, weight, target, sample_noise, k, x, cfg))
        s = jax.tree.map(np.asarray, run(jax.random.fold_in(key, 2), x0))
    else:
        keys = jax.random.split(jax.random.fold_in(key, 2), cfg.num_chains)
        run = jax.jit(jax.vmap(lambda k, x: _chain_stats(alg, weight, target, sample_noise, k, x, cfg)))
        s = jax.tree.map(np.asarray, run(keys, x0))
    ok = s.finite & (s.weight > 0)
    if not ok.any():
        return {"sampler": name, "target": target.name, "seed": seed, "diverged_chains": int(cfg.num_chains)}
    w = s.weight[ok].sum()
    mean = s.x[ok].sum(0) / w
    var = s.x2[ok].sum(0) / w - mean**2
    ratio = var / target.var
    d = target.mean.size
    k0 = jax.random.PRNGKey(0)
    info = (jax.eval_shape(alg.step, k0, alg.init({"x": x0}), jax.vmap(sample_noise)(jax.random.split(k0, len(x0))))
            if ensemble else jax.eval_shape(alg.step, k0, alg.init({"x": x0[0]}), sample_noise(k0)))[1]
    momentum = "kinetic" in info._fields
    return {"sampler": name, "target": target.name, "seed": seed, "step_size": eps, "friction": cfg.friction,
            "diverged_chains": int((~s.finite).sum()),
            "mean_error": float(np.mean(np.abs(mean - target.mean) / np.sqrt(target.var))),
            "var_ratio_median": float(np.median(ratio)), "var_ratio_q05": float(np.quantile(ratio, 0.05)),
            "var_ratio_q95": float(np.quantile(ratio, 0.95)),
            "t_kin": float(s.kinetic[ok].sum() / w / d) if momentum else None,
            "t_conf": float(s.virial[ok].sum() / w / d),
            "moment": (None if target.moment is None else
                       {"label": target.moment_label, "value": float(s.moment[ok].sum() / w),
                        "exact": float(target.moment_value)})}


def sampler_card(samplers: dict[str, SamplerBuilder], cfg: CardConfig = CardConfig(),
                 targets: tuple[Target, ...] | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Every sampler on every target (seed 0), and SGHMC's band.

    Args:
      samplers: {label: card builder}; cfg: the card's configuration (checked here).
      targets: default `default_targets()`; progress: called with "<target> <sampler>" before each row.

    Returns:
      {"config": cfg as a dict, "rows": one `run_sampler` row per (target, sampler), "band": {target: [lo, hi]}
      of SGHMC's median variance ratio over cfg.band_seeds seeds}.
    """
    cfg.check()
    rows, band = [], {}
    for target in targets or default_targets():
        for name, builder in samplers.items():
            if progress:
                progress(f"{target.name} {name}")
            rows.append(run_sampler(name, builder, target, cfg, 0))
        sg = [run_sampler("sghmc", hand_designed()["sghmc"], target, cfg, s)["var_ratio_median"]
              for s in range(cfg.band_seeds)]
        band[target.name] = [float(min(sg)), float(max(sg))]
    return {"config": dataclasses.asdict(cfg), "rows": rows, "band": band}
