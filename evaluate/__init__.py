"""Evaluation of learned and hand-designed samplers on held-out tasks (`python -m evaluate`).

Submodules: metrics (predictive metrics), report (JSON / Markdown / plot writers), config (EvalConfig,
presets), methods (run_l2e, run_sghmc, run_csghmc, run_deep_ensemble), run (`evaluate`).
The heavy names are imported lazily so `evaluate.metrics` stays a numpy-only import.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "EvalConfig": "evaluate.config", "MethodGrid": "evaluate.config", "PRESETS": "evaluate.config",
    "METHODS": "evaluate.config", "get_preset": "evaluate.config",
    "MethodResult": "evaluate.methods", "run_method": "evaluate.methods",
    "evaluate": "evaluate.run", "load_l2e": "evaluate.run", "format_table": "evaluate.run",
    "write_report": "evaluate.report",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evaluate' has no attribute {name!r}")
