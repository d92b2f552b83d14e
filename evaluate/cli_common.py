"""What the `python -m evaluate` subcommands share (evaluate.__main__, evaluate.select_cli): the task-string epilog,
the --output lock, --task / --reference / --method handling and the one-line failure exit."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from base.io import ConfigError, one_line
from cli import OutputLock, Terminated
from cli.limits import HELP as LIMITS
from tasks.limits import HELP as TASK_LIMITS
from tasks.spec_parse import GRAMMAR

METHODS_ENV = "L2E_METHODS"
"""evaluate.methods.registry.ENV: the environment variable naming methods from other packages."""

__all__ = ["METHODS_ENV", "TASK_EPILOG", "OutputLock", "failed_run", "interrupted", "method_flags", "parse_references",
           "register_method_flags", "with_task_strings", "with_user_methods"]

TASK_EPILOG = "task strings (--task SPEC):\n" + GRAMMAR + f"\n\n{LIMITS}.\n{TASK_LIMITS}."


def with_task_strings(cfg, texts: list[str], model: str | None):
    """`cfg` with its tasks replaced by the --task strings' (tasks.task_strings; the report's held-out line states
    each task's likelihood); unchanged without any.  User data is read and checked here, before any output."""
    import dataclasses

    from tasks.task_strings import resolve_tasks

    if not texts:
        if model is not None:
            raise ConfigError("--model needs --task: the task strings (without /MODEL) it is used for")
        return cfg
    resolved = resolve_tasks(texts, model)
    return dataclasses.replace(cfg, tasks=tuple(r.spec for r in resolved), held_out=tuple(r.note for r in resolved))


def parse_references(items: list[str]) -> dict:
    refs = {}
    for item in items:
        name, sep, path = item.partition("=")
        key, value = (name, path) if sep and not Path(item).exists() else (None, item)
        if key in refs:
            raise ValueError(f"--reference given twice for {'the task' if key is None else key}")
        refs[key] = value
    return refs


def _os_error_line(e: OSError) -> str:
    if not e.strerror:
        return f"error: {one_line(e)}"
    return f"error: {e.strerror}: {e.filename or ''}".rstrip(": ")


def interrupted(e: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"


def failed_run(e: BaseException, lock, unchanged: str) -> int:
    """After a run's exception `e`: release `lock` (if taken) as failed, print the one error line and return the
    exit code — 143 / 130 for SIGTERM / SIGINT ("error: <why>; <unchanged>"), 2 for a user or OS error."""
    if lock is not None:
        lock.release(failed=True)
    if isinstance(e, KeyboardInterrupt):
        print(f"error: {interrupted(e)}; {unchanged}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    print(_os_error_line(e) if isinstance(e, OSError) else f"error: {one_line(e)}", file=sys.stderr)
    return 2


def method_flags(argv: list[str]) -> list[str]:
    """The values of every --method flag in argv ("--method X" or "--method=X"), in order."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--method" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--method="):
            found.append(arg.split("=", 1)[1])
    return found


PLUGIN_SUBCOMMANDS = (None, "curve", "card", "leaderboard")
"""The `python -m evaluate` subcommands whose --method names a user's sampler (`evaluate select --method` picks one
of ours)."""


def register_method_flags(argv: list[str]) -> None:
    """Register the --method entries of a plug-in subcommand's argv: they join $L2E_METHODS while the method registry
    is first imported, so that a user's sampler is registered like ours (its settings group, the presets' methods,
    the card, the curves); the environment is left as it was. ConfigError when the registry was already loaded in
    this process without them (an in-process call after another: set $L2E_METHODS before importing evaluate)."""
    import importlib
    import sys

    sub = argv[0] if argv and not argv[0].startswith("-") else None
    entries = [e.strip() for e in method_flags(argv) if e.strip()] if sub in PLUGIN_SUBCOMMANDS else []
    if not entries:
        return
    if "evaluate.methods.registry" in sys.modules:
        from evaluate.methods.registry import EXTRA_ENTRIES

        missing = [e for e in entries if e not in EXTRA_ENTRIES]
        if missing:
            raise ConfigError(f"--method {missing[0]}: the method registry is already loaded in this process; set "
                              f"{METHODS_ENV} before importing evaluate")
        return
    before = os.environ.get(METHODS_ENV)
    os.environ[METHODS_ENV] = ",".join(filter(None, [before or "", *entries]))
    try:
        importlib.import_module("evaluate.methods.registry")
    finally:
        if before is None:
            os.environ.pop(METHODS_ENV, None)
        else:
            os.environ[METHODS_ENV] = before


def with_user_methods(cfg, entries: list[str]):
    """cfg with the methods named by --method entries ("pkg.module:NAME" -> NAME, "pkg.module" -> its METHOD's
    name) appended to its methods (once each)."""
    import dataclasses
    import importlib

    names = []
    for entry in entries:
        module, _, name = entry.partition(":")
        names.append(name or importlib.import_module(module).METHOD.name)
    extra = tuple(n for n in dict.fromkeys(names) if n not in cfg.methods)
    return dataclasses.replace(cfg, methods=cfg.methods + extra) if extra else cfg
