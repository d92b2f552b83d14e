"""B1 per model family: the cost of one step of every sampler relative to SGHMC's, on synthetic data.

Usage: python -m bench.step_cost [--family mlp,dense-cnn,...] [--samplers sghmc,l2e,...] [--calls 10]
                                 [--repeats 7] [--json FILE] [--variants f32-T,bf16,...]
       python -m bench --only step_cost [--family ...]          (the same, through the bench CLI)

Families (random data of the right shapes, fixed minibatch; parameters from the module's init):
  mlp           784 → 256 → 256 → 10 (269,322 parameters), MNIST-shaped inputs, batch 128
  fmnist-1conv  the evaluation's Fashion-MNIST net (tasks.models "fmnist_1conv"), batch 128
  dense-cnn     28×28: conv 16 → pool → conv 32 → pool → 1568×64 dense → 64×10 head (105,866), batch 128
  cnn-digits    bench B1's digits CNN cnn-c8-d2 on 8×8 inputs, batch 64
  cnn-mnist     bench B1's MNIST CNN cnn-c8-d2 on 28×28 inputs, batch 128
  resnet20      ResNet20-FRN-Swish on 32×32×3, batch 128: only on a GPU or when asked with --family

Per sampler (all compiled first, then timed round-robin, each round running every sampler once):
  time ÷ SGHMC : median over rounds of (ms per step ÷ SGHMC's ms per step in the same round); a round times
                 `calls` chained calls of the jitted step (state fed back, from the same start every round);
  FLOPs ÷ SGHMC: XLA's cost analysis of the compiled steps (`jit(step).lower(...).compile().cost_analysis()`);
  meta-model   : learned samplers only, the meta-model alone (bench.meta_variants.meta_probe: the paper-form
                 L2E's two MLP passes on (d, 9) features; Kinetic-L2E's μ-MLP forward + vector–Jacobian
                 product), timed in the same rounds: its ms, GFLOP/s (its cost-analysis FLOPs ÷ its time) and
                 that as a fraction of this machine's measured f32 GEMM throughput (`gemm_gflops`, once per run).
Learned samplers: every shipped checkpoint by its own name (`l2e.checkpoint.SHIPPED` less "default") and every kind of
the learned-sampler registry (`l2e.learned.REGISTRY`) with no shipped checkpoint (its "random" φ₀, default config).
A sampler with phase kernels (`LearnedSampler.phase_of`: Transient-L2E) is timed with the kernels the evaluation
runs: the burn-in kernel in its own row, the adaptation window's (two half-batch gradients) in its "(adapt)" row,
the window kernel in its "(window)" row.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import l2e
from bench.stats import fmt, median_ratio
from l2e.checkpoint import SHIPPED, load_meta_params, resolve_step_dir, sampler_kind, shipped_checkpoint
from l2e.learned import REGISTRY
from l2e.types import SamplingAlgorithm

def _step_cost_rows() -> dict[str, str]:
    """{row label: method name} of every registered method's step-cost probe (Method.step_cost), SGHMC first."""
    from evaluate.methods.registry import REGISTRY

    post = l2e.Posterior(lambda p, b: jnp.sum(p["w"] ** 2), lambda p: -jnp.sum(p["w"] ** 2), 10)
    fpost = _probe_fpost(post)
    rows = {}
    for name, m in REGISTRY.items():
        if m.step_cost is not None:
            rows.update({label: name for label in m.step_cost(post, fpost)})
    return {"sghmc": rows.pop("sghmc"), **rows}


def _probe_fpost(post):
    """A functional posterior for listing rows only (nothing is run on it)."""
    logits = lambda p, xs: xs @ p["w"]  # noqa: E731
    return l2e.fsghmc.functional_posterior(logits, post.nll, lambda key, b: b[0], l2e.fsghmc.rbf_kernel(1.0), 10)


_ROWS = _step_cost_rows()
BASELINES = tuple(_ROWS)
"""The hand-designed steps timed: the rows of every registered method's Method.step_cost (SGHMC first); "(window)"
rows time a sampler that adapts in burn-in after its freeze (the timed calls start at update 0, so the plain row is
the burn-in step); preconditioned SGHMC with its phase kernels (burn-in, adaptation window, window), as the
evaluation runs it."""


