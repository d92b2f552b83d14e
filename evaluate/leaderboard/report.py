"""The leaderboard's report: leaderboard.md (what ran, the table, the family breakdown, the distance to the floor by
budget, T_kin by that distance, the per-task bests, the performance profiles, the skipped tasks, the definitions and
the command) and the profile PNGs."""
from __future__ import annotations

import io
import math
from pathlib import Path

from base.io import atomic_write_bytes

from evaluate.curve.fidelity import FLOOR_FACTOR
from evaluate.leaderboard.aggregate import CHOICES, FAMILIES, T_KIN_TOLERANCE, WITHIN

__all__ = ["leaderboard_markdown", "plot_profiles", "profile_png"]


def _num(v, spec=".2f") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def profile_png(choice: str) -> str:
    """The file name of a tuning choice's performance-profile PNG."""
    return f"profile_{choice}.png"


def _what_ran(doc: dict) -> list[str]:
    conf, tasks = doc["configuration"], doc["tasks"]
    extended = sorted(doc.get("extended") or {})
    ext = (f"; the curves of a task that no row solved on any seed by the largest budget continued at G = "
           f"{conf['extend']:,} ({', '.join(extended) if extended else 'none was'})" if conf["extend"] else
           "; no extension (--extend 0)")
    secs = doc.get("seconds") or {}
    lines = [f"What ran: {len(tasks)} task{'' if len(tasks) == 1 else 's'} ({', '.join(tasks)}); "
             f"{len(conf['methods'])} methods ({', '.join(conf['methods'])}) -> {len(doc['rows'])} rows (method × "
             f"chain allocation M × tuning choice); budgets G = {', '.join(f'{g:,}' for g in conf['budgets'])} "
             f"minibatch gradients{ext}; M = {', '.join(map(str, conf['chains']))}; seeds {conf['seeds']}; grids "
             f"tuned once per task at G = {conf['tune_budget']:,}; K = {conf['k']} draws per run (preset "
             f"{conf['preset']}); references {conf['reference']}"
             + (f"; overrides {', '.join(conf['overrides'])}." if conf.get("overrides") else "."),
             "", f"Wall time: {secs.get('curves', 0.0):,.0f} s of curve runs (every task, resumed runs included); "
             f"this invocation {secs.get('this_run', 0.0):,.0f} s."]
    if doc.get("partial"):
        lines += ["", f"**Partial**: {doc['partial']}."]
    if doc.get("left_out"):
        lines += ["", "Left out: " + "; ".join(f"{m} ({why})" for m, why in doc["left_out"].items()) + "."]
    return lines + [""]


