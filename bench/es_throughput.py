"""B3: ES throughput — chain-steps/s of the vmapped population ÷ (P × single-chain rate).

Usage: python -m bench.es_throughput [--populations 2,4,8] [--steps 300] [--repeats 5]

Population: meta_train.es.population_chunk (jax.vmap of the chunk over members; key and data shared),
driven by l2e.chains.run_chain exactly as meta-training does.  Single chain: the same kernel, schedule
and task, not vmapped (one member's meta-parameters).  Prototype "unrolled": the P members' chunks written out one after another in Python inside one jit
(`unrolled_population_chunk`), no vmap.  Both are timed interleaved in one process; the
figure is t_single · P·steps / (P · t_population) = t_single / t_population (median of per-round ratios).
"""
from __future__ import annotations

import argparse
import statistics

import jax
import jax.numpy as jnp

from bench.inner_loop import default_meta_params, interleaved, median_ratio
from l2e.chains import make_chunk, run_chain
from l2e.l2e import build_kernel, init as l2e_init
from meta_train.config import PRESETS
from meta_train.es import population_chunk
from tasks import ModelSpec, Task, TaskSpec, build_task


def unrolled_population_chunk(spec: TaskSpec, sampler, schedule):
    """Prototype alternative to meta_train.es.population_chunk: the members' chunks unrolled in Python inside
    one jit (no vmap: each member's conv gradient stays an ordinary, ungrouped convolution)."""
    task = build_task(spec)
    chunk = make_chunk(build_kernel(task.posterior, sampler), Task.sample_batch, schedule.batch_size,
                       schedule.chunk_length)

    def pop_chunk(states, key, start, data, metas):
        p = jax.tree.leaves(metas)[0].shape[0]
        outs = [chunk(jax.tree.map(lambda x: x[i], states), key, start, data, jax.tree.map(lambda x: x[i], metas))
                for i in range(p)]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)

    return jax.jit(pop_chunk)


def es_throughput(populations=(2, 4, 8), steps: int = 300, repeats: int = 5,
                  spec: TaskSpec | None = None, unrolled: bool = True) -> dict:
    cfg = PRESETS["default"]
    spec = spec or TaskSpec("digits", ModelSpec("cnn", channels=8, depth=2))
    sched = cfg.inner.__class__(num_steps=steps, num_samples=max(1, min(cfg.inner.num_samples, steps // cfg.inner.thinning)),
                                thinning=cfg.inner.thinning,
                                batch_size=cfg.inner.batch_size, chunk=cfg.inner.chunk)
    task = build_task(spec)
    phi = default_meta_params()
    theta = task.init_params(jax.random.PRNGKey(1))
    key = jax.random.PRNGKey(2)
    data = task.train_data
    single = jax.jit(make_chunk(build_kernel(task.posterior, cfg.sampler), Task.sample_batch, sched.batch_size,
                                sched.chunk_length))
    s0 = l2e_init(theta)
    fns = {"single": lambda: run_chain(single, s0, key, data, phi, sched)[1]}
    for p in populations:
        pop_phi = jax.tree.map(
            lambda x, p=p: x[None] + 0.01 * jax.random.normal(jax.random.PRNGKey(p), (p,) + x.shape), phi)
        state = jax.tree.map(lambda x, p=p: jnp.broadcast_to(x, (p,) + x.shape), s0)
        fn = population_chunk(spec, cfg.sampler, sched)
        fns[f"P={p}"] = lambda fn=fn, state=state, pop_phi=pop_phi: run_chain(fn, state, key, data, pop_phi, sched)[1]
        if unrolled:
            ufn = unrolled_population_chunk(spec, cfg.sampler, sched)
            fns[f"P={p} unrolled"] = (lambda fn=ufn, state=state, pop_phi=pop_phi:
                                      run_chain(fn, state, key, data, pop_phi, sched)[1])
    times = interleaved(fns, steps, repeats)
    res = {"task": spec.name, "steps": steps, "ms_per_step": {k: statistics.median(v) for k, v in times.items()}}
    for p in populations:
        res[f"B3 P={p}"] = median_ratio(times, "single", f"P={p}")
        if unrolled:
            res[f"B3 P={p} unrolled"] = median_ratio(times, "single", f"P={p} unrolled")
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--populations", default="2,4,8")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-unrolled", action="store_true", help="skip the unrolled-members prototype")
    a = ap.parse_args(argv)
    res = es_throughput(tuple(int(p) for p in a.populations.split(",")), a.steps, a.repeats,
                        unrolled=not a.no_unrolled)
    print(f"task {res['task']}  steps {res['steps']}  ms per (population) step: "
          + "  ".join(f"{k} {v:.3f}" for k, v in res["ms_per_step"].items()))
    print("  " + "  ".join(f"{k} {v:.2f}" for k, v in res.items() if k.startswith("B3")))
    return res


if __name__ == "__main__":
    main()
