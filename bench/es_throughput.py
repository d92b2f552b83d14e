"""B3: ES throughput — chain-steps/s of the whole population ÷ (P × single-chain rate).

Usage: python -m bench.es_throughput [--populations 2,4,8] [--steps 100] [--repeats 3] [--modes sequential,vmap]

Both rates are measured through `meta_train.es.evaluate_population` (inner chains + fitness, exactly what
meta-training runs) on the same task, keys and schedule: the single-chain rate with a population of one
member in "sequential" mode (a plain single-chain program), the population rate with P members in each
execution mode (`ESConfig.execution`):
  * "sequential" (the default on a single-process CPU): each member an ordinary single-chain program,
    members' chunks interleaved in one Python loop, round-robin over the local devices;
  * "vmap": one program over the batched members (shard_map over the device mesh when it has > 1 device).
Timed round-robin in one process; B3 = t(single chain) · P / t(P members), median of per-round ratios.
"""
from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np

from bench.inner_loop import default_meta_params, interleaved, median_ratio
from meta_train.presets import PRESETS
from meta_train.es import evaluate_population, outer_keys
from tasks import ModelSpec, TaskSpec


def es_throughput(populations=(2, 4, 8), steps: int = 100, repeats: int = 3, spec: TaskSpec | None = None,
                  modes=("sequential", "vmap")) -> dict:
    cfg = PRESETS["paper-form"]
    spec = spec or TaskSpec("digits", ModelSpec("cnn", channels=8, depth=2))
    num_samples = max(1, min(cfg.inner.num_samples, steps // cfg.inner.thinning))
    sched = cfg.inner.__class__(num_steps=steps, num_samples=num_samples, thinning=cfg.inner.thinning,
                                batch_size=cfg.inner.batch_size, chunk=cfg.inner.chunk)
    phi = default_meta_params()
    keys = outer_keys(0, 0)

    def members(p):
        return jax.tree.map(lambda x: x[None] + 0.01 * jax.random.normal(jax.random.PRNGKey(p), (p,) + x.shape), phi)

    fns = {"single": (lambda pop=members(1): evaluate_population(
        spec, pop, keys, cfg.sampler, sched, cfg.meta_loss_examples, execution="sequential")[0])}
    for mode in modes:
        for p in populations:
            pop = members(p)
            fns[f"{mode} P={p}"] = (lambda pop=pop, mode=mode: evaluate_population(
                spec, pop, keys, cfg.sampler, sched, cfg.meta_loss_examples, execution=mode)[0])
    times = interleaved(fns, steps, repeats)
    res = {"task": spec.name, "steps": steps, "devices": len(jax.local_devices()),
           "ms_per_step": {k: statistics.median(v) for k, v in times.items()}}
    for mode in modes:
        for p in populations:
            res[f"B3 P={p} {mode}"] = p * median_ratio(times, "single", f"{mode} P={p}")
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--populations", default="2,4,8")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="sequential,vmap")
    a = ap.parse_args(argv)
    res = es_throughput(tuple(int(p) for p in a.populations.split(",")), a.steps, a.repeats,
                        modes=tuple(a.modes.split(",")))
    print(f"task {res['task']}  steps {res['steps']}  devices {res['devices']}  ms per population step: "
          + "  ".join(f"{k} {v:.2f}" for k, v in res["ms_per_step"].items()))
    print("  " + "  ".join(f"{k} {v:.2f}" for k, v in res.items() if k.startswith("B3")))
    return res


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
