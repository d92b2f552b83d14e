"""The sampler card as Markdown (card.md) and a plot of its variance ratios (card.png)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["card_markdown", "plot_card"]


def _f(v, spec=".3f"):
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def card_markdown(card: dict) -> str:
    lines = ["| target | sampler | mean err / σ | var ratio (median, 5–95 %) | T_kin | T_conf | diverged |",
             "|---|---|---|---|---|---|---|"]
    for r in card["rows"]:
        if "mean_error" not in r:
            lines.append(f"| {r['target']} | {r['sampler']} | — | — | — | — | {r['diverged_chains']} |")
            continue
        lines.append(f"| {r['target']} | {r['sampler']} | {_f(r['mean_error'])} | {_f(r['var_ratio_median'])} "
                     f"({_f(r['var_ratio_q05'], '.2f')}–{_f(r['var_ratio_q95'], '.2f')}) | {_f(r['t_kin'])} | "
                     f"{_f(r['t_conf'])} | {r['diverged_chains']} |")
    moments = [r for r in card["rows"] if r.get("moment")]
    if moments:
        lines += ["", "| target | sampler | statistic | value | exact |", "|---|---|---|---|---|"]
        lines += [f"| {r['target']} | {r['sampler']} | {r['moment']['label']} | {_f(r['moment']['value'])} | "
                  f"{_f(r['moment']['exact'])} |" for r in moments]
    lines.append("")
    lines += [f"SGHMC band (median variance ratio over {card['config']['band_seeds']} seeds), {t}: "
              f"{lo:.3f}–{hi:.3f}" for t, (lo, hi) in card["band"].items()]
    return "\n".join(lines) + "\n"


def plot_card(card: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(card["band"])
    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 3.6), squeeze=False)
    for ax, t in zip(axes[0], targets):
        rows = [r for r in card["rows"] if r["target"] == t and "var_ratio_median" in r]
        names = [r["sampler"] for r in rows]
        med = np.array([r["var_ratio_median"] for r in rows])
        err = np.array([[m - r["var_ratio_q05"], r["var_ratio_q95"] - m] for m, r in zip(med, rows)]).T
        lo, hi = card["band"][t]
        ax.axhspan(lo, hi, color="tab:green", alpha=0.25, label="SGHMC band")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.errorbar(range(len(rows)), med, yerr=err, fmt="o", capsize=3)
        ax.set_xticks(range(len(rows)), names, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_title(t)
        ax.set_ylabel("variance ratio (sample / true)")
    axes[0][0].legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
