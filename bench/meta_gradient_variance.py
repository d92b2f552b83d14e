"""Variance of each outer estimator's meta-gradient at equal compute, on one meta-training task (issue 17).

    python -m bench.meta_gradient_variance --preset smoke --repeats 8 --output runs/mgv.json \
        [--estimators antithetic,antithetic_no_crn,truncated,pes,backprop] [--set es.truncation=10 ...]

The task is fixed (the config's distribution sampled with outer_keys(seed, 0)) and so is φ (the config's φ₀);
repeat r redraws everything else (θ₀, minibatches, Langevin noise, perturbations, meta-loss examples). One estimate
costs one full inner unroll of inner.num_steps updates per chain, for every estimator: "antithetic" runs P members'
full chains (today's meta_train estimate); "truncated", "pes" and "noise_reuse" run the same P chains in
K = num_steps / truncation segments and average the K segment gradients (PES: the sum of its per-truncation estimates
is the full-unroll ES estimate of the summed segment losses); "backprop" runs one chain and averages the K segments'
pathwise gradients (its cost in chain steps is num_steps forward plus the backward passes, ≈ 2–3× a forward step, reported as is).
Reported per estimator: chain steps per estimate, the mean gradient's norm, the variance per coordinate
tr Var / dim, the relative variance tr Var / ‖mean‖² (scale-free: the estimators differ in what they estimate),
and the mean cosine of single estimates to their own mean.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from meta_train.config import apply_overrides
from meta_train.es import ProgramCache, outer_keys
from meta_train.estimators import ESTIMATORS, make
from meta_train.estimators.antithetic import population_fitness
from meta_train.estimators.common import cap_fitness
from meta_train.estimators.unroll import segments_per_unroll
from meta_train.presets import PRESETS
from meta_train.train import initial_meta_params


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


NO_CRN = "antithetic_no_crn"
"""The antithetic estimate without common random numbers (an --estimators name of this bench only)."""


def antithetic_estimate(config, cache, spec, phi, r: int, common: bool = True) -> np.ndarray:
    """One full-length antithetic ES gradient (as meta_train.estimators.antithetic: identity shaping, divergence
    cap). common=False: the "−" members run with other inner keys than the "+" members (another θ₀, minibatches,
    Langevin noise and meta-loss examples) — the estimate without common random numbers."""
    es, keys = config.es, outer_keys(config.seed + 1 + r, 0)
    pairs = es.population // 2
    leaves, treedef = jax.tree.flatten(phi)
    ks = jax.random.split(keys.perturb, len(leaves))
    z = jax.tree.unflatten(treedef, [jax.random.normal(k, (pairs,) + x.shape) for k, x in zip(ks, leaves)])
    pop = jax.tree.map(lambda m, e: jnp.concatenate([m[None] + es.sigma * e, m[None] - es.sigma * e]), phi, z)
    def fitness(members, k):  # the antithetic estimator's own fitness (budgets and penalties of the objective)
        return population_fitness(config, spec, members, k, cache).fitness

    if common:
        fit = fitness(pop, keys)
    else:
        other = outer_keys(config.seed + 1 + r, 1)._replace(task=keys.task, perturb=keys.perturb)
        half = lambda lo: jax.tree.map(lambda v: v[lo:lo + pairs], pop)  # noqa: E731
        fit = jnp.concatenate([fitness(half(0), keys), fitness(half(pairs), other)])
    fit = np.asarray(cap_fitness(fit, es.divergence_penalty))
    diff = fit[:pairs] - fit[pairs:]
    return _flat(jax.tree.map(lambda v: jnp.tensordot(diff, v, axes=1) / (2.0 * es.sigma * pairs), z))


def truncated_estimate(config, cache, spec, phi, r: int) -> np.ndarray:
    """The mean of the K segment gradients of one unroll (φ held fixed: the estimator's `gradient`)."""
    run = dataclasses.replace(config, seed=config.seed + 1 + r)
    estimator = make(run, phi)
    state = estimator.init(jax.random.PRNGKey(run.seed), cache, 0, spec=spec)
    grads = []
    for s in range(segments_per_unroll(config)):
        grad, _, state = estimator.gradient(state, s, cache)
        grads.append(_flat(grad))
    return np.mean(grads, axis=0)


def measure(config, estimators, repeats: int) -> dict:
    cache = ProgramCache()
    spec = config.tasks.sample(outer_keys(config.seed, 0).task)
    phi = initial_meta_params(config)
    out = {"task": spec.name, "repeats": repeats, "dim": int(_flat(phi).size), "estimators": {}}
    for name in estimators:
        base = "antithetic" if name == NO_CRN else name
        cfg = dataclasses.replace(config, es=dataclasses.replace(config.es, estimator=base))
        fn = (truncated_estimate if ESTIMATORS[base].TRUNCATED else
              functools.partial(antithetic_estimate, common=name != NO_CRN))
        t0 = time.perf_counter()
        g = np.stack([fn(cfg, cache, spec, phi, r) for r in range(repeats)])
        mean = g.mean(axis=0)
        var = g.var(axis=0, ddof=1).sum()
        cos = [float(x @ mean / (np.linalg.norm(x) * np.linalg.norm(mean) + 1e-30)) for x in g]
        chains = 1 if ESTIMATORS[base].PATHWISE else cfg.es.population
        out["estimators"][name] = {
            "chain_steps_per_estimate": chains * sum(sc.num_steps for sc in cfg.schedules), "mean_norm": float(np.linalg.norm(mean)),
            "var_per_coord": float(var / g.shape[1]), "relative_variance": float(var / (mean @ mean + 1e-30)),
            "mean_cosine_to_mean": float(np.mean(cos)), "seconds": round(time.perf_counter() - t0, 2)}
        print(name, out["estimators"][name], flush=True)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smoke", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS),
                    help=f"comma-separated, of {', '.join(ESTIMATORS)}, {NO_CRN} (antithetic, members on independent "
                         "inner keys)")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    config = apply_overrides(PRESETS[args.preset], args.set)
    result = measure(config, [e for e in args.estimators.split(",") if e], args.repeats)
    result["config"] = config.to_dict()
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
