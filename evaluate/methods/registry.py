"""The method registry: name → `Method` (settings dataclass, tuning grid, chain schedule, runner).

Adding a baseline: write evaluate/methods/<name>.py defining `METHOD = Method("<name>", ...)` and add its
module name to METHOD_MODULES below.  It is then a valid `methods=` entry, its settings are the group
`settings.<name>` of EvalConfig (`--set settings.<name>.<field>=…`), and the `full` preset runs it.  A module
that builds several methods from one table (evaluate.methods.l2e: the shipped learned samplers) exposes them as
`METHOD_TABLE` (name → Method); the METHOD_MODULES entry "<module>:<name>" registers one of them, "<module>:*" all.
"""
from __future__ import annotations

import dataclasses
import importlib

from evaluate.methods.base import Method, Run
from evaluate.methods.cache import CompileCache
from l2e.io import ConfigError

__all__ = ["METHODS", "METHOD_MODULES", "MethodSettings", "REGISTRY", "get_method", "method_settings", "run_method"]

METHOD_MODULES = (  # one line per method, in the order methods run and are reported
    "l2e",
    "l2e_released",
    "l2e:*",  # every shipped learned sampler with a method of its own (l2e.learned's shipped rows)
    "sghmc",
    "sghmc_tempered",
    "csghmc",
    "psgld",
    "fsghmc",
    "sgnht",
    "baoab",
    "precond_sghmc:*",  # precond_rmsprop, precond_fisher
    "adaptive_sghmc",
    "warm_sghmc",
    "deep_ensemble",  # before the full-batch methods, which start from its members
    "noisy_de",
    "mile",
    "nuts_bde",
    "smile",  # minibatch, shared G (2 gradients per step), warm-started from the deep ensemble
    "psmile",
)


_TEMPERATURE = {"deep_ensemble": "n/a (optimiser)"}
"""Temperatures of methods whose module does not declare one (Method.temperature); to move into their METHOD."""


def _load(modules) -> dict[str, Method]:
    methods = {}
    for entry in modules:
        module, _, name = entry.partition(":")  # "<module>": its METHOD; "<module>:<name>": METHOD_TABLE[name]
        loaded = importlib.import_module(f"evaluate.methods.{module}")
        table = getattr(loaded, "METHOD_TABLE", {})
        for method in (list(table.values()) if name == "*" else [table[name]] if name else [loaded.METHOD]):
            if method.name in methods:
                raise ValueError(f"method {method.name!r} registered twice")
            if method.name in _TEMPERATURE and method.temperature == 1.0:
                method = dataclasses.replace(method, temperature=_TEMPERATURE[method.name])
            methods[method.name] = method
    return methods


REGISTRY: dict[str, Method] = _load(METHOD_MODULES)
METHODS: tuple[str, ...] = tuple(REGISTRY)
"""Every registered method, in run / report order."""

MethodSettings = dataclasses.make_dataclass(
    "MethodSettings",
    [(name, m.settings, dataclasses.field(default_factory=m.settings)) for name, m in REGISTRY.items()],
    frozen=True)
MethodSettings.__module__ = __name__
MethodSettings.__doc__ = "The settings of every registered method: field <name> holds REGISTRY[<name>].settings."


def get_method(name: str) -> Method:
    """REGISTRY[name]; ConfigError naming the known methods otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return REGISTRY[name]


def method_settings(**per_method: dict) -> MethodSettings:
    """MethodSettings with the given fields per method (the others at their defaults), e.g.
    method_settings(sghmc={"lrs": (0.03, 0.1), "frictions": (10.0,)}, l2e={"lrs": (0.5,)})."""
    return MethodSettings(**{name: get_method(name).settings(**fields) for name, fields in per_method.items()})


def run_method(name: str, task, key, hp: dict, cfg, split="test", cache: CompileCache | None = None,
               probe: bool = False):
    """One run of method `name` on `task` -> MethodResult (see Method.run); cache: the evaluation's
    CompileCache (a fresh one when None); probe: only measure one update's cost (Run.probe; minibatch
    methods)."""
    method = get_method(name)
    ctx = Run(task, cfg, getattr(cfg.settings, name), split, CompileCache() if cache is None else cache, probe)
    return method.run(ctx, key, hp)
