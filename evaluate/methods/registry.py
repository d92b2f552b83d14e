"""The method registry: name → `Method` (settings dataclass, tuning grid, chain schedule, runner).

Adding a baseline: write evaluate/methods/<name>.py defining `METHOD = Method("<name>", ...)` (for a single-chain
minibatch sampler, `evaluate.methods.factory.single_chain_method`) and add its module name to METHOD_MODULES below.
Everything else — the presets' grids, the sampler card, bench.step_cost, bench.defaults_audit and the tests' smoke
settings — reads the Method's fields (Method.grids, card, step_cost, audit).

A method from outside the repository: the environment variable L2E_METHODS holds comma-separated entries
"pkg.module" (its METHOD) or "pkg.module:NAME" (its METHOD_TABLE[NAME], or "*" for all), importable from the Python
path; they are registered after METHOD_MODULES, in that order, exactly like ours ("pkg.module:NAME" may also name a
bare sampler factory: evaluate.methods.factory.sampler_method; `--method` on the CLIs adds entries).

A registered method is a valid `methods=` entry, its settings are the group `settings.<name>` of EvalConfig
(`--set settings.<name>.<field>=…`), and the `full` preset runs it.  A module that builds several methods from one table (evaluate.methods.l2e: the shipped learned samplers) exposes them as
`METHOD_TABLE` (name → Method); the METHOD_MODULES entry "<module>:<name>" registers one of them, "<module>:*" all.
"""
from __future__ import annotations

import dataclasses
import importlib
import os

import jax

from evaluate.methods.base import Method, Run
from evaluate.methods.batch import ChainBatch, chain_batch, use_batches
from evaluate.methods.cache import CompileCache
from evaluate.methods.batched import Deferred, run_calls, shared_fingerprint
from evaluate.methods.chunks import chain_keys
from evaluate.methods.outputs import merge_chains
from base.io import ConfigError, one_line

__all__ = ["ENV", "LOAD_ERRORS", "METHODS", "METHOD_MODULES", "MethodSettings", "REGISTRY", "check_extra_methods",
           "extra_modules", "get_method", "method_settings", "preset_grids", "run_many",
           "run_method"]

METHOD_MODULES = (  # one line per method, in the order methods run and are reported
    "l2e",
    "l2e_released",
    "l2e:*",  # every shipped learned sampler with a method of its own (l2e.learned's shipped rows)
    "sgld",
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
    "sgld_cv",  # control variates: an SGD anchor and its full-data gradient inside the budget (2 gradients per step)
    "sghmc_cv",
    "deep_ensemble",  # before the full-batch methods, which start from its members
    "noisy_de",
    "policy:*",  # Policy-L2E (the rule; the shipped learned policy): M chains adapted together, then frozen
    "mile",
    "nuts_bde",
    "smile",  # minibatch, shared G (2 gradients per step), warm-started from the deep ensemble
    "psmile",
)


_TEMPERATURE = {"deep_ensemble": "n/a (optimiser)"}
"""Temperatures of methods whose module does not declare one (Method.temperature); to move into their METHOD."""


ENV = "L2E_METHODS"
"""The environment variable naming methods from other packages (module doc)."""


def extra_modules() -> tuple[str, ...]:
    """The entries of $L2E_METHODS (fully qualified "pkg.module[:NAME]")."""
    return tuple(e.strip() for e in os.environ.get(ENV, "").split(",") if e.strip())


def _load(modules, methods: dict | None = None, ours: bool = True) -> dict[str, Method]:
    """Register the methods of `modules` into `methods`; ours: a bare module name is one of evaluate/methods/ (a
    user's entry, ours=False, is imported as given: a top-level module of theirs works too)."""
    methods = {} if methods is None else methods
    for entry in modules:
        module, _, name = entry.partition(":")  # "<module>": its METHOD; "<module>:<name>": METHOD_TABLE[name]
        loaded = importlib.import_module(module if "." in module or not ours else f"evaluate.methods.{module}")
        table = getattr(loaded, "METHOD_TABLE", {})
        if name and name != "*" and name not in table:
            if not hasattr(loaded, name):
                raise ValueError(f"{module} has no METHOD_TABLE entry or attribute {name!r}")
            table = {name: _user_method(name, getattr(loaded, name))}
        for method in (list(table.values()) if name == "*" else [table[name]] if name else [loaded.METHOD]):
            if not isinstance(method, Method):
                raise TypeError(f"{module}: {type(method).__name__} is not an evaluate.methods.Method")
            if method.name in methods:
                raise ValueError(f"method {method.name!r} registered twice")
            if method.name in _TEMPERATURE and method.temperature == 1.0:
                method = dataclasses.replace(method, temperature=_TEMPERATURE[method.name])
            methods[method.name] = method
    return methods


