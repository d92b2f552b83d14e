"""Issue 39, item 5: the cost of one Policy-L2E update of M chains ÷ M SGHMC updates, per phase, on the bench
families of bench.step_cost (random data of the right shapes).

Usage: python -m bench.policy_step_cost [--family mlp,cnn-digits,...] [--chains 4] [--calls 10] [--repeats 7]
                                        [--no-donate] [--json FILE]

Policy-L2E (l2e.policy) runs its M chains in one state, one minibatch per chain; its rival here is SGHMC's step
vmapped over the same M chains and minibatches (the form the evaluation's batched runs take). Rows, each timed at an
update index inside the phase it names (freeze_step 300, 3 phases: adaptation points at 100, 200, 300, gathering
windows from 50, 150, 250), `calls` chained calls per round, round-robin with SGHMC's in the same rounds; time ÷
SGHMC is the median over rounds of the paired ratio. Both sides' states are donated to each call (as the evaluation
runs Policy-L2E's chunks: its state holds 7 per-chain trees of θ's size, which a call without donation copies
whole, fields it leaves unchanged included); --no-donate times both without (this bench's first form):
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

__all__ = ["PHASE_STEPS", "measure", "main"]

PHASE_STEPS = {"phase 0": ("psgld", 10), "phase 0 (gather)": ("psgld_gather", 60), "SGHMC phase": ("sghmc", 110),
               "SGHMC phase (gather)": ("sghmc_gather", 160), "window": ("sghmc", 310),
               "adaptation point": (None, 200)}
"""Row: (the phase kernel the evaluation runs there, l2e.policy.chunk_phase; None the general kernel, the update
index timed from)."""
FREEZE = 300


def measure(family: str, chains: int = 4, calls: int = 10, repeats: int = 7, donate: bool = True) -> dict:
    """{family, d, chains, rows: [{row, ms, time_ratio, flop_ratio}]} (module docstring)."""
    fam = FAMILIES[family]
    post, fpost, theta, batch = make_problem(fam)
    stack = lambda tree: jax.tree.map(lambda v: jnp.broadcast_to(v, (chains,) + v.shape), tree)  # noqa: E731
    thetas, batches = stack(theta), stack(batch)
    keys = jax.random.split(jax.random.PRNGKey(3), chains)
    sghmc = baseline("sghmc", post, fpost)
    fns, flops = {}, {}
    fns["sghmc"], flops["sghmc"] = runner(jax.vmap(sghmc.step), (keys, jax.vmap(sghmc.init)(thetas), batches),
                                          calls, chained=True, donate=donate)
    phi, config = P.load_meta_params("shipped"), P.PolicyConfig(freeze_step=FREEZE)
    state0 = P.init(thetas)._replace(eps=jnp.asarray(1e-3, jnp.float32))
    for row, (phase, step) in PHASE_STEPS.items():
        kernel = P.build_kernel(post, config, phase)
        n = 1 if row == "adaptation point" else calls  # the point is one update; its row times it alone
        fns[row], flops[row] = runner(lambda k, st, b, kernel=kernel: kernel(k, st, b, phi), (
            jax.random.PRNGKey(4), state0._replace(step=jnp.asarray(step, jnp.int32)), batches), n, chained=True,
            donate=donate and row != "adaptation point")  # the point's row restarts there every round
    times = interleaved(fns, repeats)
    rows = []
    for row in PHASE_STEPS:
        n = 1 if row == "adaptation point" else calls
        ratio = median_ratio([t / n for t in times[row]], [t / calls for t in times["sghmc"]])
        rows.append({"row": row, "ms": statistics.median(times[row]) / n * 1e3, "time_ratio": ratio,
                     "flop_ratio": flops[row] / flops["sghmc"] if flops["sghmc"] else float("nan")})
    return {"family": family, "d": int(sum(x.size for x in jax.tree.leaves(theta))), "chains": chains, "donate": donate,
            "batch": fam.batch, "sghmc_ms": statistics.median(times["sghmc"]) / calls * 1e3, "rows": rows}


def markdown(results: list[dict]) -> str:
    lines = ["| family | d | M | row | ms per update of M chains | time ÷ SGHMC | FLOPs ÷ SGHMC |", "|---" * 7 + "|"]
    for r in results:
        lines.append(f"| {r['family']} | {r['d']:,} | {r['chains']} | SGHMC (vmapped) | {fmt(r['sghmc_ms'])} | 1.00 "
                     "| 1.00 |")
        for row in r["rows"]:
            lines.append(f"| | | | {row['row']} | {fmt(row['ms'])} | {fmt(row['time_ratio'])} | "
                         f"{fmt(row['flop_ratio'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.policy_step_cost", description=__doc__.splitlines()[0])
    p.add_argument("--family", default=",".join(default_families()), help="comma-separated bench.step_cost families")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-donate", action="store_true", help="time without donating the states (the first form)")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    families = [f for f in a.family.split(",") if f]
    bad = [f for f in families if f not in FAMILIES]
    if bad or a.chains < 2 or a.calls < 1 or a.repeats < 1:
        print(f"error: unknown family {bad[0]!r}" if bad else "error: need --chains >= 2, --calls >= 1, --repeats >= 1",
              file=sys.stderr)
        return 2
    results = [measure(f, a.chains, a.calls, a.repeats, not a.no_donate) for f in families]
    print(markdown(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
