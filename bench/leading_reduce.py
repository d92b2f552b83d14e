"""The XLA:CPU hazard behind l2e.reductions: a sum over a large array's leading axis, as `jnp.sum(x, axis=0)` and as
l2e.reductions.chain_sum (the chains added one by one; a fori_loop beyond UNROLL chains).

Usage: python -m bench.leading_reduce [--shapes 4x784x256,16x784x256] [--calls 20] [--repeats 11] [--json FILE]

Each row times the jitted forms side by side in the same rounds (`calls` calls per round, median over rounds of the
paired ratio). chain_sum is the same sum to float32 rounding (tests/test_reductions.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from bench.stats import median_ratio
from l2e.reductions import chain_sum

__all__ = ["measure", "main"]


def _forms(shape: tuple[int, ...]) -> tuple[dict, tuple]:
    forms = {"sum axis 0": jax.jit(lambda x, keep: jnp.sum(x, axis=0)), "chain_sum": jax.jit(chain_sum)}
    return forms, (jax.random.normal(jax.random.PRNGKey(0), shape), jnp.ones(shape[0], bool))


def measure(shape: tuple[int, ...], calls: int = 20, repeats: int = 11) -> dict:
    """{shape, ms: {form: median ms per call}, ratio: sum axis 0 ÷ chain_sum} (module docstring)."""
    forms, args = _forms(shape)
    times = {name: [] for name in forms}
    for f in forms.values():
        jax.block_until_ready(f(*args))
    for _ in range(repeats):
        for name, f in forms.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                out = f(*args)
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t0) / calls)
    return {"shape": list(shape), "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "ratio": median_ratio(times["sum axis 0"], times["chain_sum"])}


def markdown(results: list[dict]) -> str:
    lines = ["| shape | sum axis 0 ms | chain_sum ms | ratio |", "|---" * 4 + "|"]
    for r in results:
        ms = r["ms"]
        lines.append(f"| {'×'.join(map(str, r['shape']))} | {ms['sum axis 0']:.3f} | {ms['chain_sum']:.3f} | "
                     f"{r['ratio']:.1f} |")
    return "\n".join(lines)


def _shape(text: str) -> tuple[int, ...]:
    dims = tuple(int(d) for d in text.split("x"))
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(text)
    return dims


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.leading_reduce", description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="4x784x256,4x256x10,16x784x256,64x784x256",
                   help="comma-separated MxD1x… shapes")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    try:
        shapes = [_shape(s) for s in a.shapes.split(",") if s]
    except ValueError as e:
        print(f"error: bad shape {str(e)!r} (want M x D1 x …, e.g. 4x784x256)", file=sys.stderr)
        return 2
    if a.calls < 1 or a.repeats < 1:
        print("error: need --calls >= 1 and --repeats >= 1", file=sys.stderr)
        return 2
    results = [measure(s, a.calls, a.repeats) for s in shapes]
    print(markdown(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "jax": jax.__version__, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
