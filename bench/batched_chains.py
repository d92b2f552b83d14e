"""Chains in batches: the cost of one update of M vmapped chains ÷ one chain, and of a 9-point grid in one program
÷ nine runs, per model family and sampler (issue "chains in batches"; the L2E paper's Table 15 setting on a GPU).

Usage: python -m bench.batched_chains [--family mlp32-digits,cnn-digits,...] [--chains 1,10,100]
                                      [--samplers sghmc,mass,...] [--calls 10] [--repeats 5] [--json FILE]

Families (random inputs and labels of the task's shapes, one minibatch per chain; bench.step_cost's harness):
  mlp32-digits  digits/mlp-32: 8×8 inputs → 32 → 10, batch 64, N = 1,437
  cnn-digits    the digits CNN cnn-c8-d2 on 8×8 inputs, batch 64 (bench.step_cost's cnn-digits)
  resnet20      ResNet20-FRN-Swish on 32×32×3 (CIFAR-shaped synthetic input), batch 128: only on a GPU or when named

Per family, sampler and M (all compiled first, then timed round-robin, each round running every program once):
  ms/update    : wall time of one update of all M chains (`calls` chained calls of jit(vmap(step)), state fed
                 back, each chain its own minibatch and key);
  ÷ M = 1      : median over rounds of (time at M ÷ time at M = 1 of the same sampler, same round) — the per-update
                 cost of running M chains at once against one chain (M = 10 at ≤ 2 on the MLP is the CPU goal);
  ÷ SGHMC      : median over rounds of (the sampler's time ÷ SGHMC's at the same M) — the paper's Table 15 ratio.
Grid (SGHMC's build_kernel with lr and friction traced): the 9 points of the default 3 × 3 grid vmapped in one
program ÷ 9 × the one-point program (the nine runs, which compile once and run one after another).
Learned samplers: the shipped checkpoints named in --samplers ("mass", "paper-form", "transient" — the default —,
…); a sampler with phase kernels (Transient-L2E) is timed with its burn-in kernel, and "<name> (window)" with its
window kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

import l2e
from bench.stats import fmt, median_ratio
from bench.step_cost import FAMILIES as STEP_FAMILIES, Family, _task_model, interleaved, make_problem
from l2e.checkpoint import SHIPPED, load_meta_params, sampler_kind
from l2e.learned import REGISTRY
from l2e.types import SamplingAlgorithm

FAMILIES = {f.name: f for f in (
    Family("mlp32-digits", _task_model("mlp", hidden=(32,)), (8, 8, 1), 64, 1437),
    STEP_FAMILIES["cnn-digits"],
    STEP_FAMILIES["resnet20"],
)}
DEFAULT_SAMPLERS = ("sghmc", "mass", "paper-form", "transient")
GRID = tuple((lr, c) for lr in (0.01, 0.03, 0.1) for c in (3.0, 10.0, 30.0))
"""SGHMC's default grid (evaluate.methods.sghmc): lr = ε²N × friction C."""


def default_families() -> list[str]:
    return [n for n, f in FAMILIES.items() if not f.gpu_only or jax.default_backend() != "cpu"]


def _learned(name: str, post, window: bool = False) -> SamplingAlgorithm:
    """The drop-in step of shipped checkpoint `name`; with phase kernels, the burn-in (or window) kernel."""
    params, config, meta = load_meta_params(name)
    entry = REGISTRY[sampler_kind(meta)]
    if entry.phase_of is None:
        return entry.factory(post, params, config)
    phase = "window" if window else "burn_in"
    if window:
        config = entry.sampling_config(config, 1)  # frozen from update 1 (Protocol.window)
    kernel = entry.kernel(post, config, phase)
    return SamplingAlgorithm(entry.init, lambda key, state, batch: kernel(key, state, batch, params))