class DenseHeadCNN(nn.Module):
    """The issue-15 user model: conv 16 → ReLU → 2×2 pool → conv 32 → ReLU → 2×2 pool → Dense 64 → Dense 10."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        for ch in (16, 32):
            x = nn.max_pool(nn.relu(nn.Conv(ch, (3, 3), padding="SAME")(x)), (2, 2), strides=(2, 2))
        x = nn.relu(nn.Dense(64)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.num_classes)(x)


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    batch: int
    data_size: int
    gpu_only: bool = False


def _task_model(kind: str, **kw):
    from tasks.models import ModelSpec, build_model

    return lambda: build_model(ModelSpec(kind, **kw), 10)


FAMILIES = {f.name: f for f in (
    Family("mlp", _task_model("mlp", hidden=(256, 256)), (28, 28, 1), 128, 60000),
    Family("fmnist-1conv", _task_model("fmnist_1conv"), (28, 28, 1), 128, 60000),
    Family("dense-cnn", DenseHeadCNN, (28, 28, 1), 128, 60000),
    Family("cnn-digits", _task_model("cnn", channels=8, depth=2), (8, 8, 1), 64, 1437),
    Family("cnn-mnist", _task_model("cnn", channels=8, depth=2), (28, 28, 1), 128, 60000),
    Family("resnet20", _task_model("resnet20_frn"), (32, 32, 3), 128, 50000, gpu_only=True),
)}


def default_families() -> list[str]:
    """Every family, ResNet20-FRN only when the default backend is not the CPU."""
    return [n for n, f in FAMILIES.items() if not f.gpu_only or jax.default_backend() != "cpu"]


def make_problem(fam: Family, seed: int = 0):
    """(posterior, functional posterior, θ₀, minibatch) on random inputs / labels of the family's shapes."""
    module = fam.build()
    kx, ky, kp = jax.random.split(jax.random.PRNGKey(seed), 3)
    x = jax.random.normal(kx, (fam.batch,) + fam.input_shape)
    y = jax.random.randint(ky, (fam.batch,), 0, 10)
    theta = module.init(kp, x[:1])["params"]

    def logits(p, xs):
        return module.apply({"params": p}, xs)

    def nll(p, batch):
        xs, ys = batch
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(p, xs)), ys[:, None], axis=1))

    def log_prior(p):
        return -0.5 * sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(p))

    post = l2e.Posterior(nll, log_prior, fam.data_size)

    def measurement_points(key, batch):  # 40 random inputs per update (evaluate's classification rule)
        return batch[0][jax.random.choice(key, batch[0].shape[0], (40,), replace=False)]

    fpost = l2e.fsghmc.functional_posterior(logits, nll, measurement_points,
                                            l2e.fsghmc.rbf_kernel(float(np.sqrt(x[0].size))), fam.data_size,
                                            weight_log_prior=log_prior)
    return post, fpost, theta, (x, y)


def baseline(name: str, post, fpost):
    """The SamplingAlgorithm of baseline row `name` (its method's Method.step_cost; hyperparameters do not change
    the step's cost)."""
    from evaluate.methods.registry import REGISTRY

    return REGISTRY[_ROWS[name]].step_cost(post, fpost)[name]


def _step(entry, post, params, config, phase: str):
    """The drop-in step of a learned sampler, or, for one with phase kernels (LearnedSampler.phase_of), the kernel
    the evaluation runs in that phase (no per-update branch; the window kernel's cost does not depend on whether
    the constants are frozen yet, so it is timed from update 0)."""
    if entry.phase_of is None:
        return entry.factory(post, params, config)
    kernel = entry.kernel(post, config, phase)
    return SamplingAlgorithm(entry.init, lambda key, state, batch: kernel(key, state, batch, params))


def learned_samplers(post) -> tuple[dict[str, tuple], dict[str, str]]:
    """({name: (kind, SamplingAlgorithm, meta_params, config)}, {name: why not built}): each shipped checkpoint
    once, then each registry kind without one (its "random" meta-parameters with hidden (32, 32), its default
    config)."""
    out, failed, seen_dirs, shipped_kinds = {}, {}, set(), set()
    for name in (n for n in SHIPPED if n != "default"):  # the default is one of them, by its own name
        step_dir = resolve_step_dir(shipped_checkpoint(name)).resolve()
        if step_dir in seen_dirs:
            continue
        seen_dirs.add(step_dir)
        params, config, meta = load_meta_params(name)
        kind = sampler_kind(meta)
        shipped_kinds.add(kind)
        label = "l2e (paper-form)" if name == "paper-form" else name
        out[label] = (kind, _step(REGISTRY[kind], post, params, config, "burn_in"), params, config)
        if REGISTRY[kind].phase_of is not None:  # the adaptation window's kernel (two half-batch gradients)
            out[f"{label} (adapt)"] = (kind, _step(REGISTRY[kind], post, params, config, "adapt"), params, config)
        if REGISTRY[kind].window is not None:  # the calls start in burn-in: the window (frozen from update 1) too
            window = REGISTRY[kind].sampling_config(config, 1)
            out[f"{label} (window)"] = (kind, _step(REGISTRY[kind], post, params, window, "window"), params, window)
    for kind, spec in REGISTRY.items():
        if kind in shipped_kinds:
            continue
        try:
            params = spec.init_meta_params(jax.random.PRNGKey(0), (32, 32), "random")
            config = spec.config()
            out[f"{kind} (fresh φ)"] = (kind, spec.factory(post, params, config), params, config)
        except Exception as e:  # a kind that cannot be built on this posterior: reported, not timed
            failed[f"{kind} (fresh φ)"] = f"{type(e).__name__}: {e}"
    return out, failed


