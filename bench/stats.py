"""Small helpers the timing benchmarks share (bench.step_cost, bench.meta_variants): paired median ratios and
table cells."""
from __future__ import annotations

import statistics

import numpy as np

__all__ = ["fmt", "median_ratio"]


def median_ratio(a: list[float], b: list[float]) -> float:
    """Median over paired rounds of a[i] / b[i] (e.g. seconds of two functions timed in the same rounds)."""
    return float(statistics.median(x / y for x, y in zip(a, b)))


def fmt(x, fmt=".2f"):
    """A table cell: `format(x, fmt)`, "—" for None or a non-finite float."""
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, fmt)
