"""Inner-loop cost: one L2E step inside the compiled loop vs one standalone jitted step (and vs lax.scan).

Usage: python -m bench.inner_loop [--dataset digits] [--channels 8] [--depth 2] [--steps 200] [--repeats 5]

Prints median per-step milliseconds of
  standalone : jit(one step) called from Python once per step (the reference cost),
  chunked    : l2e.chains.run_chain, the project's inner loop (a Python loop over a jitted chunk of
               `chunk` unrolled steps),
  scan       : the same steps inside one jitted lax.scan (the known XLA:CPU hazard),
and the ratios to standalone, plus L2E ÷ SGHMC per step on the same model and batch.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.l2e import L2EConfig, build_kernel, init as l2e_init
from l2e.meta_model import sghmc_like_meta_params
from l2e.sghmc import sghmc
from tasks import ModelSpec, Task, TaskSpec, build_task


def per_step_ms(fn, steps: int, repeats: int) -> float:
    fn()  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(times)


def measure(task: Task, kernel, state0, args, steps: int, chunk: int, batch_size: int, repeats: int) -> dict:
    key = jax.random.PRNGKey(0)
    data = task.train_data
    one = jax.jit(make_chunk(kernel, Task.sample_batch, batch_size, 1))

    def standalone():
        s = state0
        for i in range(steps):
            s = one(s, key, jnp.asarray(i, jnp.int32), data, args)
        return s

    sched = ChainSchedule(num_steps=steps, num_samples=1, thinning=1, batch_size=batch_size, chunk=chunk)
    chunk_fn = jax.jit(make_chunk(kernel, Task.sample_batch, batch_size, sched.chunk_length))

    def chunked():
        return run_chain(chunk_fn, state0, key, data, args, sched)[0]

    body_chunk = make_chunk(kernel, Task.sample_batch, batch_size, 1)

    @jax.jit
    def scanned(s, data, args):
        def body(s, i):
            return body_chunk(s, key, i, data, args), None

        return jax.lax.scan(body, s, jnp.arange(steps, dtype=jnp.int32))[0]

    return {
        "standalone": per_step_ms(standalone, steps, repeats),
        "chunked": per_step_ms(chunked, steps, repeats),
        "scan": per_step_ms(lambda: scanned(state0, data, args), steps, repeats),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--data-dir", default=None)
    a = p.parse_args(argv)
    task = build_task(TaskSpec(a.dataset, ModelSpec("cnn", channels=a.channels, depth=a.depth), data_dir=a.data_dir,
                               max_train=2000))
    theta = task.init_params(jax.random.PRNGKey(1))
    phi = sghmc_like_meta_params(jax.random.PRNGKey(0))
    l2e_kernel = build_kernel(task.posterior, L2EConfig(alpha_scale=0.1, beta_scale=0.1))
    sg = sghmc(task.posterior, learning_rate=0.05, friction=15.0)
    res = {
        "l2e": measure(task, l2e_kernel, l2e_init(theta), phi, a.steps, a.chunk, a.batch_size, a.repeats),
        "sghmc": measure(task, lambda k, s, b, _: sg.step(k, s, b), sg.init(theta), None, a.steps, a.chunk,
                         a.batch_size, a.repeats),
    }
    print(f"task {task.spec.name}  N={task.data_size}  batch {a.batch_size}  steps {a.steps}  chunk {a.chunk}  "
          f"backend {jax.default_backend()}")
    for name, r in res.items():
        print(f"{name:6s} per-step ms: standalone {r['standalone']:.3f}  chunked {r['chunked']:.3f}  "
              f"scan {r['scan']:.3f}  | chunked/standalone {r['chunked'] / r['standalone']:.2f}  "
              f"scan/standalone {r['scan'] / r['standalone']:.2f}")
    print(f"L2E/SGHMC per step (chunked): {res['l2e']['chunked'] / res['sghmc']['chunked']:.2f}")
    return res


if __name__ == "__main__":
    main()