def gemm_gflops(n: int | None = None, repeats: int = 5) -> dict:
    """Measured f32 GEMM throughput (n × n times n × n, jitted, each call blocked): median and best GFLOP/s."""
    n = n or (2048 if jax.default_backend() == "cpu" else 8192)
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n))
    f = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(f(a, a))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a, a))
        ts.append(time.perf_counter() - t0)
    flops = 2.0 * n**3
    return {"n": n, "median": flops / statistics.median(ts) / 1e9, "best": flops / min(ts) / 1e9}


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds per round of each zero-argument callable, compiled / warmed first, then timed round-robin."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times[k].append(time.perf_counter() - t0)
    return times


def runner(fn, args, calls: int, chained: bool, donate: bool = False):
    """(zero-argument callable, FLOPs): `calls` calls of fn compiled once for args. chained: fn is a step
    (key, state, batch) -> (state, info) whose state is fed back; else the calls are independent and only the
    last is blocked on (dispatch pipelines as for the chained steps; XLA:CPU ran such calls one after another:
    unblocked calls of a one-core GEMM were not 2× faster than blocked ones, only the ~35 µs dispatch less).
    donate (chained only): the state's buffers are donated to each call (jax.jit's donate_argnums), as a loop that
    drops its old state lets XLA reuse them (the fields a step leaves unchanged are then not copied); each round
    continues from the last round's state, and the caller's `args` are not consumed. The callable's `temp_bytes`:
    XLA's temporary buffer for one call (memory_analysis; None where the backend gives none)."""
    donate = donate and chained
    jitted = jax.jit(fn, donate_argnums=(1,) if donate else ())
    compiled = jitted.lower(*args).compile()
    memory = compiled.memory_analysis()
    temp = None if memory is None else int(memory.temp_size_in_bytes)
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})
    call = compiled
    if donate:
        key, batch = args[0], args[2]
        cell = [call(key, jax.tree.map(jnp.copy, args[1]), batch)[0]]  # the warm-up; later rounds continue from it

        def run_donated():
            s = cell[0]
            for _ in range(calls):
                s, _ = call(key, s, batch)
            cell[0] = s
            return s

        run_donated.temp_bytes = temp
        return run_donated, float(cost.get("flops", 0.0))
    try:
        jax.block_until_ready(call(*(args if not chained else (args[0], call(*args)[0], args[2]))))
    except TypeError:  # outputs whose avals differ from the inputs' (weak types): the jitted function
        call = jitted

    def run():
        if not chained:
            return [call(*args) for _ in range(calls)][-1]
        key, s, batch = args
        for _ in range(calls):
            s, _ = call(key, s, batch)
        return s

    run.temp_bytes = temp
    return run, float(cost.get("flops", 0.0))


