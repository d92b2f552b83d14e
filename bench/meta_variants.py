"""The learned samplers' meta-models on their own, and implementation variants of the paper-form L2E's MLP.

`meta_probe(kind, …)` is what bench.step_cost times as "the meta-model alone":
  l2e      : the fused step's two MLP passes (l2e.l2e.mlp_from_preactivation, the shipped code) on (d, 9)
             normalised features: the first layer on the 8 fixed features once, pass 1 both outputs (α, β),
             pass 2 β only on the new momentum; feature construction / normalisation is not included;
  kinetic  : l2e.kinetic.gradients — θ-only features, μ-MLP forward and its vector–Jacobian product;
  any other: one forward pass of the kind's MetaMLP on (d, inputs) features (a lower bound, labelled so).

Variants (item 2 of issue 15; prototypes in bench only, not in l2e/), named by "-"-joined tokens:
  f32       the reference: the shipped row layout (coordinates × features), f32 GEMMs;
  bf16      hidden and output GEMMs with bf16 inputs, f32 accumulation (preferred_element_type); first layer f32;
  bf16all   as bf16, and the first layer's 8-feature GEMM in bf16 too;
  T         features × coordinates layout ((32, d) activations; W·H instead of H·W);
  chunk<N>  the two passes run chunk by chunk over N coordinates (lax.map, zero-padded; d ≤ N: unchunked),
            e.g. chunk4096: the (chunk, 32) activations stay in cache instead of streaming (d, 32) arrays.
e.g. "f32-T", "bf16-T", "bf16-chunk4096". `compare_variant` gives α, β (pass 1) and β' (pass 2) relative to
the reference on the same features: ‖Δ‖₂/‖ref‖₂ and max|Δ|/rms(ref).
"""
from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

from bench.stats import fmt, median_ratio
from l2e.l2e import mlp_from_preactivation
from l2e.meta_model import FEATURE_NAMES, MetaMLP, features, hidden_sizes, mlp_layers

MOM = FEATURE_NAMES.index("momentum")
FIXED = np.asarray([i for i in range(len(FEATURE_NAMES)) if i != MOM])
DEFAULT_VARIANTS = ("f32-T", "bf16", "bf16-T", "chunk4096", "chunk16384", "f32-T-chunk4096", "bf16-chunk8192")
"""`--variants default`; "bf16all" is left out: XLA:CPU (jax 0.10.2) does not implement its K = 8 bf16 dot with
f32 output (UNIMPLEMENTED … DotThunk … BF16 x BF16 = F32), so it runs only elsewhere."""


def reference_two_pass(meta_params, feats: jax.Array, r2: jax.Array):
    """The shipped fused step's MLP work: (α_raw, β_raw) of pass 1 and β_raw of pass 2, each (d,).
    feats: (d, 9) normalised features (momentum column = pass 1's r̂); r2: pass 2's normalised momentum (d,)."""
    (w1, b1), *_ = mlp_layers(meta_params)
    pre = feats[:, FIXED] @ w1[FIXED] + b1
    out1 = mlp_from_preactivation(meta_params, pre, feats[:, MOM], slice(0, 2))
    out2 = mlp_from_preactivation(meta_params, pre, r2, slice(1, 2))
    return out1[:, 0], out1[:, 1], out2[:, 0]


