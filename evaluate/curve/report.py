"""The budget curves' report: curve.md (floors, gradients to 1.1 × the floor per method, the strongest hand-designed
sampler per task) and the PNGs (TV, energy distance and predictive-variance ratio against gradients and seconds)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from evaluate.curve.fidelity import DISPERSION_BAND, FLOOR_FACTOR, dispersion_band
from evaluate.methods import get_method
from evaluate.tuning import hp_label

__all__ = ["curve_document", "curve_markdown", "learned_vs_bar", "merge_results", "plot_curves", "png_name",
           "strongest_hand_designed"]

METRICS = (("tv", "TV"), ("energy", "E²"))


def _fmt(v, spec=".3g") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _to_floor(summary: dict, add: float = 0.0) -> str:
    """'mean ± se (r/s)' of a gradients-to-floor summary, `add` gradients added (tuning-inclusive)."""
    if not summary["reached"]:
        return f"not reached (0/{summary['seeds']})"
    text = f"{summary['mean'] + add:,.0f}"
    if summary["se"] is not None:
        text += f" ± {summary['se']:,.0f}"
    if summary["reached"] < summary["seeds"]:
        text += f" ({summary['reached']}/{summary['seeds']} seeds)"
    return text


def _pv_band(floors: dict) -> str:
    band = dispersion_band(floors).get("predictive_variance")
    if band is None:
        return (f" Predictive-variance band: [{DISPERSION_BAND[0]}, {DISPERSION_BAND[1]}] (a run made before the "
                "floors held the K-draw spread; re-read it with --merge DIR --reference).")
    div, lo, hi = band
    sp = floors["predictive_variance"]
    return (f" Predictive-variance ratio of K exact draws: median {div:.3f} "
            f"(5–95 %: {sp['q05']:.3f}–{sp['q95']:.3f});"
            f" a run's ratio is in band in [{div * lo:.3f}, {div * hi:.3f}] (÷ {div:.3f}: [{lo:.2f}, {hi:.2f}]).")


def _last_point_stats(choice: dict) -> dict:
    """Seed means at the largest budget: the dispersion ratios, T_kin and divergent chains."""
    last = [points[-1] for points in choice["seeds"].values()]
    out = {"divergent": sum(p["divergent_chains"] for p in last)}
    t = [p["t_kin"] for p in last if p["t_kin"] is not None]
    out["t_kin"] = float(np.mean(t)) if t else None
    ratios = [p["ratios"] for p in last if p["ratios"]]
    out["ratios"] = {k: float(np.mean([r[k] for r in ratios if r.get(k) is not None]))
                     for k in (ratios[0] if ratios else {})}
    return out


def learned(name: str) -> bool:
    """Whether a curve row is a learned sampler (its method runs a meta-trained checkpoint)."""
    return bool(get_method(name.split("@")[0]).needs_sampler) or bool(get_method(name.split("@")[0]).needs_released)


def strongest_hand_designed(task: dict, metric: str = "energy") -> tuple[str, float] | None:
    """(row name, mean gradients) of the hand-designed row that reaches 1.1 × the floor on `metric` with the fewest
    gradients at its best (oracle-tuned, tuning not counted), among rows that reach it on every seed; None if none."""
    best = None
    for name, row in task["methods"].items():
        if learned(name):
            continue
        s = row["choices"]["oracle"]["to_floor"][metric]
        if s["reached"] == s["seeds"] and (best is None or s["mean"] < best[1]):
            best = (name, s["mean"])
    return best


def learned_vs_bar(task: dict, metric: str) -> list[tuple[str, str]]:
    """[(learned row, text)]: each learned row's gradients to 1.1 × the floor on `metric` (its oracle choice; a
    tuning-free sampler has one point, so both choices are the same run) ÷ the strongest hand-designed row's."""
    bar = strongest_hand_designed(task, metric)
    out = []
    for name, row in task["methods"].items():
        if not learned(name):
            continue
        s = row["choices"]["oracle"]["to_floor"][metric]
        if bar is None:
            out.append((name, "no hand-designed bar"))
        elif s["reached"] < s["seeds"]:
            out.append((name, f"not reached on every seed ({s['reached']}/{s['seeds']}); bar {bar[0]}"))
        else:
            out.append((name, f"{s['mean'] / bar[1]:.2f} × {bar[0]}'s gradients"))
    return out


FLOOR_RTOL = 1e-5
"""Relative tolerance between the same reference's floors computed on two machines: the energy floor's pairwise
distances come from numpy's BLAS, whose kernel is picked per CPU (‖x‖² + ‖y‖² − 2x·y cancels); across OpenBLAS's
SkylakeX, Zen, Haswell, Sandybridge and Prescott kernels it moved by at most 1.05e-6 relative (tests/test_isa_levels.py);
another reference differs in the first digits."""