def sampler(name: str, post) -> SamplingAlgorithm:
    if name == "sghmc":
        return l2e.sghmc(post, 0.05, 15.0)
    base, window = (name[:-len(" (window)")], True) if name.endswith(" (window)") else (name, False)
    if base not in SHIPPED:
        raise ValueError(f"unknown sampler {name!r} (known: sghmc, {', '.join(SHIPPED)}, '<shipped> (window)')")
    return _learned(base, post, window)


def _chain_inputs(fam: Family, theta, m: int, seed: int = 1):
    """M perturbed copies of θ₀, M minibatches of the family's shapes, M keys."""
    kx, ky, kt, kk = jax.random.split(jax.random.PRNGKey(seed), 4)
    x = jax.random.normal(kx, (m, fam.batch) + fam.input_shape)
    y = jax.random.randint(ky, (m, fam.batch), 0, 10)
    leaves, tree = jax.tree.flatten(theta)
    noise = jax.random.split(kt, len(leaves))
    thetas = jax.tree.unflatten(tree, [l[None] + 0.01 * jax.random.normal(k, (m,) + l.shape, l.dtype)
                                       for l, k in zip(leaves, noise)])
    return thetas, (x, y), jax.random.split(kk, m)


def _chained(step, state, keys, batch, calls: int):
    """Zero-argument callable: `calls` chained calls of the compiled vmapped step."""
    jitted = jax.jit(step)
    compiled = jitted.lower(keys, state, batch).compile()

    def run():
        s = state
        for _ in range(calls):
            s, _ = compiled(keys, s, batch)
        return s

    try:
        jax.block_until_ready(run())
    except TypeError:  # weak-typed outputs: fall back to the jitted function
        compiled = jitted
    return run


