"""B1 / B2: the inner-loop cost of one L2E step.

Usage: python -m bench.inner_loop [--dataset digits] [--channels 8] [--depth 2] [--steps 200] [--repeats 7]
                                  [--breakdown] [--data-dir DIR]

All variants are compiled first, then timed *interleaved* (repeat r runs every variant once, in turn), so
machine-load drifts hit all of them alike; figures are medians over repeats of per-repeat ratios.

Variants (per-step milliseconds):
  l2e/sghmc standalone : jit(one step) called from Python once per step (the reference cost),
  l2e/sghmc chunked    : l2e.chains.run_chain, the project's inner loop (a Python loop over a jitted chunk of
                         `chunk` unrolled steps),
  l2e scan             : the same steps inside one jitted lax.scan (the known XLA:CPU hazard),
  with --breakdown also
  l2e nomlp            : L2E step with the meta-model replaced by α = 0, β = r (gradient + averages + noise),
  l2e feats            : features + per-tensor normalisation, then a linear 9→2 head instead of the MLP,
  l2e generic          : the unfused two-`meta_fn` step (l2e.l2e.mlp_meta_fn; same mathematics as the default
                         fused step, which computes the first layer once and runs on flat vectors).

B1 = l2e chunked ÷ sghmc chunked;  B2 = l2e chunked ÷ l2e standalone.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.l2e import L2EConfig, build_kernel, init as l2e_init, mlp_meta_fn
from l2e.meta_model import features, sghmc_like_meta_params
from l2e.sghmc import sghmc
from tasks import ModelSpec, Task, TaskSpec, build_task

def default_meta_params():
    """SGHMC-like meta-parameters (a 500-step jitted fit; callers compute them once and pass them on)."""
    return sghmc_like_meta_params(jax.random.PRNGKey(0))


def interleaved(fns: dict, steps: int, repeats: int) -> dict[str, list[float]]:
    """Per-step ms of each zero-argument callable (which runs `steps` steps), timed round-robin."""
    for fn in fns.values():  # compile / warm up
        jax.block_until_ready(fn())
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append((time.perf_counter() - t0) / steps * 1e3)
    return times


def median_ratio(times: dict, num: str, den: str) -> float:
    """Median over repeats of the per-repeat ratio num/den (both measured in the same round)."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def chain_runners(task: Task, kernel, state0, args, steps: int, chunk: int, batch_size: int,
                  standalone: bool = True, scan: bool = False) -> dict:
    """Zero-argument callables running `steps` steps of `kernel` (-> (state, info)), each returning the final
    state: chunked (+ standalone, scan)."""
    key = jax.random.PRNGKey(0)
    data = task.train_data
    out = {}
    sched = ChainSchedule(num_steps=steps, num_samples=1, thinning=1, batch_size=batch_size, chunk=chunk)
    chunk_fn = jax.jit(make_chunk(kernel, Task.sample_batch, batch_size, sched.chunk_length))
    out["chunked"] = lambda: run_chain(chunk_fn, state0, key, data, args, sched).state
    if standalone:
        one = jax.jit(make_chunk(kernel, Task.sample_batch, batch_size, 1))

        def run_standalone():
            s = state0
            for i in range(steps):
                s, _ = one(s, key, jnp.asarray(i, jnp.int32), data, args)
            return s

        out["standalone"] = run_standalone
    if scan:
        body_chunk = make_chunk(kernel, Task.sample_batch, batch_size, 1)

        @jax.jit
        def scanned(s, data, args):
            def body(s, i):
                return body_chunk(s, key, i, data, args)[0], None

            return jax.lax.scan(body, s, jnp.arange(steps, dtype=jnp.int32))[0]

        out["scan"] = lambda: scanned(state0, data, args)
    return out


def _nomlp_meta_fn(meta_params, grad, position, momentum, averages):
    return jax.tree.map(jnp.zeros_like, momentum), momentum


def _feats_meta_fn(meta_params, grad, position, momentum, averages):
    """Features + normalisation, then a linear 9→2 head (the first layer's first two columns)."""
    w = meta_params["Dense_0"]["kernel"][:, :2]
    out = features(grad, position, momentum, averages) @ w
    leaves, treedef = jax.tree.flatten(position)
    offs = [0]
    for x in leaves:
        offs.append(offs[-1] + x.size)
    split = lambda col: jax.tree.unflatten(
        treedef, [col[offs[i]:offs[i + 1]].reshape(x.shape) for i, x in enumerate(leaves)])
    return split(0.1 * out[:, 0]), split(0.1 * out[:, 1])


def make_task(dataset: str, channels: int, depth: int, residual: bool = False, data_dir: str | None = None,
              max_train: int = 2000) -> Task:
    return build_task(TaskSpec(dataset, ModelSpec("cnn", channels=channels, depth=depth, residual=residual),
                               data_dir=data_dir, max_train=max_train))


