"""The evaluated methods: one module per method (settings, tuning grid, schedule, runner; evaluate.methods.l2e also
builds the shipped learned samplers from one table), registered by name in `evaluate.methods.registry`; shared
drivers in `driver`, results and prediction in `outputs`, the per-evaluation `CompileCache` in `cache`.

`run_<name>(task, key, hp, cfg, split="test", cache=None)` is `run_method("<name>", ...)` for every registered
method.
"""
from __future__ import annotations

import functools

from evaluate.methods.base import Method, Run
from evaluate.methods.cache import CompileCache
from evaluate.methods.outputs import MethodResult, predict_outputs, split_data
from evaluate.methods.registry import (METHODS, REGISTRY, MethodSettings, get_method, method_settings, run_many,
                                       run_method)

__all__ = ["METHODS", "REGISTRY", "CompileCache", "Method", "MethodResult", "MethodSettings", "Run", "get_method",
           "method_settings", "predict_outputs", "run_many", "run_method", "split_data"]


def __getattr__(name: str):
    if name.startswith("run_") and name[4:] in REGISTRY:
        return functools.partial(run_method, name[4:])
    raise AttributeError(f"module 'evaluate.methods' has no attribute {name!r}")