def _table(doc: dict) -> list[str]:
    pairs = doc["rows"][0]["pairs"] if doc["rows"] else 0
    lines = ["## Table", "",
             f"Sorted by reach rate, then median ratio. Reach: (task, seed) pairs solved ÷ all {pairs} pairs. "
             f"Median ratio: over the {len(doc['ratio_tasks'])} tasks some row solves on every seed (a task's ratio: "
             "the row's mean gradients to the floor ÷ the task's best row's; a row that misses a seed of the task "
             "counts as infinity; — where the median is infinite). + tuning: the same with the tuning gradients "
             f"added (its own per-task best, over {len(doc['ratio_tasks_tuning'])} tasks). P(≤ {WITHIN} × best): "
             f"the share of {doc['bootstrap']['resamples']} bootstrap resamples of those tasks in which the row's "
             f"median ratio is within {WITHIN} × the best row's. Divergent: chains over every run. T_kin off: runs "
             f"whose window's mean T_kin is outside 1 ± {T_KIN_TOLERANCE:g} ÷ the runs that report one (— none do).",
             "", f"| rank | row | M | tuning | reach | median ratio | + tuning | P(≤ {WITHIN} × best) | divergent | "
             "T_kin off |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(doc["rows"], 1):
        lines.append(f"| {i} | {r['row']} | {r['chains']} | {r['choice']} | {_pct(r['reach'])} ({r['solved']}/"
                     f"{r['pairs']}) | {_num(r['median_ratio'])} | {_num(r['median_ratio_tuning'])} | "
                     f"{_num(r['within_best'])} | {r['divergent_chains']} | {_t_kin(r)} |")
    return lines + [""]


def _t_kin(row: dict) -> str:
    runs = row.get("t_kin_runs", 0)
    return f"{row.get('t_kin_off', 0)}/{runs}" if runs else "—"


def _families(doc: dict) -> list[str]:
    fams = [f for f in FAMILIES if any(f in t["families"] for t in doc["per_task"].values())]
    if not fams:
        return []
    count = {f: sum(f in t["families"] for t in doc["per_task"].values()) for f in fams}
    lines = ["## By family", "", "Each cell: reach rate / median ratio over the family's tasks (tasks.zoo.families).",
             "", "| row | tuning | " + " | ".join(f"{f} ({count[f]})" for f in fams) + " |",
             "|---|---|" + "---|" * len(fams)]
    for r in doc["rows"]:
        cells = [f"{_pct(r['families'][f]['reach'])} / {_num(r['families'][f]['median_ratio'])}"
                 if f in r["families"] else "—" for f in fams]
        lines.append(f"| {r['row']} | {r['choice']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _inf(v) -> str:
    return "∞" if v is None else f"{v:.2f}"


def _distance(doc: dict) -> list[str]:
    budgets = doc["configuration"]["budgets"]
    rows = [r for r in doc["rows"] if r.get("distance")]
    if not rows:  # a document written before the distances were recorded
        return []
    lines = ["## Distance to the floor by budget", "",
             "Each cell: the geometric mean / the median, over the (task, seed) pairs, of a run's max(TV ÷ the TV "
             "floor, E² ÷ the E² floor) at budget G (1 = at the K-draw floor; ∞ where a run has no TV or energy, "
             "every chain divergent; the pairs counted in brackets where a row has fewer runs at G than pairs). A "
             "continuous companion to the reach: near the floor a K-draw estimate crosses the reach's threshold at "
             "some budgets and not at others.", "",
             "| row | tuning | " + " | ".join(f"G = {g:,}" for g in budgets) + " |",
             "|---|---|" + "---|" * len(budgets)]
    for r in rows:
        at = {d["budget"]: d for d in r["distance"]}
        cells = [f"{_inf(at[g]['geomean'])} / {_inf(at[g]['median'])}" + (
            f" ({at[g]['pairs']})" if at[g]["pairs"] != r["pairs"] else "") if g in at else "—" for g in budgets]
        lines.append(f"| {r['row']} | {r['choice']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _arrival(doc: dict) -> list[str]:
    rows = [r for r in doc["rows"] if r.get("t_kin_distance")]
    if not rows:  # no row reports T_kin, or a document written before the breakdown was recorded
        return []
    classes = rows[0]["t_kin_distance"]
    bounds = [c["within"] for c in classes if c["within"] is not None]
    heads = [f"≤ {bounds[0]:g} ×"] + [f"{a:g}–{b:g} ×" for a, b in zip(bounds, bounds[1:])] + [f"> {bounds[-1]:g} ×"]
    lines = ["## T_kin by distance to the floor", "",
             f"Each cell: the runs with T_kin off (outside 1 ± {T_KIN_TOLERANCE:g}) ÷ the runs that report T_kin, "
             "by the run's distance to the floor (as above; every budget counts): whether a row's kinetic "
             f"temperature is right where its draws have arrived (≤ {bounds[0]:g} ×, the reach's threshold), apart "
             "from the transient's heat (chains still descending carry the potential energy they shed).", "",
             "| row | tuning | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for r in rows:
        cells = [f"{c['t_kin_off']}/{c['runs']}" if c["runs"] else "—" for c in r["t_kin_distance"]]
        lines.append(f"| {r['row']} | {r['choice']} | " + " | ".join(cells) + " |")
    return lines + [""]


def _best(best: dict) -> str:
    if best["rule"] is None:
        return "none (no row solves any seed)"
    text = f"{best['row']}: {best['cost']:,.0f}"
    return text if best["rule"] == "every seed" else f"none on every seed; cheapest pair {text} (seed {best['seed']})"


def _per_task(doc: dict) -> list[str]:
    lines = ["## Per task", "", "Best: the row with the smallest mean gradients to the floor among the rows that solve "
             "every seed (tuning-inclusive: its own best); where none does, the cheapest single (row, seed) pair.", "",
             "| task | families | seeds | best (gradients) | best + tuning | extended | seconds |",
             "|---|---|---|---|---|---|---|"]
    for name, t in doc["per_task"].items():
        ext = (doc.get("extended") or {}).get(name)
        ext_text = "—" if not ext else f"to {ext['budget']:,}" + (
            f" (not: {', '.join(ext['mismatched'])})" if ext.get("mismatched") else "")
        cut = (doc.get("extension_dropped") or {}).get(name)
        if cut:  # a merged task some runs extended and others not: every row cut back to the budgets
            ext_text = f"— (merged: the points at {cut:,} dropped)"
        secs = _num((doc.get("task_seconds") or {}).get(name), ",.0f")
        lines.append(f"| {name} | {', '.join(t['families'])} | {t['seeds']} | {_best(t['best'])} | "
                     f"{_best(t['best_tuning'])} | {ext_text} | {secs} |")
    return lines + [""]


def _profiles(doc: dict, pngs: list[str]) -> list[str]:
    lines = ["## Performance profiles", "",
             "Per tuning choice, among its rows: for each (task, seed) pair r = the row's gradients to the floor ÷ "
             "the smallest of those rows' on the pair (infinity where unsolved); ρ(τ) = the share of pairs with "
             "r ≤ τ. Left panel: without tuning gradients; right: with them. ρ at a few τ:", ""]
    for choice, p in doc["profiles"].items():
        taus = p["tau"]
        lines += [f"| {choice} | " + " | ".join(f"τ={t:g}" for t in taus) + " |", "|---|" + "---|" * len(taus)]
        lines += [f"| {k.rsplit('/', 1)[0]} | " + " | ".join(f"{v:.2f}" for v in rho) + " |"
                  for k, rho in zip(p["rows"], p["rho"])]
        lines.append("")
    lines += [f"![{p}]({p})" for p in pngs]
    return lines + [""]


def leaderboard_markdown(doc: dict, pngs: list[str]) -> str:
    """leaderboard.md of a leaderboard document (leaderboard.json's dict: the aggregate of
    evaluate.leaderboard.aggregate.leaderboard with "configuration", "tasks", "skipped", "extended", "seconds",
    "task_seconds", "command"); pngs: the profile PNGs written beside it."""
    lines = ["# Leaderboard", ""] + _what_ran(doc) + _table(doc) + _families(doc) + _distance(doc) + _arrival(doc)
    lines += _per_task(doc)
    lines += _profiles(doc, pngs)
    lines += ["## Skipped tasks", ""]
    lines += [f"- {n}: {why}" for n, why in doc["skipped"].items()] or ["None."]
    lines += ["", "## Definitions", "",
              f"A (task, seed) pair is solved by a row when both its TV and its energy distance reach {FLOOR_FACTOR} × "
              "the K-draw floor with the dispersion ratios in band (the budget curves' criterion); its cost is the "
              "larger of the two gradients-to-floor, interpolated in log G. Tuning-inclusive: + the row's tuning "
              "gradients (grid points × tuning budget; a warm-started row's ensemble grid included). A row's cost on a "
              "task: its mean pair cost over the seeds when it solves every seed, else infinity. The per-task best: "
              "the smallest such cost over the rows; a task no row solves on every seed has no ratios and is left "
              "out of the median ratio (it counts in the reach rate and the profiles). Extended tasks: the "
              "extension's points appended to each row's curves (the same tuning, hence the same hyperparameters; "
              "the extension's tuning runs are not charged again).", "",
              "## Command", "", f"`{doc['command']}`", ""]
    return "\n".join(lines)


def plot_profiles(doc: dict, out_dir: Path) -> list[str]:
    """One PNG per tuning choice (profile_<choice>.png): ρ(τ) against τ (log axis, 1 to 64) per row, tuning-exclusive
    and tuning-inclusive panels, drawn as steps from the rows' sorted ratios. Returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette, names = plt.get_cmap("tab20").colors, []
    for choice in CHOICES:
        p = doc["profiles"].get(choice)
        if p is None:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
        for ax, key, title in ((axes[0], "ratios", "gradients to the floor"),
                               (axes[1], "ratios_tuning", "gradients to the floor + tuning")):
            for i, (row, ratios) in enumerate(zip(p["rows"], p[key])):
                finite = [r for r in ratios if r is not None and r <= 64.0]  # sorted; beyond the axis: not drawn
                xs = [1.0] + finite + [64.0]
                ys = [0.0] + [(j + 1) / max(p["pairs"], 1) for j in range(len(finite))]
                ys.append(ys[-1])
                ax.step(xs, ys, where="post", color=palette[i % 20], ls="-" if i < 10 else "--",
                        label=row.rsplit("/", 1)[0])
            ax.set_xscale("log")
            ax.set_xlim(1.0, 64.0)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("τ (cost ÷ the pair's best)")
            ax.set_title(title)
        axes[0].set_ylabel("ρ(τ): share of (task, seed) pairs")
        axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle(f"Performance profiles, {choice}-tuned rows ({p['pairs']} pairs)")
        fig.tight_layout()
        names.append(profile_png(choice))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        atomic_write_bytes(Path(out_dir) / names[-1], buf.getvalue())  # a reader never sees half a PNG
    return names
