"""Which head of a Policy-L2E φ does what: the φ with one head (or one output of the window head) zeroed — zero is
the hand-designed rule's value there — on the sampler card's banana and, with --yacht, on heteroscedastic yacht.

Usage: python -m bench.policy_head_ablation [--phi PATH|shipped] [--seeds 0,1] [--yacht] [--max-step-gain G]
                                           [--variants A,B] [--card] [--json FILE]

Variants: "φ" itself; "mass head zeroed" (the rule's mass, φ's step and damping); "window head zeroed" (φ's mass,
the rule's step and damping); "κ zeroed" and "δ zeroed" (one of the window head's two outputs); "rule" (both zeroed).
Banana: the card's configuration and builder (evaluate.methods.policy.card_builder, η₀ the sampler's default), each
seed: variance ratio median, T_kin, divergent chains (SGHMC's band on the card: results/card/card.md). Yacht
(`uci:yacht[mile-s1]/mlp-linear`, needs $L2E_DATA_DIR and results/references): `python -m evaluate leaderboard
--methods policy_learned` at G = 2,000 and 8,000, M = 10, per seed, from a temporary directory: divergent chains
and T_kin per run. --max-step-gain: PolicyConfig.max_step_gain for every variant (1: φ's step at most the rule's;
default: the sampler's default); --variants: a comma-separated subset of VARIANTS (default: all); --card: every
target of the card (evaluate.card.targets.default_targets: the two Gaussians, the mixture, the banana), the same
columns, under "card".
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from evaluate.card import CardConfig, run_sampler
from evaluate.card.targets import banana_target, default_targets
from evaluate.methods.policy import PolicyLearnedSettings, card_builder
from l2e import policy as P
from l2e.meta_model import mlp_layers_names

__all__ = ["VARIANTS", "variant", "main"]

VARIANTS = ("φ", "mass head zeroed", "window head zeroed", "κ zeroed", "δ zeroed", "rule")
YACHT = "uci:yacht[mile-s1]/mlp-linear"
ROOT = Path(__file__).resolve().parents[1]


def variant(phi, name: str):
    """φ with the outputs that `name` (VARIANTS) names set to zero (its last layer's kernel columns and biases)."""
    def zeroed(head, columns):
        last = mlp_layers_names(phi[head])[-1]
        layer = {k: np.array(v) for k, v in phi[head][last].items()}
        layer["kernel"][:, columns] = 0.0
        layer["bias"][columns] = 0.0
        return {**phi[head], last: layer}

    out = dict(phi)
    if name in ("mass head zeroed", "rule"):
        out["mass"] = zeroed("mass", [0])
    if name in ("window head zeroed", "rule", "κ zeroed", "δ zeroed"):
        out["window"] = zeroed("window", {"κ zeroed": [0], "δ zeroed": [1]}.get(name, [0, 1]))
    return out


def _banana(path: Path, seed: int, gain: float, target=None) -> dict:
    settings = PolicyLearnedSettings(meta_params=str(path), max_step_gain=gain)
    r = run_sampler("policy", card_builder(settings), target or banana_target(), CardConfig(), seed)
    return {"seed": seed, **{k: r.get(k) for k in ("var_ratio_median", "t_kin", "diverged_chains")}}


def _yacht(path: Path, seeds: list[int], work: Path, gain: float) -> list[dict]:
    out = work / f"yacht_{path.stem}"
    cmd = [sys.executable, "-m", "evaluate", "leaderboard", "--reference", str(ROOT / "results" / "references"),
           "--task", YACHT, "--methods", "policy_learned", "--extend", "0", "--budgets", "2000,8000", "--chains", "10",
           "--seeds", ",".join(map(str, seeds)), "--set", f"settings.policy_learned.meta_params={path}",
           "--set", f"settings.policy_learned.max_step_gain={gain!r}", "--output", str(out), "--quiet"]
    subprocess.run(cmd, check=True)
    task = json.loads(next((out / "tasks").glob("*.json")).read_text())
    rows = task["result"]["methods"]["policy_learned"]["choices"]["oracle"]["seeds"]
    return [{"seed": int(s), "budget": r["budget"], "divergent_chains": r["divergent_chains"], "t_kin": r["t_kin"]}
            for s, runs in rows.items() for r in runs]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.policy_head_ablation", description=__doc__.splitlines()[0])
    p.add_argument("--phi", default="shipped", help="a saved φ (l2e.policy.save_meta_params) or 'shipped'")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--yacht", action="store_true", help="also run heteroscedastic yacht (a few minutes per variant)")
    p.add_argument("--max-step-gain", type=float, default=P.PolicyConfig.max_step_gain,
                   help="PolicyConfig.max_step_gain for every variant (default: the sampler's)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="a comma-separated subset (default: all)")
    p.add_argument("--card", action="store_true", help="also run every card target (the Gaussians and the mixture)")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s]
        if not seeds or min(seeds) < 0:
            raise ValueError(a.seeds)
        phi = P.load_meta_params(a.phi)
        P.PolicyConfig(max_step_gain=a.max_step_gain)
        names = [v for v in a.variants.split(",") if v]
        if not names or set(names) - set(VARIANTS):
            raise ValueError(f"--variants: choose from {', '.join(VARIANTS)}")
    except (OSError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0] or 'bad --seeds'}", file=sys.stderr)
        return 2
    res = {"phi": a.phi, "seeds": seeds, "max_step_gain": a.max_step_gain, "banana": {}, "yacht": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names):
            path = Path(tmp) / f"v{i}.npz"
            P.save_meta_params(path, variant(phi, name))
            res["banana"][name] = [_banana(path, s, a.max_step_gain) for s in seeds]
            if a.card:
                res.setdefault("card", {})[name] = [{"target": t.name, **_banana(path, s, a.max_step_gain, t)}
                                                    for t in default_targets() for s in seeds]
            if a.yacht:
                res["yacht"][name] = _yacht(path, seeds, Path(tmp), a.max_step_gain)
            cells = [f"banana {r['var_ratio_median']} / T_kin {r['t_kin']} / {r['diverged_chains']} div"
                     for r in res["banana"][name]]
            cells += [f"{r['target']} s{r['seed']}: {r['var_ratio_median']} / T_kin {r['t_kin']} / "
                      f"{r['diverged_chains']} div" for r in res.get("card", {}).get(name, [])]
            cells += [f"yacht G={r['budget']} s{r['seed']}: {r['divergent_chains']} div, T_kin {r['t_kin']:.2f}"
                      for r in res["yacht"].get(name, [])]
            print(f"{name}: " + "; ".join(cells), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
