"""The sampler card of Kinetic-L2E next to SGHMC and the paper-form L2E (how checkpoints/kinetic/card.md was made).

    python -m bench.kinetic_card [--set step_factor=0.1 ...] [--output checkpoints/kinetic]

Rows: the hand-designed SGHMC; the shipped paper-form L2E ("paper-form"); Kinetic-L2E at meta-training's start
(μ ≡ 0, i.e. SGHMC), at one random μ-MLP (mu_scale 1 and 0.3) and the shipped meta-trained one ("kinetic").
Writes card.json and card.md (evaluate.card's format) into --output.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp

import l2e
from evaluate.card import CardConfig, card_markdown, hand_designed, learned_builder, sampler_card
from base.io import atomic_write_text
from cli import apply_overrides
from l2e.kinetic import KineticConfig, kinetic
from l2e.meta_model import init_mu_params


def kinetic_builder(meta_params, config: KineticConfig):
    def build(post, eps, c, smin, steps):
        cfg = dataclasses.replace(config, learning_rate=float(eps**2 * post.data_size), friction=float(c))
        return kinetic(post, meta_params, cfg), lambda s: jnp.ones(())

    return build


def samplers(checkpoint=None) -> dict:
    out = {"sghmc": hand_designed()["sghmc"]}
    params, config, _ = l2e.load_meta_params("paper-form")
    out["l2e (paper-form)"] = learned_builder(params, config)
    out["kinetic (init: mu=0)"] = kinetic_builder(init_mu_params(jax.random.PRNGKey(0)), KineticConfig())
    rnd = init_mu_params(jax.random.PRNGKey(1000), zero_output=False)
    out["kinetic (random, mu_scale 1)"] = kinetic_builder(rnd, KineticConfig(mu_scale=1.0))
    out["kinetic (random, mu_scale 0.3)"] = kinetic_builder(rnd, KineticConfig(mu_scale=0.3))
    if checkpoint is None and (l2e.checkpoint.shipped_checkpoint("kinetic") / "meta_params").is_dir():
        checkpoint = "kinetic"
    if checkpoint is not None:
        params, config, _ = l2e.load_meta_params(checkpoint)
        out["kinetic (meta-trained)"] = kinetic_builder(params, config)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--output", default=str(Path(__file__).resolve().parents[1] / "checkpoints" / "kinetic"))
    ap.add_argument("--checkpoint", default=None, help="the meta-trained Kinetic-L2E (default: the shipped \"kinetic\")")
    args = ap.parse_args()
    cfg = apply_overrides(CardConfig(), args.overrides).check()
    card = sampler_card(samplers(args.checkpoint), cfg, progress=lambda s: print(s, flush=True))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "card.json", json.dumps(card, indent=1))
    atomic_write_text(out / "card.md", "# Sampler card: Kinetic-L2E\n\n" + card_markdown(card))
    print(card_markdown(card))


if __name__ == "__main__":
    main()
