"""The UCI energy / airfoil runs of results/evaluate_uci_smile_published (README.md there): the configuration of
results/evaluate_uci_smile with the evaluation's SMILE protocol (`protocol`), or the authors' shipped UCI
configuration of SMILE-naive / pSMILE-naive (`authors`).

  PYTHONPATH=. L2E_DATA_DIR=/work/shared/data .venv/bin/python results/evaluate_uci_smile_published/run.py protocol OUT
  PYTHONPATH=. L2E_DATA_DIR=/work/shared/data .venv/bin/python results/evaluate_uci_smile_published/run.py authors OUT [SEEDS]
"""
from __future__ import annotations

import sys

from evaluate.config import EvalConfig, method_settings
from evaluate.run import evaluate
from tasks.regression import RegressionSpec

HELD_OUT = ("UCI energy (MILE protocol, split seed 1)", "UCI airfoil (MILE protocol, split seed 1)")


def protocol() -> EvalConfig:
    """results/evaluate_uci_smile's configuration (2×16 MLP, G = 40,000, B = 64, K = 10, 3 seeds, MILE 2 chains)
    with SMILE / pSMILE as the evaluation now runs them (ε₀ tuned over step_sizes, warm-up 1/3 with the hand-over,
    5 chains as in the presets)."""
    tasks = tuple(RegressionSpec(f"uci:{d}", hidden=(16, 16)) for d in ("energy", "airfoil"))
    return EvalConfig(tasks=tasks, held_out=HELD_OUT, methods=("deep_ensemble", "mile", "smile", "psmile"),
                      num_steps=40_000, num_samples=10, batch_size=64, chunk=2, seeds=(0, 1, 2),
                      settings=method_settings(deep_ensemble=dict(lrs=(0.003, 0.01, 0.03, 0.1), momentum=0.9),
                                               mile=dict(chains=2, steps=(800, 100, 100), samples=10, thinning=10),
                                               smile=dict(chains=5), psmile=dict(chains=5)),
                      title="SMILE / pSMILE (the authors' protocol) vs MILE on UCI energy and airfoil")


def authors(seeds) -> EvalConfig:
    """The authors' shipped UCI configuration of SMILE-naive / pSMILE-naive (tabular_regr_smile_naive /
    tabular_regr_psmile_naive): fixed ε = 1e-3, no tuner, 10 chains from deep-ensemble members, 50,000 warm-up +
    10,000 sampling steps per chain, batch 256, a 16-16-16 MLP (theirs has a homoscedastic Gaussian likelihood,
    ours location and scale heads); K = 100 (10 per chain, 1,000 steps apart; theirs 1,000 per chain, 10 apart).
    G = 10 chains × 60,000 steps × 2 gradients.  No tuning (their shipped ε; the deep ensemble at lr 0.01)."""
    tasks = tuple(RegressionSpec(f"uci:{d}", hidden=(16, 16, 16)) for d in ("energy", "airfoil"))
    naive = dict(chains=10, step_sizes=(1e-3,), tuner=False, warmup_fraction=50_000 / 60_000)
    return EvalConfig(tasks=tasks, held_out=HELD_OUT, methods=("deep_ensemble", "smile", "psmile"),
                      num_steps=10 * 60_000 * 2, num_samples=100, batch_size=256, chunk=10, seeds=tuple(seeds),
                      tune=False,
                      settings=method_settings(deep_ensemble=dict(lrs=(0.01,)), smile=naive, psmile=naive),
                      title="SMILE-naive / pSMILE-naive in the authors' shipped UCI configuration")


if __name__ == "__main__":
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "protocol":
        cfg = protocol()
    else:
        cfg = authors(int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "0").split(","))
    evaluate(cfg, out, progress=False)
