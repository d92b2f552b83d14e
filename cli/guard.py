"""The top-level guard of every command line: whatever escapes a CLI's `main` becomes exactly one `error:` line and a
non-zero exit, after the run's failure cleanups (held locks released, staging folders removed); warnings raised while
the inputs are checked are held back until the checks pass.

    def main(argv=None) -> int:
        return guarded(_main, sys.argv[1:] if argv is None else argv)

Exit codes: what `_main` returns; 130 / 143 for SIGINT / SIGTERM (`Terminated`, also when an extension's import
wrapped it in its own error); 1 for an unexpected exception
(its type and first line; the traceback too with `--debug` or `L2E_DEBUG=1`); argparse's own exits (--help, usage
errors of `OneLineErrorParser`) pass through.  A `SystemExit` from anywhere else (e.g. a user's module calling
sys.exit while the run imports it) is an error: it must not end a run with status 0 and no output.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
import traceback
import warnings
from typing import Callable, Iterator

from cli.process import DEBUG_ENV, ParserExit, Terminated
from base.io import one_line

__all__ = ["DEBUG_ENV", "ParserExit", "debug_requested", "guarded", "held_warnings", "on_failure",
           "run_failure_cleanups", "settled"]

_CLEANUPS: dict[int, Callable[[], None]] = {}
_TOKENS = itertools.count()


def on_failure(action: Callable[[], None]) -> int:
    """Register `action` to run if the CLI fails before `settled(token)` (e.g. release a lock, remove a staging
    folder).

    Args:
      action: a callable without arguments (its own exceptions are ignored).
    Returns:
      a token for `settled`.
    """
    token = next(_TOKENS)
    _CLEANUPS[token] = action
    return token


def settled(token: int | None) -> None:
    """Forget the failure cleanup registered as `token` (its resource was released or published normally).

    Args:
      token: from `on_failure` (None: nothing).
    Returns:
      None.
    """
    if token is not None:
        _CLEANUPS.pop(token, None)


def run_failure_cleanups() -> None:
    """Run every registered failure cleanup, newest first, and forget them.

    Returns:
      None (an action's exception is ignored: the others still run).
    """
    while _CLEANUPS:
        action = _CLEANUPS.pop(max(_CLEANUPS))
        try:
            action()
        except Exception:
            pass


@contextlib.contextmanager
def held_warnings() -> Iterator[None]:
    """Hold back the warnings raised inside (numpy overflow while standardising bad data, JAX notices): shown
    after the block when it succeeds, dropped when it raises, so a refused input prints its one `error:` line
    alone.

    Returns:
      a context manager.
    """
    with warnings.catch_warnings(record=True) as caught:
        yield
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def debug_requested(argv) -> bool:
    """Whether the traceback of an unexpected error is wanted: `--debug` in argv or $L2E_DEBUG set (not 0).

    Args:
      argv: the command-line arguments.
    Returns:
      a bool.
    """
    return "--debug" in list(argv or ()) or os.environ.get(DEBUG_ENV, "0").strip().lower() not in ("", "0", "false",
                                                                                                  "no")


def _wrapped_interrupt(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C / SIGTERM behind `e`, if `e` only wraps one: a C extension's module initialisation turns an
    interrupt raised while it runs into its own error (pybind11: `ImportError: initialization failed`, raised from
    it; measured on CI, a SIGTERM during `evaluate card`'s imports), which must still end the run as an interrupt."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ if e.__cause__ is not None else e.__context__
    return None


def _interrupted(e: KeyboardInterrupt) -> int:
    terminated = isinstance(e, Terminated)
    print(f"error: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr, flush=True)
    return 143 if terminated else 130


def guarded(main: Callable[[list[str]], int], argv) -> int:
    """Run `main(argv)` so that nothing escapes it but an int (or the parser's own exit).

    Args:
      main: the CLI body; returns its exit status.
      argv: the command-line arguments.
    Returns:
      main's status, or 130 / 143 / 1 (module docstring); failure cleanups run whenever it is not 0.
    """
    argv = list(argv)
    try:
        code = main(argv)
    except ParserExit:
        run_failure_cleanups()
        raise
    except KeyboardInterrupt as e:
        run_failure_cleanups()
        return _interrupted(e)
    except BaseException as e:  # noqa: B902 - the guard's purpose: SystemExit, MemoryError, RecursionError, bugs
        run_failure_cleanups()
        if (interrupt := _wrapped_interrupt(e)) is not None:
            return _interrupted(interrupt)
        if debug_requested(argv):
            traceback.print_exception(e, file=sys.stderr)
        what = (f"SystemExit({e.code!r}) raised during the run (e.g. by an imported module)"
                if isinstance(e, SystemExit) else f"{type(e).__name__}: {one_line(e)}")
        hint = "" if debug_requested(argv) else f" (unexpected; --debug or {DEBUG_ENV}=1 shows the traceback)"
        print(f"error: {what}{hint}", file=sys.stderr, flush=True)
        return 1
    if code:
        run_failure_cleanups()
    return code