def floors_agree(a, b, rtol: float = FLOOR_RTOL) -> bool:
    """Two floor records equal up to `rtol` in every number and exactly in everything else (K, resamples, draws)."""
    import math

    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(floors_agree(a[k], b[k], rtol) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and math.isclose(a, b, rel_tol=rtol, abs_tol=0.0))
    return a == b


def merge_results(parts: list[dict], replace: bool = False) -> dict:
    """One curve result from several runs of the same protocol (K, budgets, chain allocations, seeds, tuning budget
    and seed; per task the same floors), their method rows pooled. How a separate run of a new sampler is read
    against a committed run of the rivals. A method's row in two runs is a ValueError, unless `replace`: then the
    later run's row replaces the earlier (a sampler changed and re-run), listed per task in "replaced". Every part's
    "off_curve" notes are kept (`_off_curve`)."""
    first = parts[0]
    keys = ("budgets", "chains", "seeds", "tune_budget", "tune_seed")
    out = {"k": first["k"], "curve": dict(first["curve"]), "methods": [], "tasks": {},
           "seconds": sum(p.get("seconds", 0.0) for p in parts), "merged_from": len(parts)}
    for part in parts:
        if part["k"] != first["k"] or not all(json_equal(part["curve"][k], first["curve"][k]) for k in keys):
            raise ValueError("curve runs to merge must share K, budgets, chains, seeds and the tuning budget / seed")
        out["methods"] += [m for m in part["methods"] if m not in out["methods"]]
        for name, task in part["tasks"].items():
            if name not in out["tasks"]:
                out["tasks"][name] = {**task, "methods": dict(task["methods"])}
                continue
            have = out["tasks"][name]
            if not floors_agree(have["floors"], task["floors"]):
                raise ValueError(f"{name}: the runs' K-draw floors differ (another reference?)")
            clash = set(have["methods"]) & set(task["methods"])
            if clash and not replace:
                raise ValueError(f"{name}: method rows in more than one run: {', '.join(sorted(clash))} (--replace "
                                 "to let the later run's rows replace the earlier)")
            if clash:
                have["replaced"] = sorted(set(have.get("replaced", [])) | clash)
            have["methods"].update(task["methods"])
            have["seconds"] = have.get("seconds", 0.0) + task.get("seconds", 0.0)
    off = _off_curve(parts, out)
    if off:
        out["off_curve"] = off
    return out


def _off_curve(parts: list[dict], merged: dict) -> dict[str, str]:
    """Every part's "not on the curves" notes ({method: why}), a method's distinct reasons joined; a method with rows
    in the merged result is on its curves, so its note from another part is kept as having been left out there."""
    rows = {r.split("@")[0] for t in merged["tasks"].values() for r in t["methods"]}
    out: dict[str, list[str]] = {}
    for i, part in enumerate(parts):
        for method, why in (part.get("off_curve") or {}).items():
            text = why if method not in rows else f"left out of run {i + 1} of the merge ({why}); its rows are " \
                                                  "from another run"
            if text not in out.setdefault(method, []):
                out[method].append(text)
    return {m: "; ".join(whys) for m, whys in out.items()}


def json_equal(a, b) -> bool:
    """a == b with tuples and lists alike (a result read from curve.json against one made in memory)."""
    norm = (lambda v: list(v) if isinstance(v, (list, tuple)) else v)  # noqa: E731
    return norm(a) == norm(b)


def png_name(task: str) -> str:
    """The file name of a task's curve PNG (plot_curves writes it beside curve.md)."""
    return "curve_" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in task) + ".png"


def _what_ran(results: dict) -> list[str]:
    """One line saying what ran: the methods, the tasks, budgets, chain allocations and seeds."""
    cfg, tasks = results["curve"], list(results["tasks"])
    methods = results.get("methods") or list(dict.fromkeys(
        r.split("@")[0] for t in results["tasks"].values() for r in t["methods"]))
    return [f"What ran: {len(methods)} method{'' if len(methods) == 1 else 's'} ({', '.join(methods)}) on "
            f"{len(tasks)} task{'' if len(tasks) == 1 else 's'} ({', '.join(tasks)}); G = "
            f"{', '.join(str(g) for g in cfg['budgets'])} minibatch gradients, M = "
            f"{', '.join(map(str, cfg['chains']))} chains, seeds {cfg['seeds']}. Per task: the strongest "
            "hand-designed sampler, the table, the plot; the protocol is the last section "
            "([Configuration](#configuration)).", ""]


