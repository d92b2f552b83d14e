"""B5: ESS per second of L2E (the shipped checkpoint) ÷ cyclical SGHMC on a held-out task.

Usage: python -m bench.ess [--chains 4] [--steps 1000]

Protocol (evaluate's `default` preset, its first held-out task digits/cnn-c16-d3-res unless --quick):
  * each method runs `chains` independent chains (init and chain keys fold_in(seed, c)) through
    evaluate.methods.run_l2e / run_csghmc, i.e. the evaluation's own code path, each chain G = --steps
    minibatch gradients (equal budget), K = 10 samples (L2E: thinned G/(2K) apart over the last half;
    cSGHMC: the end of each of 10 cycles);
  * hyperparameters fixed to what the default evaluation uses: L2E lr 0.5 with the checkpoint's sampler
    configuration; cSGHMC lr 0.1, momentum decay 0.1, 10 cycles, exploration ratio 0.8;
  * seconds: the methods' own `seconds` (sampling wall time after compilation), summed over chains;
  * B5 (weight space; the L2E paper's ESS/s, METRICS.md "ESS per time", and what `python -m evaluate`
    reports): per chain, the Geyer single-chain ESS of every parameter coordinate over its K draws
    (`evaluate.entries.ess_entry`), averaged over coordinates, summed over chains, ÷ seconds;
  * B5 function space (a second view, reported alongside): scalar summary of each sample = its test-set mean
    log predictive mean_i log p(y_i | x_i, θ); ESS = blackjax.diagnostics.effective_sample_size over the
    (chains, K) array (multi-chain Geyer; between-chain spread counts against it), ÷ seconds.
B5 = (ESS_L2E / s_L2E) ÷ (ESS_cSGHMC / s_cSGHMC) for each definition.
"""
from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np
from blackjax.diagnostics import effective_sample_size

import l2e
from evaluate.config import get_preset
from evaluate.entries import ess_entry
from evaluate.methods import run_csghmc, run_l2e, split_data
from tasks import TaskSpec, build_task


def ess_per_second(chains: int = 4, steps: int = 1000, spec: TaskSpec | None = None, seed: int = 0) -> dict:
    cfg = get_preset("default")
    cfg = dataclasses.replace(cfg, num_steps=steps)
    spec = spec or cfg.tasks[0]
    task = build_task(spec)
    _, y = split_data(task, "test")
    y = np.asarray(y)
    phi, sampler, _ = l2e.load_meta_params("paper-form")
    methods = {
        "l2e": (run_l2e, {"learning_rate": 0.5, "meta_params": phi, "sampler": sampler}),
        "csghmc": (run_csghmc, {"learning_rate": 0.1}),
    }
    out = {"task": spec.name, "chains": chains, "steps": steps}
    for name, (run, hp) in methods.items():
        summaries, seconds, divergent, weight_ess = [], 0.0, 0, []
        for c in range(chains):
            key = jax.random.fold_in(jax.random.PRNGKey(seed), c)
            r = run(task, key, hp, cfg, "test")
            if r.num_finite != r.num_requested:
                divergent += 1
                continue
            lp = r.outputs[:, np.arange(len(y)), y]  # (K, n) log-softmax of the true class
            summaries.append(lp.mean(axis=1))
            weight_ess.append(ess_entry(r)["mean_ess"])
            seconds += r.seconds
        arr = np.stack(summaries)  # (chains, K)
        ess = float(effective_sample_size(arr, chain_axis=0, sample_axis=1))
        out[name] = {"ess": ess, "seconds": seconds, "ess_per_s": ess / seconds, "divergent_chains": divergent,
                     "mean_log_pred": float(arr.mean()), "samples": int(arr.size),
                     "weight_ess_per_chain": weight_ess, "weight_ess_per_s": float(np.sum(weight_ess)) / seconds}
    out["B5"] = out["l2e"]["weight_ess_per_s"] / out["csghmc"]["weight_ess_per_s"]
    out["B5 function space"] = out["l2e"]["ess_per_s"] / out["csghmc"]["ess_per_s"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1000)
    a = ap.parse_args(argv)
    res = ess_per_second(a.chains, a.steps)
    print(f"task {res['task']}  {res['chains']} chains × {res['steps']} steps, 10 samples each")
    for m in ("l2e", "csghmc"):
        r = res[m]
        print(f"  {m:7s} {r['seconds']:.2f} s; weight-space ESS per chain "
              f"{', '.join(f'{e:.2f}' for e in r['weight_ess_per_chain'])} → {r['weight_ess_per_s']:.2f} ESS/s; "
              f"function-space ESS {r['ess']:.1f} / {r['samples']} → {r['ess_per_s']:.2f} ESS/s  "
              f"(mean test log pred {r['mean_log_pred']:.3f}, divergent chains {r['divergent_chains']})")
    print(f"  B5 ESS/s ratio l2e/csghmc: weight space {res['B5']:.2f}, function space {res['B5 function space']:.2f}")
    return res


if __name__ == "__main__":
    main()
