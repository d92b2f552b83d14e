"""Evaluation of learned and hand-designed samplers on held-out tasks (`python -m evaluate`).

Submodules: config (EvalConfig, presets), methods (one module per method — the shipped learned samplers one
table in methods/l2e.py — registered by name in methods/registry.py), budget (equal-budget schedules, gradient accounting), run (`evaluate`), entries (a
method's report entry: metrics, ESS, loss barrier, reference row, 1-D band), report / plots (JSON, Markdown,
PNG), reference / hmc_reference (reference posteriors), metrics / diagnostics (estimators).
The heavy names are imported lazily so `evaluate.metrics` stays a numpy-only import.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "EvalConfig": "evaluate.config", "PRESETS": "evaluate.config", "get_preset": "evaluate.config",
    "METHODS": "evaluate.methods", "REGISTRY": "evaluate.methods", "MethodResult": "evaluate.methods",
    "MethodSettings": "evaluate.methods", "run_method": "evaluate.methods",
    "evaluate": "evaluate.run", "load_l2e": "evaluate.run",
    "format_table": "evaluate.report", "write_report": "evaluate.report",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evaluate' has no attribute {name!r}")