def curve_markdown(results: dict, pngs: list[str] | None = None) -> str:
    """curve.md of a `python -m evaluate curve` run, findings first: what ran; per task the bar, the learned
    samplers against it, the floors, the table and its plot (``pngs``: the file names plot_curves wrote; a task's
    plot is shown in its section); the protocol last under "## Configuration"."""
    cfg = results["curve"]
    protocol = [f"Budgets G = {', '.join(str(g) for g in cfg['budgets'])} minibatch gradients; K = {results['k']} draws "
                f"per run; chain allocations M = {', '.join(map(str, cfg['chains']))}; seeds {cfg['seeds']}; grids tuned "
                f"once at G = {cfg['tune_budget']} (tuning keys of seed {cfg['tune_seed']}), by validation NLL and by "
                f"the oracle (TV/floor + E²/floor to the reference). Gradients to reach {FLOOR_FACTOR} × the K-draw floor "
                f"(interpolated in log G; counted only with the weight-norm and pairwise ratios in [{DISPERSION_BAND[0]}, "
                f"{DISPERSION_BAND[1]}] and the predictive-variance ratio in the band K exact draws span, in each "
                "task's floor line); mean ± s.e. over the seeds that reach it. Tuning-inclusive: + the grid's gradients "
                "(points × tuning budget)."]
    if any("warm_start" in r["tuning"] for t in results["tasks"].values() for r in t["methods"].values()):
        protocol[0] += (" Warm-started rows start from the deep ensemble at the lr its own grid's tuning chose by the "
                        "oracle, once per task at the tuning budget (shown in hp; both choices), and their "
                        "tuning-inclusive addend includes that grid's gradients.")
    lines = _what_ran(results)
    if results.get("off_curve"):
        lines += ["Not on the curves: " + "; ".join(f"{m}, {why}" for m, why in results["off_curve"].items()) + ".",
                  ""]
    for name, task in results["tasks"].items():
        f = task["floors"]
        lines += [f"## {name}", ""]
        bar = {m: strongest_hand_designed(task, m) for m, _ in METRICS}
        lines += ["Strongest hand-designed sampler at its best (oracle-tuned, grid not counted): " + "; ".join(
            f"{label}: {b[0]} ({b[1]:,.0f} gradients)" if b else f"{label}: none reaches the floor on every seed"
            for (m, label), b in zip(METRICS, bar.values())), ""]
        versus = {label: learned_vs_bar(task, m) for m, label in METRICS}
        if any(versus.values()):
            lines += ["Learned samplers against that bar: " + "; ".join(
                f"{row} ({label}): {text}" for label, rows in versus.items() for row, text in rows), ""]
        lines += [f"K-draw floor ({f['resamples']} resamples of K = {f['k']} of the reference's {f['draws']} draws): "
                  f"TV {_fmt(f['tv']['median'])} (10–90 %: {_fmt(f['tv']['q10'])}–{_fmt(f['tv']['q90'])}), "
                  f"E² {_fmt(f['energy']['median'])} ({_fmt(f['energy']['q10'])}–{_fmt(f['energy']['q90'])})."
                  + _pv_band(f), ""]
        lines += ["| method | choice | hp | TV: gradients to floor | + tuning | E²: gradients to floor | + tuning | "
                  "ratios at max G (w / pair / pred-var) | T_kin | divergent |", "|---|---|---|---|---|---|---|---|---|---|"]
        for row_name, row in task["methods"].items():
            grid = row["tuning"]["gradients"]
            for choice, c in row["choices"].items():
                last = _last_point_stats(c)
                r = " / ".join(_fmt(v, ".2f") for v in last["ratios"].values()) or "—"
                hp = ", ".join(f"{k}={v:g}" for k, v in c["hp"].items() if isinstance(v, (int, float))) or "—"
                if "warm_start" in row["tuning"]:  # a warm-started row: the lr of the ensemble it starts from
                    hp += f" (from deep_ensemble {hp_label(row['tuning']['warm_start']['hp'])})"
                lines.append(f"| {row_name} | {choice} | {hp} | {_to_floor(c['to_floor']['tv'])} | "
                             f"{_to_floor(c['to_floor']['tv'], grid)} | {_to_floor(c['to_floor']['energy'])} | "
                             f"{_to_floor(c['to_floor']['energy'], grid)} | {r} | {_fmt(last['t_kin'], '.2f')} | "
                             f"{last['divergent']} |")
        lines.append("")
        if pngs and png_name(name) in pngs:
            lines += [f"![{png_name(name)}]({png_name(name)})", ""]
    shown = {png_name(n) for n in results["tasks"]}
    lines += [f"![{p}]({p})" for p in (pngs or []) if p not in shown]
    lines += ["## Configuration", ""] + protocol
    return "\n".join(lines)