def measure_family(fam: Family, samplers: tuple[str, ...] = BASELINES + ("learned",), calls: int = 10,
                   repeats: int = 7, variants: tuple[str, ...] = ()) -> dict:
    """Per-step time and FLOPs of every sampler ÷ SGHMC's on `fam`, the learned samplers' meta-models alone,
    and (with `variants`) the paper-form L2E MLP variants (bench.meta_variants) timed in the same rounds."""
    from bench.meta_variants import variant_rows

    post, fpost, theta, batch = make_problem(fam)
    key = jax.random.PRNGKey(3)
    algs = {n: (None, baseline(n, post, fpost), None, None) for n in ("sghmc",) + tuple(s for s in samplers
                                                                               if s in BASELINES and s != "sghmc")}
    failed, acc = {}, {"fns": {}, "flops": {}, "probes": {}, "notes": {}, "accuracy": {}}
    if "learned" in samplers:
        learned, failed = learned_samplers(post)
        algs.update(learned)
    for name, entry in list(algs.items()):
        try:
            _add_sampler(acc, name, entry, (post, theta, batch, key), calls, variants)
        except Exception as e:  # a learned kind this harness cannot run (e.g. another meta-model structure)
            if entry[0] is None:
                raise
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            del algs[name]
            for k in [k for k in acc["fns"] if k == name or k.startswith((f"{name} |", "variant "))]:
                del acc["fns"][k]
    times = interleaved(acc["fns"], repeats)
    res = {"family": fam.name, "d": int(sum(x.size for x in jax.tree.leaves(theta))), "batch": fam.batch,
           "calls": calls, "repeats": repeats, "rows": [], "failed": failed}
    for name in algs:
        res["rows"].append(_row(name, algs[name][0], times, acc["flops"], acc["probes"].get(name),
                                acc["notes"].get(name), calls))
    if variants and "variant f32" in times:
        res["variants"] = variant_rows(times, acc["flops"], acc["accuracy"], ("f32",) + tuple(variants), algs,
                                        calls)
    return res


def _add_sampler(acc: dict, name: str, entry: tuple, problem: tuple, calls: int, variants: tuple) -> None:
    """Compile sampler `name`'s step into acc["fns"] / acc["flops"]; for a learned one also its meta-model probe
    and, for the paper-form L2E with `variants`, the MLP variants and their α, β changes."""
    from bench.meta_variants import compare_variant, l2e_features, meta_probe, variant_fn

    kind, alg, phi, config = entry
    post, theta, batch, key = problem
    acc["fns"][name], acc["flops"][name] = runner(alg.step, (key, alg.init(theta), batch), calls, chained=True)
    if kind is None:
        return

    def feats_fn():  # the paper-form L2E's real features after 5 of its own steps
        s, step = alg.init(theta), jax.jit(alg.step)
        for _ in range(5):
            s, _ = step(key, s, batch)
        return jax.jit(l2e_features, static_argnums=0)(post, s, batch)

    try:
        fn, args, acc["notes"][name] = meta_probe(kind, phi, config, theta, feats_fn)
    except Exception as e:  # an unknown meta-model structure: the step is timed, the probe reported missing
        acc["notes"][name] = f"no probe: {type(e).__name__}: {e}"
        return
    probe = acc["probes"][name] = f"{name} | meta"
    acc["fns"][probe], acc["flops"][probe] = runner(fn, args, calls, chained=False)
    if kind == "l2e" and variants and "variant f32" not in acc["fns"]:
        for v in ("f32",) + tuple(variants):
            vf = variant_fn(v)
            try:
                acc["fns"][f"variant {v}"], acc["flops"][f"variant {v}"] = runner(
                    lambda f, r, vf=vf: vf(phi, f, r), args, calls, chained=False)
                acc["accuracy"][v] = compare_variant(v, phi, *args) if v != "f32" else {}
            except Exception as e:  # e.g. a dot XLA:CPU does not implement for bf16 (reported, not fatal)
                acc["fns"].pop(f"variant {v}", None)
                acc["accuracy"][v] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}


def _row(name, kind, times, flops, probe, note, calls) -> dict:
    ms = statistics.median(times[name]) / calls * 1e3
    row = {"sampler": name, "kind": kind or "baseline", "ms": ms,
           "time_ratio": 1.0 if name == "sghmc" else median_ratio(times[name], times["sghmc"]),
           "flops": flops[name], "flop_ratio": flops[name] / flops["sghmc"] if flops["sghmc"] else float("nan")}
    if note:
        row["meta_model"] = note
    if probe:
        meta_ms = statistics.median(times[probe]) / calls * 1e3
        row.update(meta_ms=meta_ms, meta_flops=flops[probe], meta_gflops=flops[probe] / meta_ms / 1e6,
                   meta_share=median_ratio(times[probe], times[name]))
    return row


