"""Profile of B1's excess: the L2E meta-model MLP on its own.

Usage: python -m bench.meta_mlp [--sizes 3454,32254] [--repeats 7]
       taskset -c 0 python -m bench.meta_mlp      (the same on one core: is XLA:CPU using both?)

Times, in µs per call (median over repeats, jitted, interleaved), at each number of coordinates d:
  mlp     : both passes of the fused L2E step's MLP (shared first layer P = F·W1 + b1 of 8 features, then per
            pass `l2e.l2e.mlp_from_preactivation`; pass 2 only the β column), as in the L2E step;
  layer   : one 32 × 32 layer with bias and ReLU on (d, 32) activations (its GFLOP/s is printed).
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax

from bench.inner_loop import default_meta_params
from l2e.l2e import mlp_from_preactivation
from l2e.meta_model import mlp_layers


def two_pass_mlp(meta_params, feats: jax.Array) -> jax.Array:
    """feats (d, 9), momentum in column 8 → β of pass 2, (d,)."""
    (w1, b1), *_ = mlp_layers(meta_params)
    pre = feats[:, :8] @ w1[:8] + b1
    r = feats[:, 8]
    alpha_beta = mlp_from_preactivation(meta_params, pre, r, slice(0, 2))
    return mlp_from_preactivation(meta_params, pre, r + 1e-3 * alpha_beta[:, 1], slice(1, 2))[:, 0]


def profile(d: int, repeats: int = 7, calls: int = 200, meta_params=None) -> dict:
    phi = meta_params if meta_params is not None else default_meta_params()
    (_, _), (w2, b2), _ = mlp_layers(phi)
    feats = jax.random.normal(jax.random.PRNGKey(0), (d, 9))
    h = jax.random.normal(jax.random.PRNGKey(1), (d, 32))
    fns = {
        "mlp": (jax.jit(lambda f: two_pass_mlp(phi, f)), feats),
        "layer": (jax.jit(lambda h: jax.nn.relu(h @ w2 + b2)), h),
    }
    for fn, arg in fns.values():
        jax.block_until_ready(fn(arg))
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, (fn, arg) in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                out = fn(arg)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t0) / calls * 1e6)
    res = {k: statistics.median(v) for k, v in times.items()}
    res["layer GFLOP/s"] = 2 * d * 32 * 32 / res["layer"] / 1e3
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="3454,32254")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args(argv)
    out, phi = {}, default_meta_params()
    for d in (int(x) for x in a.sizes.split(",")):
        r = out[d] = profile(d, a.repeats, meta_params=phi)
        print(f"d={d}: " + "  ".join(f"{k} {v:.1f}" + ("" if "GFLOP" in k else " µs") for k, v in r.items()))
    return out


if __name__ == "__main__":
    main()