def step_costs(task: Task, steps: int = 200, repeats: int = 7, chunk: int = 2, batch_size: int = 64,
               scan: bool = True, breakdown: bool = False, meta_params=None, variants: tuple[str, ...] = ()) -> dict:
    """Per-step ms of every variant (medians) and the B1 / B2 ratios (medians of per-round ratios)."""
    theta = task.init_params(jax.random.PRNGKey(1))
    phi = meta_params if meta_params is not None else default_meta_params()
    cfg = L2EConfig(alpha_scale=0.1, beta_scale=0.1)
    sg = sghmc(task.posterior, learning_rate=0.05, friction=15.0)
    s_l2e = l2e_init(theta)
    fns = {}
    for k, f in chain_runners(task, build_kernel(task.posterior, cfg), s_l2e, phi, steps, chunk, batch_size,
                              scan=scan).items():
        fns[f"l2e {k}"] = f
    for k, f in chain_runners(task, lambda key, s, b, _: sg.step(key, s, b), sg.init(theta), None, steps, chunk,
                              batch_size).items():
        fns[f"sghmc {k}"] = f
    all_variants = {
        "nomlp": lambda: build_kernel(task.posterior, cfg, _nomlp_meta_fn),
        "feats": lambda: build_kernel(task.posterior, cfg, _feats_meta_fn),
        "generic": lambda: build_kernel(task.posterior, cfg, mlp_meta_fn(cfg.alpha_scale, cfg.beta_scale)),
    }
    variants = tuple(all_variants) if breakdown else tuple(variants)
    if variants:
        for name in variants:
            kern = all_variants[name]()
            fns[f"l2e {name}"] = chain_runners(task, kern, s_l2e, phi, steps, chunk, batch_size,
                                               standalone=False)["chunked"]
    times = interleaved(fns, steps, repeats)
    res = {
        "task": task.spec.name,
        "d": sum(x.size for x in jax.tree.leaves(theta)),
        "batch_size": batch_size,
        "ms": {k: statistics.median(v) for k, v in times.items()},
        "B1": median_ratio(times, "l2e chunked", "sghmc chunked"),
        "B2": median_ratio(times, "l2e chunked", "l2e standalone"),
        "sghmc chunked/standalone": median_ratio(times, "sghmc chunked", "sghmc standalone"),
    }
    if scan:
        res["scan/standalone"] = median_ratio(times, "l2e scan", "l2e standalone")
    if variants:
        for name in variants:
            res[f"{name}/sghmc"] = median_ratio(times, f"l2e {name}", "sghmc chunked")
    return res


def check_fused(task: Task, steps: int = 5, meta_params=None) -> float:
    """Max |Δ| between the default (fused) L2E step and the generic two-`meta_fn` step after `steps` steps."""
    cfg = L2EConfig(alpha_scale=0.1, beta_scale=0.1)
    phi = meta_params if meta_params is not None else default_meta_params()
    s_ref = s_fus = l2e_init(task.init_params(jax.random.PRNGKey(1)))
    generic = build_kernel(task.posterior, cfg, mlp_meta_fn(cfg.alpha_scale, cfg.beta_scale))
    ref = jax.jit(make_chunk(generic, Task.sample_batch, 64, 1))
    fus = jax.jit(make_chunk(build_kernel(task.posterior, cfg), Task.sample_batch, 64, 1))
    key = jax.random.PRNGKey(3)
    for i in range(steps):
        s_ref, _ = ref(s_ref, key, jnp.asarray(i, jnp.int32), task.train_data, phi)
        s_fus, _ = fus(s_fus, key, jnp.asarray(i, jnp.int32), task.train_data, phi)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), (s_ref.position, s_ref.momentum),
                                         (s_fus.position, s_fus.momentum)))
    return float(max(diffs))


def report(res: dict) -> None:
    print(f"task {res['task']}  d={res['d']}  batch {res['batch_size']}  backend {jax.default_backend()}")
    print("  per-step ms: " + "  ".join(f"{k} {v:.3f}" for k, v in res["ms"].items()))
    print("  " + "  ".join(f"{k} {v:.2f}" for k, v in res.items() if isinstance(v, float)))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--residual", action="store_true")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--check", action="store_true", help="also check the fused step against the generic one")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--variants", default="", help="comma-separated extra variants, e.g. bf16,nomlp")
    a = p.parse_args(argv)
    task = make_task(a.dataset, a.channels, a.depth, a.residual, a.data_dir)
    phi = default_meta_params()
    if a.check:
        print(f"fused vs generic step, max |Δ| after 5 steps: {check_fused(task, meta_params=phi):.3g}")
    res = step_costs(task, a.steps, a.repeats, a.chunk, a.batch_size, breakdown=a.breakdown, meta_params=phi,
                     variants=tuple(v for v in a.variants.split(",") if v))
    report(res)
    return res


if __name__ == "__main__":
    main()
