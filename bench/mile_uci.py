"""MILE (Sommer et al., ICLR 2025) on UCI regression with MILE's protocol, side by side with the paper.

Usage: python -m bench.mile_uci [--datasets yacht,energy,concrete] [--seeds 1,2,3] [--chains 12]
           [--nuts-chains C] [--nuts-samples S] [--quick] [--output bench/MILE_UCI.md] [--json PATH]

Per dataset × split seed (MILE protocol, tasks.regression.load_uci(protocol="mile"): whole-data z-score,
seeded shuffle, 70/10/20; 2×16 ReLU MLP with location and log-scale heads, prior N(0, I); spec docs/samplers.md, MCLMC and the MILE recipe):
  1. DE: `chains` members, each from its own init key and its own minibatch order, AdamW (lr 1e-3, b1 0.9,
     b2 0.999, weight decay 1e-3, decoupled as optax.adamw), batch 32, ≤ 500 epochs, early stopping with
     patience 10 on the validation mean NLL; each member's best-validation parameters are kept.  Loss = mean
     Gaussian NLL of the batch (no explicit prior term; AdamW's decay plays that role).  All members are
     vmapped and trained in one jitted while-loop that ends when every member has stopped.
  2. MILE: l2e.mclmc.mile from each DE member (θ₀ = member, ε₀ = 1e-3 = the DE learning rate, L₀ = max(√d, 15),
     phases 40k/5k/5k, 10k sampling steps thinned by 10 → 1000 samples per chain), chains vmapped in one jitted
     call; log density = tasks' full-batch log posterior on the training split.
  3. NUTS-BDE: l2e.nuts.nuts_chains from the same DE members (Stan window adaptation, target acceptance 0.8,
     max 10 doublings, `nuts_warmup` adaptation steps (MILE: 100), `nuts_samples` draws per chain), chains run
     one after another.

Metrics (docs/evaluation.md, Regression, tasks.likelihoods.gaussian.regression_metrics) on the test split of the standardised target,
pooled over chains and samples: LPPD (logsumexp), RMSE of the mixture mean, calibration error (RMS over the
levels 0.5/0.75/0.9/0.95 of |coverage − level|, one predictive draw per sample; for the DE 1000 draws per member
so that both use 12·1000 draws per test point).

Timing (time.perf_counter, jax.block_until_ready): DE and MILE are compiled ahead of time (jit(...).lower().
compile()) and the timed call is the compiled executable only.  NUTS: nuts_chains times each chain; chain 0
includes compilation, so the NUTS time reported is mean(seconds of chains 1..C−1) × 12 (an estimate of 12
chains run serially, compilation excluded); the raw per-chain seconds are kept in the JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from l2e.mclmc import mile
from l2e.nuts import nuts_chains
from tasks.data.base import default_path
from tasks.likelihoods.gaussian import regression_metrics
from tasks.regression import RegressionSpec, build_regression_task

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = default_path("uci")
"""$L2E_DATA_DIR/uci, else ~/.cache/l2e/uci (the first that exists)."""

# the MILE paper (Tables 1/3), mean ± s.e. over 3 splits.
PAPER = {
    "yacht": {"lppd": ((1.623, .101), (2.674, .216), (2.859, .199)), "rmse": ((.081, .038), (.083, .011), (.033, .011)),
              "cal": ((.253, .037), (.188, .032), (.133, .059)), "minutes": (0.16, 0.58, 0.64)},
    "energy": {"lppd": ((1.227, .037), (2.072, .036), (2.300, .066)), "rmse": ((.120, .022), (.045, .003), (.034, .007)),
               "cal": ((.215, .015), (.032, .003), (.061, .014)), "minutes": (0.39, 1.11, 0.75)},
    "concrete": {"lppd": ((-.072, .018), (.301, .088), (.336, .054)), "rmse": ((.304, .007), (.273, .012), (.250, .014)),
                 "cal": ((.066, .002), (.050, .003), (.068, .017)), "minutes": (0.33, 1.56, 0.77)},
    "airfoil": {"lppd": ((.024, .024), (.558, .034), (.612, .011)), "rmse": ((.309, .005), (.214, .013), (.206, .018)),
                "cal": ((.077, .012), (.083, .009), (.086, .018)), "minutes": (0.62, 2.25, 0.84)},
}

FULL = {"de_lr": 1e-3, "de_epochs": 500, "de_patience": 10, "mile_steps": (40_000, 5_000, 5_000),
        "mile_samples": 1000, "mile_thin": 10, "nuts_warmup": 100, "nuts_samples": 1000}
QUICK = {"de_lr": 1e-3, "de_epochs": 60, "de_patience": 10, "mile_steps": (1_000, 200, 200),
         "mile_samples": 100, "mile_thin": 5, "nuts_warmup": 20, "nuts_samples": 10}


def _tree_where(mask, a, b):
    """Per-member select: mask (M,) broadcast over each leaf's trailing axes."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def make_de_trainer(task, members: int, lr: float = 1e-3, weight_decay: float = 1e-3, batch_size: int = 32,
                    max_epochs: int = 500, patience: int = 10):
    """Returns train(key) -> (best params (M, ...), info dict of arrays); pure, jittable."""
    x_tr, y_tr = task.splits.train
    x_va, y_va = task.splits.inner_valid
    n = x_tr.shape[0]
    nb = max(1, n // batch_size)
    bs = min(batch_size, n)
    opt = optax.adamw(lr, b1=0.9, b2=0.999, weight_decay=weight_decay)
    grad_fn = jax.grad(lambda p, i: task.nll(p, (x_tr[i], y_tr[i])))
    val_fn = jax.vmap(lambda p: task.nll(p, (x_va, y_va)))

    def train(key):
        k_init, k_data = jax.random.split(key)
        params = jax.vmap(task.init_params)(jax.random.split(k_init, members))
        opt_state = jax.vmap(opt.init)(params)
        best_val = val_fn(params)

        def epoch(carry):
            e, params, opt_state, best, best_val, wait, stopped, epochs = carry
            keys = jax.random.split(jax.random.fold_in(k_data, e), members)
            perms = jax.vmap(lambda k: jax.random.permutation(k, n)[:nb * bs].reshape(nb, bs))(keys)

            def step(c, idx):
                p, s = c
                g = jax.vmap(grad_fn)(p, idx)
                upd, s = jax.vmap(opt.update)(g, s, p)
                return (optax.apply_updates(p, upd), s), None

            (new_p, new_s), _ = jax.lax.scan(step, (params, opt_state), jnp.swapaxes(perms, 0, 1))
            new_p = _tree_where(stopped, params, new_p)
            val = val_fn(new_p)
            improved = (val < best_val) & ~stopped
            best = _tree_where(improved, new_p, best)
            best_val = jnp.where(improved, val, best_val)
            wait = jnp.where(improved, 0, wait + jnp.where(stopped, 0, 1))
            epochs = epochs + jnp.where(stopped, 0, 1)
            stopped = stopped | (wait >= patience)
            return e + 1, new_p, new_s, best, best_val, wait, stopped, epochs

        def cond(carry):
            return (carry[0] < max_epochs) & ~jnp.all(carry[6])

        zi = jnp.zeros((members,), jnp.int32)
        carry = (jnp.zeros((), jnp.int32), params, opt_state, params, best_val, zi, jnp.zeros((members,), bool), zi)
        carry = jax.lax.while_loop(cond, epoch, carry)
        return carry[3], {"best_val_nll": carry[4], "epochs": carry[7]}

    return train


def _compile(fn, *args):
    t0 = time.perf_counter()
    c = jax.jit(fn).lower(*args).compile()
    return c, time.perf_counter() - t0


def _timed(compiled, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    return out, time.perf_counter() - t0


def _flatten(samples):
    """(C, S, ...) → (C·S, ...)."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), samples)


def _member(params, i):
    """Member i of a stacked params pytree, keeping a sample axis of length 1."""
    return jax.tree.map(lambda x: x[i:i + 1], params)


def _metrics(task, params, split="test", num_draws=1, key=0):
    """regression_metrics of the stacked params' predictions on a split (non-finite samples dropped)."""
    x, y = getattr(task.splits, split)
    out = np.asarray(jax.jit(task.predict)(params, x))  # (K, n, 2) [loc, scale]
    loc, scale = out[..., 0], out[..., 1]
    finite = np.all(np.isfinite(loc), 1) & np.all(np.isfinite(scale), 1)
    m = regression_metrics(np.asarray(y), loc[finite], scale[finite], key=key, num_draws=num_draws)
    m["num_nonfinite_samples"] = int((~finite).sum())
    return m


def _run_de(task, key, chains: int, cfg: dict, seed: int, log) -> tuple[dict, dict]:
    """1. The deep ensemble: (stacked member params, report entry)."""
    dataset = task.spec.dataset.split(":")[-1]
    train = make_de_trainer(task, chains, lr=cfg["de_lr"], max_epochs=cfg["de_epochs"], patience=cfg["de_patience"])
    c_de, t_comp = _compile(train, key)
    (de_params, de_info), t_de = _timed(c_de, key)
    m_de = _metrics(task, de_params, num_draws=1000, key=seed)
    members = [_metrics(task, _member(de_params, i), key=seed)["lppd"] for i in range(chains)]
    entry = {**m_de, "seconds": t_de, "compile_seconds": t_comp, "epochs": np.asarray(de_info["epochs"]).tolist(),
             "best_val_nll": np.asarray(de_info["best_val_nll"]).tolist(), "member_lppd": members}
    log(f"  [{dataset} s{seed}] DE     LPPD {m_de['lppd']:.3f} RMSE {m_de['rmse']:.3f} "
        f"CalE {m_de['calibration_error']:.3f}  {t_de:.1f} s (+{t_comp:.1f} s compile), epochs "
        f"{int(np.min(de_info['epochs']))}–{int(np.max(de_info['epochs']))}")
    return de_params, entry


def _run_mile(task, de_params, key, chains: int, cfg: dict, seed: int, log) -> dict:
    """2. MILE from the DE members (vmapped chains, compiled ahead of time): the report entry."""
    dataset = task.spec.dataset.split(":")[-1]

    def run(positions, keys):
        return jax.vmap(lambda p, k: mile(task.log_density, p, k, cfg["de_lr"], num_steps=cfg["mile_steps"],
                                          num_samples=cfg["mile_samples"], thinning=cfg["mile_thin"]))(positions, keys)

    mk = jax.random.split(key, chains)
    c_mile, t_comp = _compile(run, de_params, mk)
    (samples, info), t_mile = _timed(c_mile, de_params, mk)
    m_mile = _metrics(task, _flatten(samples), key=seed)
    finite = np.stack([np.all(np.isfinite(np.asarray(x).reshape(chains, -1)), 1) for x in jax.tree.leaves(samples)])
    entry = {**m_mile, "seconds": t_mile, "compile_seconds": t_comp,
             "num_grad_evals_per_chain": int(np.asarray(info.num_grad_evals)[0]),
             "num_nan_warmup": np.asarray(info.num_nan_warmup).tolist(),
             "num_nan_sampling": np.asarray(info.num_nan_sampling).tolist(),
             "nan_chains": int(np.sum(~finite.all(0))),
             "step_size": np.asarray(info.step_size).tolist(), "L": np.asarray(info.L).tolist(),
             "L_phase2": np.asarray(info.L_phase2).tolist(),
             "eevpd_sampling": np.asarray(info.eevpd_sampling).tolist()}
    log(f"  [{dataset} s{seed}] MILE   LPPD {m_mile['lppd']:.3f} RMSE {m_mile['rmse']:.3f} "
        f"CalE {m_mile['calibration_error']:.3f}  {t_mile:.1f} s (+{t_comp:.1f} s compile), ε "
        f"{np.median(info.step_size):.3g}, L {np.median(info.L):.3g}, NaN reversions "
        f"{int(np.sum(info.num_nan_warmup))}/{int(np.sum(info.num_nan_sampling))}")
    return entry


def _run_nuts(task, de_params, key, chains: int, cfg: dict, seed: int, log) -> dict:
    """3. NUTS-BDE from the first `chains` DE members (chains run one after another): the report entry."""
    dataset = task.spec.dataset.split(":")[-1]
    init = jax.tree.map(lambda x: x[:chains], de_params)
    t0 = time.perf_counter()
    ns, ninfo = nuts_chains(task.log_density, init, key, cfg["nuts_warmup"], cfg["nuts_samples"])
    t_total = time.perf_counter() - t0
    m_nuts = _metrics(task, _flatten(ns), key=seed)
    secs = np.asarray(ninfo.seconds)
    per_chain = float(np.mean(secs[1:])) if len(secs) > 1 else float(secs[0])
    entry = {**m_nuts, "chains_run": chains, "seconds_per_chain": secs.tolist(),
             "seconds_12_chains_est": per_chain * 12, "seconds_total_incl_compile": t_total,
             "num_grad_evals": np.asarray(ninfo.num_grad_evals).tolist(),
             "step_size": np.asarray(ninfo.step_size).tolist(),
             "acceptance_rate": np.asarray(ninfo.acceptance_rate).tolist(),
             "num_divergent": np.asarray(ninfo.num_divergent).tolist(),
             "warmup": cfg["nuts_warmup"], "samples": cfg["nuts_samples"]}
    log(f"  [{dataset} s{seed}] BDE    LPPD {m_nuts['lppd']:.3f} RMSE {m_nuts['rmse']:.3f} "
        f"CalE {m_nuts['calibration_error']:.3f}  {chains} chains {t_total:.1f} s incl. compile; "
        f"per chain {per_chain:.1f} s; grads/chain {np.mean(ninfo.num_grad_evals):.3g}; "
        f"acc {np.mean(ninfo.acceptance_rate):.2f}; div {int(np.sum(ninfo.num_divergent))}")
    return entry


def run_one(dataset: str, seed: int, chains: int, cfg: dict, data_dir: str, nuts_chains_n: int,
            log=print) -> dict:
    """DE, MILE and (nuts_chains_n > 0) NUTS-BDE on one dataset and split seed."""
    task = build_regression_task(RegressionSpec(f"uci:{dataset}", protocol="mile", seed=seed, data_dir=data_dir))
    d = sum(x.size for x in jax.tree.leaves(task.init_params(jax.random.PRNGKey(0))))
    out = {"dataset": dataset, "seed": seed, "chains": chains, "d": int(d), "n_train": task.data_size,
           "n_valid": int(task.splits.inner_valid[0].shape[0]), "n_test": int(task.splits.test[0].shape[0])}
    k_de, k_mile, k_nuts = jax.random.split(jax.random.PRNGKey(seed), 3)
    de_params, out["de"] = _run_de(task, k_de, chains, cfg, seed, log)
    out["mile"] = _run_mile(task, de_params, k_mile, chains, cfg, seed, log)
    if nuts_chains_n > 0:
        out["nuts"] = _run_nuts(task, de_params, k_nuts, nuts_chains_n, cfg, seed, log)
    return out


# ----------------------------------------------------------------------------- reporting


def _ms(vals):
    v = np.asarray([x for x in vals if x is not None and np.isfinite(x)], float)
    if len(v) == 0:
        return "—"
    se = v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return f"{v.mean():.3f}±{se:.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def _nuts_scale(n):
    """Extrapolation factor of a NUTS run with n["samples"] draws to MILE's 1000 draws (same warm-up)."""
    return (n["warmup"] + 1000) / (n["warmup"] + n["samples"])


def _pv(p):
    return f"{p[0]:.3f}±{p[1]:.3f}"


def tables(results: list[dict]) -> str:
    lines = []
    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    for ds in datasets:
        rs = [r for r in results if r["dataset"] == ds]
        paper = PAPER.get(ds)
        seeds = ",".join(str(r["seed"]) for r in rs)
        lines.append(f"### {ds} (d = {rs[0]['d']}, N_train = {rs[0]['n_train']}, n_test = {rs[0]['n_test']}; "
                     f"split seeds {seeds}; mean ± s.e. over splits)\n")
        lines.append("| metric | method | ours | paper |")
        lines.append("|---|---|---|---|")
        for mk, pk, name in (("lppd", "lppd", "LPPD ↑"), ("rmse", "rmse", "RMSE ↓"),
                             ("calibration_error", "cal", "CalE ↓")):
            for i, (meth, label) in enumerate((("de", "DE"), ("nuts", "BDE (NUTS)"), ("mile", "MILE"))):
                ours = _ms([r[meth][mk] for r in rs if meth in r])
                lines.append(f"| {name} | {label} | {ours} | {_pv(paper[pk][i]) if paper else '—'} |")
        lines.append("")
        lines.append("| wall time (min) | ours | paper (12 chains in parallel, their CPU) |")
        lines.append("|---|---|---|")
        de_t = _ms([r["de"]["seconds"] / 60 for r in rs])
        bde_t = _ms([r["nuts"]["seconds_12_chains_est"] / 60 * _nuts_scale(r["nuts"]) for r in rs if "nuts" in r])
        mile_t = _ms([r["mile"]["seconds"] / 60 for r in rs])
        pm = paper["minutes"] if paper else ("—",) * 3
        lines.append(f"| DE ({rs[0]['chains']} members, vmapped) | {de_t} | {pm[0]} |")
        runs = sorted({(r["nuts"]["chains_run"], r["nuts"]["samples"]) for r in rs if "nuts" in r}, reverse=True)
        how = " or ".join(f"{c} chain{'s' * (c > 1)} × {s} draws" for c, s in runs)
        lines.append(f"| BDE sampling (NUTS; {how} run serially; per-chain mean ×12, scaled ×(100+1000)/(100+draws) "
                     f"to 1000 draws, excl. compile) | {bde_t} | {pm[1]} |")
        lines.append(f"| MILE warm-up + sampling ({rs[0]['chains']} chains vmapped, excl. compile) "
                     f"| {mile_t} | {pm[2]} |")
        g_m = rs[0]["mile"]["num_grad_evals_per_chain"]
        g_n = [np.mean(r["nuts"]["num_grad_evals"]) for r in rs if "nuts" in r]
        lines.append("")
        lines.append(f"Gradient evaluations per chain: MILE {g_m:,}; NUTS-BDE "
                     + (f"{np.mean(g_n):,.0f} (mean over chains and splits; warm-up + sampling)" if g_n else "—")
                     + ". MILE NaN reversions (warm-up / sampling, summed over chains): "
                     + ", ".join(f"s{r['seed']}: {sum(r['mile']['num_nan_warmup'])}/{sum(r['mile']['num_nan_sampling'])}"
                                 for r in rs)
                     + "; chains with non-finite samples: "
                     + ", ".join(f"s{r['seed']}: {r['mile']['nan_chains']}" for r in rs) + ".\n")
    return "\n".join(lines)


def environment() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = "?"
    import blackjax
    import flax
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "python": platform.python_version(),
            "jax": jax.__version__, "blackjax": blackjax.__version__, "optax": optax.__version__,
            "flax": flax.__version__, "numpy": np.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "device": str(jax.devices()[0]), "commit": commit}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.mile_uci", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="yacht,energy,concrete")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--chains", type=int, default=12)
    ap.add_argument("--nuts-chains", type=int, default=None, help="NUTS-BDE chains (default: --chains)")
    ap.add_argument("--nuts-samples", type=int, default=None, help="NUTS draws per chain (default 1000)")
    ap.add_argument("--nuts-warmup", type=int, default=None, help="NUTS window-adaptation steps (default 100)")
    ap.add_argument("--de-lr", type=float, default=None, help="DE AdamW learning rate = MILE's ε₀ (default 1e-3)")
    ap.add_argument("--de-patience", type=int, default=None, help="DE early-stopping patience (default 10)")
    ap.add_argument("--quick", action="store_true", help="1 dataset, 1 seed, 2 chains, tiny budgets (tests)")
    ap.add_argument("--data-dir", default=os.environ.get("L2E_UCI_DIR", str(DEFAULT_DATA)))
    ap.add_argument("--output", default=None, help="write the Markdown report here")
    ap.add_argument("--json", default=None, help="write the raw results here")
    a = ap.parse_args(argv)
    cfg = dict(QUICK if a.quick else FULL)
    datasets = [s.strip() for s in a.datasets.split(",") if s.strip()]
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    chains = a.chains
    if a.quick:
        datasets, seeds, chains = datasets[:1], seeds[:1], min(chains, 2)
    nuts_n = min(chains, a.nuts_chains) if a.nuts_chains is not None else chains
    if a.nuts_samples is not None:
        cfg["nuts_samples"] = a.nuts_samples
    if a.de_lr is not None:
        cfg["de_lr"] = a.de_lr
    if a.de_patience is not None:
        cfg["de_patience"] = a.de_patience
    if a.nuts_warmup is not None:
        cfg["nuts_warmup"] = a.nuts_warmup
    missing = [ds for ds in datasets if not (Path(a.data_dir) / ds / "data.txt").is_file()]
    for ds in missing:
        print(f"{ds}: BLOCKED — no data at {Path(a.data_dir) / ds}", flush=True)
    datasets = [ds for ds in datasets if ds not in missing]
    env = environment()
    print(f"bench.mile_uci: {datasets} seeds {seeds}, {chains} chains, NUTS {nuts_n} chains, cfg {cfg}", flush=True)
    results = []
    t_all = time.perf_counter()
    for ds in datasets:
        for s in seeds:
            results.append(run_one(ds, s, chains, cfg, a.data_dir, nuts_n, log=lambda m: print(m, flush=True)))
            if a.json:  # checkpoint after every run
                _write_json(a.json, env, cfg, argv, results, missing)
    total = time.perf_counter() - t_all
    report = tables(results)
    print(report, flush=True)
    print(f"total {total:.0f} s", flush=True)
    out = {"env": env, "cfg": cfg, "results": results, "blocked": missing, "total_seconds": total}
    if a.json:
        _write_json(a.json, env, cfg, argv, results, missing, total)
    if a.output:
        Path(a.output).write_text(report)
    return out


def _write_json(path, env, cfg, argv, results, missing, total=None):
    with open(path, "w") as f:
        json.dump({"env": env, "cfg": cfg, "argv": list(argv) if argv is not None else sys.argv[1:],
                   "results": results, "blocked": missing, "total_seconds": total}, f, indent=1, default=float)


if __name__ == "__main__":
    main()
