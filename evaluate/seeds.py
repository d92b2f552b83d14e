"""Several evaluation seeds: every method's entry as mean ± standard error over seeds, every seed's entry kept.

`aggregate_task({seed: task entry})` returns one task entry whose method entries hold, for every number of the
per-seed entries (nested dicts included, lists elementwise), the mean over the seeds where it is finite, and
under "se" the standard error sd/√n (sd with ddof 1; n = those seeds; only for n ≥ 2).  Curves also get
"<metric>_sd" (the sd over seeds of each point, docs/evaluation.md, BMA metric versus number of samples), which the BMA-curve plot draws as a band.  Strings
that differ between seeds become the list of the seeds' values; "hyperparameters" becomes {"per_seed": {seed:
record}}; "seeds" holds every seed's own entry.  The reference row ("hmc") does not depend on the seed and is the
first seed's; so are the task's data, reference and 1-D band (band_seed says which seed).
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np

__all__ = ["SE_NOTE", "aggregate", "aggregate_entry", "aggregate_task", "mean_se"]

SE_NOTE = ("numbers are means over the seeds with a finite value, '± x' (and entry['se']) the standard error "
           "sd/√n with sd over those n seeds (ddof 1); every seed's own entry is under entry['seeds']")
REFERENCE_METHOD = "hmc"


def _is_number(v) -> bool:
    return isinstance(v, (Real, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def mean_se(values) -> tuple[float | None, float | None, int]:
    """(mean, standard error, n) of the finite numbers among `values` (None entries ignored); se is None for
    n < 2, mean None for n = 0."""
    x = np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], np.float64)
    if x.size == 0:
        return None, None, 0
    se = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size >= 2 else None
    return float(np.mean(x)), se, int(x.size)


def aggregate(values: list) -> tuple[Any, Any]:
    """(mean, se) of per-seed values of one field (the rules of the module docstring); se is None where there is
    none (a dict of the available ones for dicts)."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    if all(_is_number(v) for v in present):
        mean, se, _ = mean_se(present)
        return mean, se
    if all(isinstance(v, dict) for v in present):
        mean, se = {}, {}
        for key in dict.fromkeys(k for v in present for k in v):
            m, s = aggregate([v.get(key) for v in present])
            mean[key] = m
            if s is not None:
                se[key] = s
        return mean, (se or None)
    if all(isinstance(v, list) for v in present) and len({len(v) for v in present}) == 1:
        return [aggregate([v[i] for v in present])[0] for i in range(len(present[0]))], None
    return (present[0] if all(v == present[0] for v in present) else list(present)), None


def _curve(curves: list) -> dict | None:
    """Elementwise mean of per-seed curves plus "<metric>_sd" (sd over seeds, ddof 1) for every metric list.
    Curves of different lengths (a seed whose divergent samples were dropped) are averaged over the sample counts
    every seed has (their common first points)."""
    present = [c for c in curves if c]
    if not present:
        return None
    lengths = {len(c["num_samples"]) for c in present if isinstance(c.get("num_samples"), list)}
    if len(lengths) > 1:
        n = min(lengths)
        present = [{k: v[:n] if isinstance(v, list) else v for k, v in c.items()} for c in present]
    mean, _ = aggregate(present)
    if len(present) >= 2:
        for key, value in list(mean.items()):
            rows = [c.get(key) for c in present]
            if key == "num_samples" or not isinstance(value, list) or any(
                    r is None or len(r) != len(value) for r in rows):
                continue
            arr = np.asarray([[np.nan if x is None else float(x) for x in r] for r in rows], np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                sd = np.nanstd(arr, axis=0, ddof=1) if arr.shape[0] >= 2 else np.full(arr.shape[1], np.nan)
            mean[f"{key}_sd"] = [float(v) if math.isfinite(v) else None for v in sd]
    return mean


def aggregate_entry(per_seed: dict) -> dict:
    """One method's entry over seeds ({seed: entry}): means, "se", "n_seeds", per-seed "hyperparameters" and
    curves with sd bands, and "seeds" {str(seed): entry}."""
    entries = list(per_seed.values())
    skip = ("hyperparameters", "curve")
    mean, se = aggregate([{k: v for k, v in e.items() if k not in skip} for e in entries])
    out = dict(mean)
    out["hyperparameters"] = {"per_seed": {str(s): e.get("hyperparameters") for s, e in per_seed.items()}}
    out["curve"] = _curve([e.get("curve") for e in entries])
    out["se"] = se or {}
    out["n_seeds"] = len(entries)
    out["seeds"] = {str(s): e for s, e in per_seed.items()}
    return out


def aggregate_task(per_seed: dict) -> dict:
    """One task's entry over seeds ({seed: task entry of evaluate.run}): the first seed's task fields, every
    method aggregated (`aggregate_entry`), the reference row and band of the first seed."""
    seeds = list(per_seed)
    first = per_seed[seeds[0]]
    entry = {k: v for k, v in first.items() if k not in ("methods", "samples")}
    methods = {}
    for name, row in first["methods"].items():
        if name == REFERENCE_METHOD:
            methods[name] = row
        else:
            methods[name] = aggregate_entry({s: per_seed[s]["methods"][name] for s in seeds})
    entry["methods"] = methods
    if "band" in first:
        entry["band_seed"] = seeds[0]
    if any("samples" in t for t in per_seed.values()):
        entry["samples"] = {str(s): t.get("samples") for s, t in per_seed.items()}
    return entry