def measure_family(fam: Family, samplers, chains, calls: int, repeats: int, grid: bool = True) -> dict:
    post, _, theta, _ = make_problem(fam)
    fns, built, failed = {}, {}, {}
    for name in samplers:
        try:
            built[name] = sampler(name, post)
        except Exception as e:  # reported, not timed
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    for m in chains:
        thetas, batch, keys = _chain_inputs(fam, theta, m)
        for name, alg in built.items():
            state = jax.vmap(alg.init)(thetas)
            try:
                fns[(name, m)] = _chained(jax.vmap(alg.step), state, keys, batch, calls)
            except Exception as e:
                failed[f"{name} M={m}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if grid:
        kernel = l2e.sghmc.build_kernel(post)
        lrs = jnp.asarray([p[0] for p in GRID], jnp.float32)
        cs = jnp.asarray([p[1] for p in GRID], jnp.float32)
        thetas, batch, keys = _chain_inputs(fam, theta, len(GRID))
        state = jax.vmap(l2e.sghmc.init)(thetas)
        gstep = jax.vmap(lambda k, s, b, lr, c: kernel(k, s, b, lr, c))
        fns[("grid", 9)] = _chained(lambda k, s, b: gstep(k, s, b, lrs, cs), state, keys, batch, calls)
        one = jax.tree.map(lambda v: v[:1], (state, batch, keys))
        fns[("grid", 1)] = _chained(lambda k, s, b: gstep(k, s, b, lrs[:1], cs[:1]), one[0], one[2], one[1], calls)
    times = interleaved(fns, repeats)
    rows = []
    for (name, m), ts in times.items():
        if name == "grid":
            continue
        rows.append({"sampler": name, "chains": m, "ms": statistics.median(ts) / calls * 1e3,
                     "per_update_vs_one": median_ratio(ts, times[(name, min(chains))]) if (name, min(chains)) in times
                     else None,
                     "vs_sghmc": median_ratio(ts, times[("sghmc", m)]) if ("sghmc", m) in times else None})
    out = {"family": fam.name, "d": int(sum(x.size for x in jax.tree.leaves(theta))), "batch": fam.batch,
           "calls": calls, "repeats": repeats, "rows": rows, "failed": failed}
    if grid:
        out["grid"] = {"points": len(GRID), "ms_one_program": statistics.median(times[("grid", 9)]) / calls * 1e3,
                       "ms_nine_runs": 9 * statistics.median(times[("grid", 1)]) / calls * 1e3,
                       "ratio": median_ratio(times[("grid", 9)], [9 * t for t in times[("grid", 1)]])}
    return out


def markdown(results: list[dict]) -> str:
    lines = [f"backend {jax.default_backend()} ({jax.devices()[0].device_kind})", "",
             "| family | d | batch | sampler | M | ms / update (all M) | ÷ M = 1 | ÷ SGHMC (same M) |",
             "|" + "---|" * 8]
    for r in results:
        for row in r["rows"]:
            lines.append(f"| {r['family']} | {r['d']:,} | {r['batch']} | {row['sampler']} | {row['chains']} "
                         f"| {fmt(row['ms'], '.3f')} | {fmt(row['per_update_vs_one'])} | {fmt(row['vs_sghmc'])} |")
    lines += ["", "| family | 9-point SGHMC grid: one program ms | nine runs ms | ratio |", "|---|---|---|---|"]
    for r in results:
        if "grid" in r:
            g = r["grid"]
            lines.append(f"| {r['family']} | {fmt(g['ms_one_program'], '.3f')} | {fmt(g['ms_nine_runs'], '.3f')} "
                         f"| {fmt(g['ratio'])} |")
    failed = [f"{r['family']}: {n} ({why})" for r in results for n, why in r.get("failed", {}).items()]
    if failed:
        lines += ["", "not measured: " + "; ".join(failed)]
    return "\n".join(lines)


def run(families=None, samplers=DEFAULT_SAMPLERS, chains=(1, 10, 100), calls=10, repeats=5, json_path=None,
        emit=print, grid: bool = True) -> dict:
    t0 = time.perf_counter()
    results = []
    out = {}
    for name in families or default_families():
        tf = time.perf_counter()
        try:
            results.append(measure_family(FAMILIES[name], samplers, chains, calls, repeats, grid))
        except Exception as e:  # one family's failure (e.g. device memory) does not lose the others
            results.append({"family": name, "rows": [], "failed": {"all": f"{type(e).__name__}: {e}"[:300]}})
        emit(f"{name}: done in {time.perf_counter() - tf:.0f} s")
        out = {"backend": jax.default_backend(), "device": str(jax.devices()[0]), "jax": jax.__version__,
               "loadavg": list(os.getloadavg()), "families": results, "table": markdown(results),
               "seconds": time.perf_counter() - t0}
        if json_path:  # after every family: a run stopped at its limit keeps what it measured
            with open(json_path, "w") as f:
                json.dump(out, f, indent=1, default=float)
    emit(out.get("table", ""))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.batched_chains", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="", help=f"comma-separated, of {', '.join(FAMILIES)}")
    ap.add_argument("--samplers", default=",".join(DEFAULT_SAMPLERS))
    ap.add_argument("--chains", default="1,10,100")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-grid", action="store_true", help="skip the 9-point grid measurement")
    a = ap.parse_args(argv)
    split = lambda s: tuple(x.strip() for x in s.split(",") if x.strip())
    fams = split(a.family)
    for f in fams:
        if f not in FAMILIES:
            ap.error(f"unknown family {f!r} (known: {', '.join(FAMILIES)})")
    try:
        chains = tuple(int(c) for c in split(a.chains))
    except ValueError:
        ap.error(f"--chains must be comma-separated integers, got {a.chains!r}")
    if not chains or not all(1 <= c <= 10_000 for c in chains):
        ap.error("--chains must hold integers between 1 and 10000")
    for flag in ("calls", "repeats"):
        if not 1 <= getattr(a, flag) <= 10_000:
            ap.error(f"--{flag} must be between 1 and 10000, got {getattr(a, flag)}")
    return run(list(fams) or None, split(a.samplers), tuple(sorted(set(chains))), a.calls, a.repeats, a.json,
               grid=not a.no_grid)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