def _user_method(name: str, obj) -> Method:
    """A module attribute named by "pkg.module:NAME": a Method as it is, a sampler factory through
    evaluate.methods.factory.sampler_method (checked there)."""
    if isinstance(obj, Method):
        return obj
    from evaluate.methods.factory import sampler_method

    return sampler_method(name, obj)


LOAD_ERRORS: list[str] = []
"""Why an $L2E_METHODS entry could not be registered (check_extra_methods raises the first)."""


def _load_all() -> dict[str, Method]:
    methods = _load(METHOD_MODULES)
    for entry in EXTRA_ENTRIES:
        try:  # into a copy, kept whole or not at all (a table that fails half-way registers nothing)
            methods = _load([entry], dict(methods), ours=False)
        except Exception as e:  # a user's module: reported by check_extra_methods as one line, not at import
            LOAD_ERRORS.append(f"{ENV} entry {entry!r}: {type(e).__name__}: {one_line(e)}")
    return methods


def check_extra_methods() -> None:
    """ConfigError (one line) if an $L2E_METHODS entry failed to import or is not a Method (the CLIs call it first)."""
    if LOAD_ERRORS:
        raise ConfigError(LOAD_ERRORS[0])


EXTRA_ENTRIES: tuple[str, ...] = extra_modules()
"""The $L2E_METHODS entries this process registered (read once, when the registry was loaded)."""
REGISTRY: dict[str, Method] = _load_all()
METHODS: tuple[str, ...] = tuple(REGISTRY)
"""Every registered method, in run / report order."""

MethodSettings = dataclasses.make_dataclass(
    "MethodSettings",
    [(name, m.settings, dataclasses.field(default_factory=m.settings)) for name, m in REGISTRY.items()],
    frozen=True)
MethodSettings.__module__ = __name__
MethodSettings.__doc__ = "The settings of every registered method: field <name> holds REGISTRY[<name>].settings."


def preset_grids(grid: str) -> dict[str, dict]:
    """{method: settings fields} of preset grid `grid` ("every", "full", "smoke": Method.preset_grid) for every
    registered method that declares one."""
    return {name: m.preset_grid(grid) for name, m in REGISTRY.items() if m.preset_grid(grid)}


