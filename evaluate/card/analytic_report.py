"""The analytic benchmark's report (evaluate.card.analytic): per target a sampler × noise table of the best SMILE
error and every best point with the card's metrics (markdown), and the error against step size (a figure)."""
from __future__ import annotations

import math

__all__ = ["analytic_markdown", "plot_analytic"]


def _f(v, spec=".3g"):
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def analytic_markdown(res: dict) -> str:
    """Per target a sampler × noise table of the best SMILE error, then every best point with the card's metrics."""
    out = []
    noises = res["config"]["noises"]
    for t in res["config"]["targets"]:
        out += [f"**{t}** — SMILE error at the best step size (mean ± s.e. over {res['config']['seeds']} seeds)", "",
                "| sampler | " + " | ".join(noises) + " |", "|---" * (len(noises) + 1) + "|"]
        for name in res["step_sizes"]:
            cells = {r["noise"]: r for r in res["best"] if r["target"] == t and r["sampler"] == name}
            out.append(f"| {name} | " + " | ".join(
                f"{_f(cells[n]['metric'])} ± {_f(cells[n]['metric_se'], '.2g')}" if cells[n]["metric"] is not None
                else "diverged" for n in noises) + " |")
        out.append("")
    for name, why in res.get("skipped", {}).items():
        out += [f"Not run: {name} — {why}.", ""]
    out += ["| target | noise | sampler | best step | SMILE error | var ratio | mean err / σ | T_kin | T_conf | "
            "final ε |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["best"]:
        out.append(f"| {r['target']} | {r['noise']} | {r['sampler']} | {_f(r['step_size'])} | {_f(r['metric'])} | "
                   f"{_f(r['var_ratio'])} ± {_f(r['var_ratio_se'], '.2g')} | {_f(r['mean_error'])} | "
                   f"{_f(r['t_kin'])} | {_f(r['t_conf'])} | {_f(r['final_step_size'])} |")
    return "\n".join(out) + "\n"


def plot_analytic(res: dict, path) -> None:
    """One panel per (target, noise): SMILE error against step size (each sampler in its own units), log–log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets, noises = res["config"]["targets"], res["config"]["noises"]
    fig, axes = plt.subplots(len(targets), len(noises), figsize=(3.0 * len(noises), 2.6 * len(targets)),
                             squeeze=False)
    for i, t in enumerate(targets):
        for j, n in enumerate(noises):
            ax = axes[i][j]
            for k, name in enumerate(res["step_sizes"]):
                pts = [r for r in res["rows"] if r["target"] == t and r["noise"] == n and r["sampler"] == name
                       and r["diverged"] == 0 and r["metric"] is not None and r["step_size"] is not None]
                if pts:
                    color, style = plt.get_cmap("tab10")(k % 10), "o" + ("-", ":", "--")[k // 10 % 3]
                    ax.plot([r["step_size"] for r in pts], [r["metric"] for r in pts], style, ms=3, c=color, label=name)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{t} / {n}", fontsize=9)
            if j == 0:
                ax.set_ylabel("SMILE error")
            if i == len(targets) - 1:
                ax.set_xlabel("step size (own units)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8) if labels else None
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