def curve_document(results: dict, pngs: list[str], head: str = "") -> str:
    """The whole curve.md: the title, ``head`` (a merged run's parts) and curve_markdown(results, pngs)."""
    return "# Budget curves\n\n" + (head + "\n\n" if head else "") + curve_markdown(results, pngs) + "\n"


def _positive_xlim(ax) -> None:
    """x limits from the plotted points with a finite value (a log axis whose rows all diverged has none: its limits
    would stay at matplotlib's 0–1, which a log scale refuses, and the whole curve run would fail at its plot)."""
    rows = [line for line in ax.get_lines() if not line.get_label().startswith("_")]  # not the floors' lines
    if any(np.isfinite(np.asarray(line.get_ydata(), float)).any() for line in rows):
        return
    xs = [x for line in rows for x in np.asarray(line.get_xdata(), float) if np.isfinite(x) and x > 0]
    ax.set_xlim(min(xs) / 1.5, max(xs) * 1.5) if xs else ax.set_xlim(1.0, 10.0)


def _mean_curve(choice: dict, key: str, x: str = "gradients") -> tuple[np.ndarray, np.ndarray]:
    runs = list(choice["seeds"].values())
    xs = np.mean([[p[x] for p in pts] for pts in runs], axis=0)
    ys = np.asarray([[np.nan if p[key] is None else p[key] for p in pts] for pts in runs], np.float64)
    return xs, np.nanmean(ys, axis=0) if np.isfinite(ys).any() else ys[0]


def plot_curves(results: dict, out_dir: Path) -> list[str]:
    """One PNG per task: TV, E² and the predictive-variance ratio against gradients, and TV against seconds (seed
    means, the oracle choice), the floors as bands. Returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette, markers = plt.get_cmap("tab20").colors, "os^vDPX*"
    names = []
    for name, task in results["tasks"].items():
        fig, axes = plt.subplots(1, 4, figsize=(24, 5))
        for i, (row_name, row) in enumerate(task["methods"].items()):
            c = row["choices"]["oracle"]
            # one colour and marker per row (20 colours × 8 markers), solid for the learned samplers
            kw = dict(ls="-" if learned(row_name) else "--", color=palette[i % 20], marker=markers[i // 20 % 8], ms=3,
                      label=row_name)
            for ax, key in zip(axes[:2], ("tv", "energy")):
                ax.plot(*_mean_curve(c, key), **kw)
            xs = _mean_curve(c, "tv")[0]
            pv = [np.asarray([np.nan if not p["ratios"] else p["ratios"].get("predictive_variance", np.nan)
                              for p in pts], float) for pts in zip(*c["seeds"].values())]
            pv = [np.nanmean(v) if np.isfinite(v).any() else np.nan for v in pv]  # no warning for a diverged point
            axes[2].plot(xs, pv, **kw)
            axes[3].plot(*_mean_curve(c, "tv", "seconds"), **kw)
        for ax, key, label in ((axes[0], "tv", "TV to the reference"), (axes[1], "energy", "energy distance E²"),
                               (axes[3], "tv", "TV to the reference")):
            f = task["floors"][key]
            ax.axhspan(f["q10"], f["q90"], color="grey", alpha=0.25)
            ax.axhline(f["median"], color="black", lw=1)
            ax.axhline(FLOOR_FACTOR * f["median"], color="black", lw=1, ls=":")
            ax.set_ylabel(label)
            ax.set_yscale("log")
        div, lo, hi = dispersion_band(task["floors"]).get("predictive_variance", (1.0, *DISPERSION_BAND))
        axes[2].axhspan(div * lo, div * hi, color="grey", alpha=0.25)
        axes[2].set_ylabel("predictive-variance ratio (grey: in band)")
        axes[2].set_yscale("log")  # hot chains read 10²–10⁵ on regression
        if not any(np.isfinite(np.asarray(line.get_ydata(), float)).any() for line in axes[2].get_lines()):
            axes[2].set_ylim(div * lo / 2.0, div * hi * 2.0)
        for ax, xl in zip(axes, ("gradients", "gradients", "gradients", "seconds")):
            ax.set_xscale("log")
            ax.set_xlabel(xl)
            _positive_xlim(ax)
        axes[3].legend(fontsize=6, ncol=1 + len(task["methods"]) // 24, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle(f"{name}: fidelity per gradient (oracle-tuned; grey: K-draw floor 10–90 %, line: median, "
                     f"dotted: {FLOOR_FACTOR} × median)")
        fig.tight_layout()
        fname = png_name(name)
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        names.append(fname)
    return names