def markdown(results: list[dict], gemm: dict) -> str:
    """The per-family table (and the variants' table, if any) as Markdown."""
    from bench.meta_variants import variant_table

    lines = [f"backend {jax.default_backend()}; f32 GEMM {gemm['n']}³: {gemm['median']:.1f} GFLOP/s median "
             f"(best {gemm['best']:.1f}); meta ÷ GEMM uses the median", "",
             "| family | d | batch | sampler | ms/step | time ÷ SGHMC | FLOPs ÷ SGHMC | meta-model ms | meta GFLOP/s "
             "| meta ÷ GEMM | meta share of step |", "|" + "---|" * 11]
    for r in results:
        for row in r["rows"]:
            lines.append(f"| {r['family']} | {r['d']:,} | {r['batch']} | {row['sampler']} | {fmt(row['ms'], '.3f')} "
                         f"| {fmt(row['time_ratio'])} | {fmt(row['flop_ratio'])} | {fmt(row.get('meta_ms'), '.3f')} "
                         f"| {fmt(row.get('meta_gflops'), '.1f')} "
                         f"| {fmt(row.get('meta_gflops') and row['meta_gflops'] / gemm['median'])} "
                         f"| {fmt(row.get('meta_share'))} |")
    failed = [f"{r['family']}: {n} ({why})" for r in results for n, why in r.get("failed", {}).items()]
    if failed:
        lines += ["", "not measured: " + "; ".join(failed)]
    lines += variant_table(results)
    return "\n".join(lines)


def run(families: list[str] | None = None, samplers: tuple[str, ...] = BASELINES + ("learned",), calls: int = 10,
        repeats: int = 7, variants: tuple[str, ...] = (), json_path: str | None = None, emit=print) -> dict:
    """Measure every family in turn, print the table, optionally write the JSON; returns the results."""
    t0 = time.perf_counter()
    gemm = gemm_gflops()
    emit(f"f32 GEMM: {gemm['median']:.1f} GFLOP/s (median; best {gemm['best']:.1f})")
    results = []
    for name in families or default_families():
        tf = time.perf_counter()
        results.append(measure_family(FAMILIES[name], samplers, calls, repeats, variants))
        emit(f"{name}: done in {time.perf_counter() - tf:.0f} s")
    table = markdown(results, gemm)
    emit(table)
    out = {"backend": jax.default_backend(), "device": str(jax.devices()[0]), "jax": jax.__version__,
           "loadavg": list(os.getloadavg()), "gemm": gemm, "families": results, "table": table,
           "seconds": time.perf_counter() - t0}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1, default=float)
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--family", default="", help=f"comma-separated, of {', '.join(FAMILIES)} (default: all; "
                                                 "resnet20 only on a GPU unless named)")
    ap.add_argument("--samplers", default="", help=f"comma-separated, of {', '.join(BASELINES)}, learned "
                                                   "(default: all; sghmc is always run)")
    ap.add_argument("--calls", type=int, default=10, help="chained step calls per timed round")
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds")
    ap.add_argument("--variants", default="", help="paper-form L2E MLP variants to time (bench.meta_variants), "
                                                   "comma-separated, or 'default' for DEFAULT_VARIANTS")


MAX_CALLS = 10**4
"""Upper bound of --calls and --repeats (a timed round of 10⁴ chained steps is minutes on the largest family)."""
LIMITS_HELP = (f"limits (checked before anything runs): --calls and --repeats between 1 and {MAX_CALLS:.0e}; "
               "families and samplers from the lists above")


def parse(a) -> dict:
    """The step-cost keyword arguments of parsed flags; ValueError names a flag outside its list or limit."""
    from bench.meta_variants import DEFAULT_VARIANTS

    split = lambda s: tuple(x.strip() for x in s.split(",") if x.strip())
    variants = DEFAULT_VARIANTS if a.variants == "default" else split(a.variants)
    for name in split(a.family):
        if name not in FAMILIES:
            raise ValueError(f"unknown family {name!r} (known: {', '.join(FAMILIES)})")
    for name in split(a.samplers):
        if name not in BASELINES + ("learned",):
            raise ValueError(f"unknown sampler {name!r} (known: {', '.join(BASELINES)}, learned)")
    for flag in ("calls", "repeats"):
        if not 1 <= getattr(a, flag) <= MAX_CALLS:
            raise ValueError(f"--{flag} must be between 1 and {MAX_CALLS:g} (a resource limit), got {getattr(a, flag)}")
    return dict(families=list(split(a.family)) or None,
                samplers=split(a.samplers) or BASELINES + ("learned",), calls=a.calls, repeats=a.repeats,
                variants=variants)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.step_cost", description=__doc__, epilog=LIMITS_HELP + ".",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    a = ap.parse_args(argv)
    try:
        kw = parse(a)
    except ValueError as e:
        ap.error(str(e))
    return run(**kw, json_path=a.json)


if __name__ == "__main__":
    main()
