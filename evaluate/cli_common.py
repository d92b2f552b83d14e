"""What the `python -m evaluate` subcommands share (evaluate.__main__, evaluate.select_cli): the task-string epilog,
the --output lock, --task / --reference handling and the one-line failure exit."""
from __future__ import annotations

import sys
from pathlib import Path

from base.io import ConfigError, one_line
from cli import OutputLock, Terminated
from cli.limits import HELP as LIMITS
from tasks.limits import HELP as TASK_LIMITS
from tasks.spec_parse import GRAMMAR

__all__ = ["TASK_EPILOG", "OutputLock", "failed_run", "interrupted", "parse_references", "with_task_strings"]

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