def get_method(name: str) -> Method:
    """REGISTRY[name]; ConfigError naming the known methods otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return REGISTRY[name]


def method_settings(**per_method: dict) -> MethodSettings:
    """MethodSettings with the given fields per method (the others at their defaults), e.g.
    method_settings(sghmc={"lrs": (0.03, 0.1), "frictions": (10.0,)}, l2e={"lrs": (0.5,)})."""
    return MethodSettings(**{name: get_method(name).settings(**fields) for name, fields in per_method.items()})


def allocated_chains(name: str, cfg) -> int:
    """M, the parallel chains method `name` splits its budget into under `cfg` (EvalConfig.chains; 1 for a method
    without chain allocation)."""
    method = get_method(name)
    return cfg.chains if method.chain_allocation and not (method.full_batch or method.warm_start) else 1


def run_method(name: str, task, key, hp: dict, cfg, split="test", cache: CompileCache | None = None,
               probe: bool = False):
    """One run of method `name` on `task` -> MethodResult (see Method.run); cache: the evaluation's
    CompileCache (a fresh one when None); probe: only measure one update's cost (Run.probe; minibatch
    methods).

    Chain allocation (EvalConfig.chains = M > 1, `allocated_chains`): M runs of G/M updates keeping K/M draws each,
    chain c with keys (fold_in(init key, c), fold_in(chain key, c)), pooled (outputs.merge_chains); M = 1 is the
    single run with `key` itself."""
    method = get_method(name)
    cache = CompileCache() if cache is None else cache
    m = allocated_chains(name, cfg)
    if m == 1:
        return method.run(Run(task, cfg, getattr(cfg.settings, name), split, cache, probe), key, hp)
    # methods=(name,): the sub-run validates only this method's settings (another method's, e.g. SMILE's chains,
    # need not fit K/M draws)
    sub = dataclasses.replace(cfg, num_steps=cfg.num_steps // m, num_samples=cfg.num_samples // m, chains=1,
                              methods=(name,), optional_methods=())
    ctx = Run(task, sub, getattr(cfg.settings, name), split, cache, probe)
    if probe:
        return method.run(ctx, key, hp)
    init_key, chain_key = chain_keys(key)
    if method.batch_chains and use_batches(cfg, task):  # the M chains as one vmapped program, the same keys
        return method.run(ctx, chain_batch(init_key, chain_key, m), hp)
    runs = [method.run(ctx, (jax.random.fold_in(init_key, c), jax.random.fold_in(chain_key, c)), hp)
            for c in range(m)]
    return merge_chains(runs)


def run_many(name: str, task, jobs: list[tuple], cfg, split="test", cache: CompileCache | None = None,
             width: int | None = None) -> list:
    """[run_method(name, task, key, hp, cfg, split, cache) for key, hp in jobs], with every chain of every job —
    seeds, grid points, the M chains of a chain allocation — run as vmapped programs where the method declares
    Method.batch_chains and `use_batches` allows (else one job after another).

    Each job keeps its own keys (M = 1: the key pair itself; M > 1: chain c with fold_in(…, c), as run_method), its
    own hyperparameters and records; the runner is called once per job and returns its chains' call
    (batched.Deferred); calls that share a compiled chunk (cache key, schedule, phases) run together
    (batched.run_calls: a scalar hyperparameter is a per-chain argument). The results equal the
    one-at-a-time path's up to a vmapped program's rounding (tests/test_batch.py). width: chains per vmapped program
    (batch.batch_width; None: all of a group's chains in one) — a caller with calls of several sizes (the curves:
    seeds × M) passes one width so that one compiled program serves them all."""
    method = get_method(name)
    cache = CompileCache() if cache is None else cache
    m = allocated_chains(name, cfg)
    if (len(jobs) * m <= 1 and width is None) or not (method.batch_chains and use_batches(cfg, task)):
        return [run_method(name, task, key, hp, cfg, split, cache) for key, hp in jobs]
    sub = cfg if m == 1 else dataclasses.replace(cfg, num_steps=cfg.num_steps // m, num_samples=cfg.num_samples // m,
                                                 chains=1, methods=(name,), optional_methods=())
    ctx = Run(task, sub, getattr(cfg.settings, name), split, cache, False)
    calls = []
    for key, hp in jobs:
        init_key, chain_key = chain_keys(key)
        keys = chain_batch(init_key, chain_key, m) if m > 1 else ChainBatch(init_key[None], chain_key[None])
        deferred = Deferred(keys, [])
        method.run(ctx, deferred, hp)
        if len(deferred.calls) != 1:
            raise RuntimeError(f"{name}'s runner declares batch_chains but made {len(deferred.calls)} chain calls")
        calls.append(deferred.calls[0])
    groups: dict = {}
    for i, call in enumerate(calls):  # calls that share one compiled chunk and one sequence of phases
        phases = None if call.phase_of is None else tuple(
            call.phase_of(s, call.schedule.chunk_length) for s in range(0, call.schedule.num_steps,
                                                                       call.schedule.chunk_length))
        groups.setdefault((call.cache_key, call.schedule, phases, jax.tree.structure(call.args),
                           shared_fingerprint(call.args)), []).append(i)
    results: list = [None] * len(calls)
    for members in groups.values():
        for i, runs in zip(members, run_calls(ctx, [calls[i] for i in members], width)):
            results[i] = runs[0] if m == 1 else merge_chains(runs)
    return results
