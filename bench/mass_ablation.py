"""Ablation of Mass-L2E's design choices on the sampler card's Gaussian targets (issue 13):

    python -m bench.mass_ablation [--steps 20000] [--seeds 3] [--json FILE]

Variants, all at the card's ε = 0.1·σ_min and C = 1 with gradient noise ν = 0.5, constants frozen after the burn-in
(steps/5): SGHMC (φ's output layer 0); the shipped Mass-L2E φ; its mass head alone (friction output zeroed); its
friction head alone (mass output zeroed); and the hand-designed RMS preconditioner log M = log C_i/C = relative log
gradient RMS (features 0 + 1), i.e. what a learned φ would have to beat without meta-training.  Per target and
variant, mean ± s.e. over seeds of: |mean error|/σ, median variance ratio (its 5 % quantile over coordinates), and
the per-coordinate bulk ESS per 1,000 steps (Geyer, pooled over 4 chains) — median and minimum over coordinates,
the sampler's mixing speed at equal gradient cost.
"""
from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from evaluate import card
from l2e import mass as M

THIN = 10


def _zero_column(params, col):
    last = M.mlp_layers_names(params)[-1]
    k = np.asarray(params[last]["kernel"]).copy()
    b = np.asarray(params[last]["bias"]).copy()
    k[:, col] = 0.0
    b[col] = 0.0
    return {**params, last: {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}}


def variants() -> dict:
    shipped, _, _ = l2e.load_meta_params("mass")
    zero = jax.tree.map(jnp.zeros_like, shipped)
    return {"sghmc (φ output 0)": zero, "mass-l2e (shipped)": shipped, "mass head only": _zero_column(shipped, 1),
            "friction head only": _zero_column(shipped, 0), "hand RMS (a=1, b=2)": M.rms_preconditioner_params()}


def _trace(alg, target, sample_noise, key, x0, steps):
    def body(state, t):
        k_noise, k_step = jax.random.split(jax.random.fold_in(key, t))
        state, _ = alg.step(k_step, state, sample_noise(k_noise))
        return state, state.position["x"]

    _, xs = jax.lax.scan(body, alg.init({"x": x0}), jnp.arange(steps))
    return xs[::THIN]


def run_variant(params, target, steps: int, seed: int, chains: int = 4) -> dict:
    cfg = card.CardConfig(num_steps=steps, burn_in=steps // 5, num_chains=chains)
    post, noise = card.card_posterior(target, cfg)
    smin = float(1.0 / np.max(target.grad_scale))
    eps = cfg.step_factor * smin
    config = M.MassConfig(learning_rate=eps**2 * post.data_size, friction=cfg.friction, freeze_step=cfg.burn_in)
    alg = l2e.mass(post, params, config)
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), seed)
    x0 = target.sample(jax.random.fold_in(key, 1), chains)
    keys = jax.random.split(jax.random.fold_in(key, 2), chains)
    xs = np.asarray(jax.jit(jax.vmap(lambda k, x: _trace(alg, target, noise, k, x, steps)))(keys, x0), np.float64)
    xs = xs[:, cfg.burn_in // THIN:]  # (chains, draws, d) after the freeze
    sd = np.sqrt(target.var)
    mean, var = xs.mean(axis=(0, 1)), xs.var(axis=(0, 1))
    ess = sum(np.asarray(l2e.mclmc.ess_geyer(jnp.asarray(xs[c])), np.float64) for c in range(chains))  # (d,)
    per_1k = ess / (chains * (steps - cfg.burn_in)) * 1000.0
    ratio = var / target.var
    return {"mean_error": float(np.mean(np.abs(mean - target.mean) / sd)), "var_ratio": float(np.median(ratio)),
            "var_ratio_q05": float(np.quantile(ratio, 0.05)), "ess_per_1k_median": float(np.median(per_1k)),
            "ess_per_1k_min": float(per_1k.min())}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.mass_ablation")
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    targets = (card.gaussian_target("gaussian-10d", np.ones(10)),
               card.gaussian_target("gaussian-100d-aniso", np.logspace(-1, 1, 100)))
    out = {}
    print("| target | variant | mean error / σ | variance ratio (q05) | ESS / 1k steps median | min |")
    print("|---|---|---|---|---|---|")
    for target in targets:
        for name, params in variants().items():
            rows = [run_variant(params, target, a.steps, s) for s in range(a.seeds)]
            agg = {k: (float(np.mean([r[k] for r in rows])), float(np.std([r[k] for r in rows], ddof=1) /
                                                                    np.sqrt(len(rows)))) for k in rows[0]}
            out[f"{target.name}|{name}"] = agg
            f = lambda k, d=3: f"{agg[k][0]:.{d}f} ± {agg[k][1]:.{d}f}"  # noqa: E731
            print(f"| {target.name} | {name} | {f('mean_error')} | {f('var_ratio')} ({agg['var_ratio_q05'][0]:.2f}) "
                  f"| {f('ess_per_1k_median', 2)} | {f('ess_per_1k_min', 2)} |", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
