"""Issue 39, item 5: the cost of one Policy-L2E update of M chains ÷ M SGHMC updates, per phase, on the bench
families of bench.step_cost (random data of the right shapes).

Usage: python -m bench.policy_step_cost [--family mlp,cnn-digits,...] [--chains 4] [--calls 10] [--repeats 7]
                                        [--chunk 1] [--no-donate] [--track-noise] [--track-every 1]
                                        [--json FILE]

Policy-L2E (l2e.policy) runs its M chains in one state, one minibatch per chain; its rival here is SGHMC's step
vmapped over the same M chains and minibatches (the form the evaluation's batched runs take). Rows, each timed at an
update index inside the phase it names (freeze_step 300, 3 phases: adaptation points at 100, 200, 300, gathering
windows from 50, 150, 250), `calls` chained calls per round, round-robin with SGHMC's in the same rounds; time ÷
SGHMC is the median over rounds of the paired ratio. Both sides' states are donated to each call (as the evaluation
runs Policy-L2E's chunks: its state holds 7 per-chain trees of θ's size, which a call without donation copies
whole, fields it leaves unchanged included); --no-donate times both without (this bench's first form). --chunk N:
each call runs N updates unrolled (the same minibatch), both sides, through the evaluation's chunks
(l2e.chains.make_chunk; ChainSchedule.chunk, 10 by default); 1 (the default) one update per call. --track-noise:
Policy-L2E with PolicyConfig.track_noise (two half-batch gradients and each chain's noise gain in every SGHMC
update, not only in the gathering windows); --track-every K: with it, PolicyConfig.track_every (the gains refreshed
on every K-th update only, l2e.policy.chunk_kernels' kernels per offset where K divides --chunk). Each row
also gives XLA's temporary buffer per call (MB; `temp_mb`): on glibc a buffer above 32 MB is mapped fresh at every
call and its pages faulted in, which the measured gathering windows pay (docs/results.md, "Step cost"). Rows:
  phase 0               pSGLD (RMSprop Langevin), outside its gathering window
  phase 0 (gather)      the same with the statistics gathered: two half-batch gradients
  SGHMC phase           an adapted SGHMC phase outside its gathering window
  SGHMC phase (gather)  inside it
  window                the frozen window after the freeze
  adaptation point      the update at an adaptation point (its Hessian-vector products are counted as gradients by
                        l2e.policy.adaptation_gradients; here its time, once per phase)
FLOPs ÷ SGHMC: XLA's cost analysis of the compiled steps (of the general kernel's, at the adaptation point, every
branch is counted, the one taken or not).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import jax
import jax.numpy as jnp

from bench.stats import fmt, median_ratio
from bench.step_cost import FAMILIES, baseline, default_families, interleaved, make_problem, runner
from l2e import policy as P
from l2e.chains import make_chunk

__all__ = ["PHASE_STEPS", "measure", "main"]

PHASE_STEPS = {"phase 0": ("psgld", 10), "phase 0 (gather)": ("psgld_gather", 60), "SGHMC phase": ("sghmc", 110),
               "SGHMC phase (gather)": ("sghmc_gather", 160), "window": ("sghmc", 310),
               "adaptation point": (None, 200)}
"""Row: (the phase kernel the evaluation runs there, l2e.policy.chunk_phase; None the general kernel, the update
index timed from)."""
FREEZE = 300


def chunked(step, length: int):
    """The step (key, state, batch) -> (state, info) run `length` times in one call as the evaluation's chunks run
    it (l2e.chains.make_chunk, here over one fixed minibatch: update i's key split from the call's key folded with
    i; the infos stacked); length 1: the step itself. A tuple of steps: update i runs step i modulo their number
    (make_chunk's periodic kernel)."""
    steps = step if isinstance(step, tuple) else (step,)
    if length == 1 and len(steps) == 1:
        return steps[0]
    chunk = make_chunk(tuple(lambda key, state, batch, _, s=s: s(key, state, batch) for s in steps),
                       lambda key, data, size: data, 0, length)
    return lambda key, state, batch: chunk(state, key, 0, batch, None)


def measure(family: str, chains: int = 4, calls: int = 10, repeats: int = 7, donate: bool = True,
            chunk: int = 1, track_noise: bool = False, track_every: int = 1) -> dict:
    """{family, d, chains, chunk, rows: [{row, ms, time_ratio, flop_ratio, temp_mb}]} (module docstring); ms and
    the ratios per update."""
    fam = FAMILIES[family]
    post, fpost, theta, batch = make_problem(fam)
    stack = lambda tree: jax.tree.map(lambda v: jnp.broadcast_to(v, (chains,) + v.shape), tree)  # noqa: E731
    thetas, batches = stack(theta), stack(batch)
    keys = jax.random.split(jax.random.PRNGKey(3), chains)
    sghmc = baseline("sghmc", post, fpost)
    fns, flops = {}, {}
    step = (jax.vmap(sghmc.step) if chunk == 1 else
            lambda k, st, b: jax.vmap(sghmc.step)(jax.random.split(k, chains), st, b))
    fns["sghmc"], flops["sghmc"] = runner(chunked(step, chunk), (keys if chunk == 1 else jax.random.PRNGKey(3),
                                                                  jax.vmap(sghmc.init)(thetas), batches),
                                          calls, chained=True, donate=donate)
    phi = P.load_meta_params("shipped")
    config = P.PolicyConfig(freeze_step=FREEZE, track_noise=track_noise, track_every=track_every)
    state0 = P.init(thetas)._replace(eps=jnp.asarray(1e-3, jnp.float32))
    for row, (phase, step) in PHASE_STEPS.items():
        n = 1 if row == "adaptation point" else calls  # the point is one update; its row times it alone
        length = 1 if row == "adaptation point" else chunk
        steps = tuple(lambda k, st, b, kernel=kernel: kernel(k, st, b, phi)
                      for kernel in P.chunk_kernels(post, config, phase, length))  # the evaluation's (l2e.policy)
        fns[row], flops[row] = runner(chunked(steps, length), (
            jax.random.PRNGKey(4), state0._replace(step=jnp.asarray(step, jnp.int32)), batches), n, chained=True,
            donate=donate and row != "adaptation point")  # the point's row restarts there every round
    times = interleaved(fns, repeats)
    rows, per = [], calls * chunk  # updates per round (SGHMC's and every phase row's)
    mb = lambda name: None if fns[name].temp_bytes is None else fns[name].temp_bytes / 2**20  # noqa: E731
    for row in PHASE_STEPS:
        n = 1 if row == "adaptation point" else per
        length = 1 if row == "adaptation point" else chunk
        ratio = median_ratio([t / n for t in times[row]], [t / per for t in times["sghmc"]])
        rows.append({"row": row, "ms": statistics.median(times[row]) / n * 1e3, "time_ratio": ratio,
                     "flop_ratio": flops[row] / length / (flops["sghmc"] / chunk) if flops["sghmc"] else float("nan"),
                     "temp_mb": mb(row)})
    return {"family": family, "d": int(sum(x.size for x in jax.tree.leaves(theta))), "chains": chains, "donate": donate,
            "chunk": chunk, "track_noise": track_noise, "track_every": track_every, "batch": fam.batch,
            "sghmc_ms": statistics.median(times["sghmc"]) / per * 1e3,
            "sghmc_temp_mb": mb("sghmc"), "rows": rows}


def markdown(results: list[dict]) -> str:
    lines = ["| family | d | M | updates per call | row | ms per update of M chains | time ÷ SGHMC | FLOPs ÷ SGHMC "
             "| XLA temp buffer per call (MB) |", "|---" * 9 + "|"]
    for r in results:
        temp = lambda v: "—" if v is None else fmt(v)  # noqa: E731
        lines.append(f"| {r['family']} | {r['d']:,} | {r['chains']} | {r['chunk']} | SGHMC (vmapped) | "
                     f"{fmt(r['sghmc_ms'])} | 1.00 | 1.00 | {temp(r['sghmc_temp_mb'])} |")
        for row in r["rows"]:
            lines.append(f"| | | | | {row['row']} | {fmt(row['ms'])} | {fmt(row['time_ratio'])} | "
                         f"{fmt(row['flop_ratio'])} | {temp(row['temp_mb'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.policy_step_cost", description=__doc__.splitlines()[0])
    p.add_argument("--family", default=",".join(default_families()), help="comma-separated bench.step_cost families")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--chunk", type=int, default=1, help="updates per compiled call (the evaluation's chunks: 10)")
    p.add_argument("--no-donate", action="store_true", help="time without donating the states (the first form)")
    p.add_argument("--track-noise", action="store_true", help="Policy-L2E with PolicyConfig.track_noise")
    p.add_argument("--track-every", type=int, default=1, help="PolicyConfig.track_every (needs --track-noise)")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    families = [f for f in a.family.split(",") if f]
    bad = [f for f in families if f not in FAMILIES]
    if bad or a.chains < 2 or a.calls < 1 or a.repeats < 1 or a.chunk < 1 or a.track_every < 1:
        print(f"error: unknown family {bad[0]!r}" if bad else
              "error: need --chains >= 2, --calls >= 1, --repeats >= 1, --chunk >= 1, --track-every >= 1",
              file=sys.stderr)
        return 2
    if a.track_every > 1 and not a.track_noise:
        print("error: --track-every needs --track-noise", file=sys.stderr)
        return 2
    results = [measure(f, a.chains, a.calls, a.repeats, not a.no_donate, a.chunk, a.track_noise, a.track_every)
               for f in families]
    print(markdown(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