def _dot(a, b, dtype):
    return jnp.dot(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def _passes_rows(layers, feats, r2, dt_hidden, dt_first):
    (w1, b1), *hidden, (w3, b3) = layers
    pre = _dot(feats[:, FIXED], w1[FIXED], dt_first) + b1

    def mlp(r, cols):
        h = jax.nn.relu(pre + r[:, None] * w1[MOM][None, :])
        for w, b in hidden:
            h = jax.nn.relu(_dot(h, w, dt_hidden) + b)
        return _dot(h, w3[:, cols], dt_hidden) + b3[cols]

    out1 = mlp(feats[:, MOM], slice(0, 2))
    return out1[:, 0], out1[:, 1], mlp(r2, slice(1, 2))[:, 0]


def _passes_cols(layers, feats, r2, dt_hidden, dt_first):
    """Features × coordinates layout: activations (hidden, d)."""
    (w1, b1), *hidden, (w3, b3) = layers
    pre = _dot(w1[FIXED].T, feats[:, FIXED].T, dt_first) + b1[:, None]

    def mlp(r, cols):
        h = jax.nn.relu(pre + w1[MOM][:, None] * r[None, :])
        for w, b in hidden:
            h = jax.nn.relu(_dot(w.T, h, dt_hidden) + b[:, None])
        return _dot(w3[:, cols].T, h, dt_hidden) + b3[cols][:, None]

    out1 = mlp(feats[:, MOM], slice(0, 2))
    return out1[0], out1[1], mlp(r2, slice(1, 2))[0]


def variant_fn(name: str):
    """fn(meta_params, feats (d, 9), r2 (d,)) -> (α_raw, β_raw, β2_raw) of the variant `name` (see module doc)."""
    tokens = name.split("-")
    if tokens == ["f32"]:
        return reference_two_pass
    unknown = [t for t in tokens if t not in ("f32", "bf16", "bf16all", "T") and not t.startswith("chunk")]
    if unknown:
        raise ValueError(f"unknown variant token(s) {unknown} in {name!r}")
    dt_hidden = jnp.bfloat16 if {"bf16", "bf16all"} & set(tokens) else jnp.float32
    dt_first = jnp.bfloat16 if "bf16all" in tokens else jnp.float32
    passes = _passes_cols if "T" in tokens else _passes_rows
    chunk = next((int(t[5:]) for t in tokens if t.startswith("chunk")), None)

    def fn(meta_params, feats, r2):
        layers = mlp_layers(meta_params)
        if chunk is None or feats.shape[0] <= chunk:
            return passes(layers, feats, r2, dt_hidden, dt_first)
        d = feats.shape[0]
        pad = (-d) % chunk
        fc = jnp.pad(feats, ((0, pad), (0, 0))).reshape(-1, chunk, feats.shape[1])
        rc = jnp.pad(r2, (0, pad)).reshape(-1, chunk)
        outs = jax.lax.map(lambda a: passes(layers, a[0], a[1], dt_hidden, dt_first), (fc, rc))
        return tuple(o.reshape(-1)[:d] for o in outs)

    return fn


def compare_variant(name: str, meta_params, feats, r2) -> dict:
    """α, β, β' of variant `name` vs the f32 reference on the same inputs (relative L2 and max/rms)."""
    ref = jax.jit(reference_two_pass)(meta_params, feats, r2)
    out = jax.jit(variant_fn(name))(meta_params, feats, r2)
    res = {}
    for label, a, b in zip(("alpha", "beta", "beta2"), ref, out):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        diff = b - a
        res[f"{label} rel_l2"] = float(np.linalg.norm(diff) / max(np.linalg.norm(a), 1e-30))
        res[f"{label} max/rms"] = float(np.max(np.abs(diff)) / max(np.sqrt(np.mean(a * a)), 1e-30))
    return res


def l2e_features(posterior, state, batch):
    """Real (d, 9) features and pass 2's normalised momentum at an L2EState: the features of the state's
    averages and momentum, and the momentum column of the features at the momentum of one SGHMC-like kick."""
    _, g, grad_u = posterior.value_and_potential_grad(state.position, batch)
    feats = features(g, state.position, state.momentum, state.averages)
    kicked = jax.tree.map(lambda r, gu: 0.9 * r - 1e-3 * gu, state.momentum, grad_u)
    r2 = features(g, state.position, kicked, state.averages)[:, MOM]
    return feats, r2


def meta_probe(kind: str, meta_params, config, theta, features_fn):
    """(fn, args, label): the meta-model of a learned sampler alone (see module doc). `features_fn()` gives
    (feats, r2) for the paper-form L2E (called only for kind "l2e")."""
    if kind == "l2e":
        feats, r2 = features_fn()
        return (lambda f, r: reference_two_pass(meta_params, f, r)), (feats, r2), "2 MLP passes"
    if kind == "kinetic":
        from l2e.kinetic import gradients, mlp_mu_fn

        mu_fn = mlp_mu_fn(config.mu_scale)
        r = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(5), x.shape, x.dtype), theta)
        return (lambda t, m: gradients(mu_fn, meta_params, t, m)), (theta, r), "μ-MLP + VJP"
    (w_in, _), *_, (_, b_out) = mlp_layers(meta_params)
    d = sum(x.size for x in jax.tree.leaves(theta))
    module = MetaMLP(hidden_sizes(meta_params), int(b_out.shape[0]))
    x = jax.random.normal(jax.random.PRNGKey(5), (d, int(w_in.shape[0])))
    return (lambda f: module.apply({"params": meta_params}, f)), (x,), "1 MLP forward (generic)"


def variant_rows(times, flops, accuracy, names, algs, calls) -> list[dict]:
    """Per variant: ms, ÷ f32 reference (median of per-round ratios), the L2E step ÷ SGHMC projected with the
    variant in place of the reference ((step − ref + variant) ÷ SGHMC, medians), α/β changes. GFLOP/s counts
    the reference's FLOPs for every variant (XLA counts a lax.map body once, not per chunk)."""
    l2e_name = next(n for n, a in algs.items() if a[0] == "l2e")
    ms = {k: statistics.median(v) / calls * 1e3 for k, v in times.items()}
    rows = []
    for v in names:
        key = f"variant {v}"
        if key not in times:
            rows.append({"variant": v, **accuracy.get(v, {})})
            continue
        proj = (ms[l2e_name] - ms["variant f32"] + ms[key]) / ms["sghmc"]
        rows.append({"variant": v, "ms": ms[key], "ratio_to_f32": median_ratio(times[key], times["variant f32"]),
                     "gflops": flops["variant f32"] / ms[key] / 1e6, "projected_step_ratio": proj,
                     **accuracy.get(v, {})})
    return rows


def variant_table(results: list[dict]) -> list[str]:
    """Markdown lines of the variants' table of bench.step_cost results (none without variants)."""
    lines = []
    pairs = [(r["family"], v) for r in results for v in r.get("variants", [])]
    if pairs:
        lines += ["", "| family | L2E MLP variant | ms | ÷ f32 | GFLOP/s | L2E step ÷ SGHMC (projected) "
                      "| α rel. L2 | β rel. L2 | β' rel. L2 | max abs Δ ÷ rms (α, β, β') |", "|" + "---|" * 10]
        for fam, v in pairs:
            if "ms" not in v:
                lines.append(f"| {fam} | {v['variant']} | not run: {v.get('error', '?')} |" + " |" * 7)
                continue
            mx = ", ".join(fmt(v.get(f"{k} max/rms"), ".1e") for k in ("alpha", "beta", "beta2"))
            lines.append(f"| {fam} | {v['variant']} | {fmt(v['ms'], '.3f')} | {fmt(v['ratio_to_f32'])} "
                         f"| {fmt(v['gflops'], '.1f')} | {fmt(v['projected_step_ratio'])} "
                         f"| {fmt(v.get('alpha rel_l2'), '.1e')} | {fmt(v.get('beta rel_l2'), '.1e')} "
                         f"| {fmt(v.get('beta2 rel_l2'), '.1e')} | {mx} |")
    return lines
