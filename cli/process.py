"""The process side of every CLI: the one-line `error:` argument parser, SIGTERM as an interrupt, the exit."""
from __future__ import annotations

import argparse
import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM (see `handle_sigterm`): the CLIs treat it like Ctrl-C."""


def handle_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in the main thread, so the CLIs end it with their one-line message and
    cleanup (the default action kills the process silently), and SIGINT raise KeyboardInterrupt even when the
    parent started us with SIGINT ignored (a non-interactive shell's `cmd &` does: `kill -INT` was then a no-op).
    Either interrupt raised where it cannot propagate (a finaliser, a gc callback) is delivered again outside.

    Returns:
      None (installs the handlers; main thread only).
    """
    for signum in _RAISED:
        _RAISED[signum] = False
    _PENDING["signum"] = None
    if not getattr(sys.unraisablehook, "redelivers_interrupts", False):
        sys.unraisablehook = _redeliver_swallowed(sys.unraisablehook)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)


_RAISED = {signal.SIGTERM: False, signal.SIGINT: False}
"""Whether the interrupt of each signal is on its way out (repeats are ignored: the run is already ending)."""
_PENDING: dict[str, int | None] = {"signum": None}
"""A signal whose interrupt a finaliser swallowed and whose redelivery has not yet arrived (`raise_pending`)."""


def _raise_interrupt(signum, frame):
    if _RAISED[signum]:
        return
    _RAISED[signum] = True
    _PENDING["signum"] = None
    if signum == signal.SIGTERM:
        raise Terminated("terminated (SIGTERM)")
    raise KeyboardInterrupt


def raise_pending() -> None:
    """Raise now the interrupt a finaliser swallowed, if its redelivery (50 ms later) has not arrived yet: called
    before a run publishes its outputs, so an interrupted run never replaces them in that window.

    Returns:
      None (raises Terminated / KeyboardInterrupt when one is pending; the redelivery is then ignored).
    """
    signum = _PENDING["signum"]
    if signum is not None:
        _raise_interrupt(signum, None)


def _redeliver_swallowed(previous):
    """An unraisable hook: an interrupt raised while Python ran a garbage-collection callback or a finaliser (JAX
    registers one) cannot propagate — Python would print "Exception ignored in ..." with a traceback and the run
    would go on (measured on CI: a SIGINT in `_xla_gc_callback`, the evaluation then finished with status 0).
    Instead it is dropped silently and its signal delivered again 50 ms later, outside that callback."""
    import threading

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            signum = signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT
            _RAISED[signum] = False
            _PENDING["signum"] = signum
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        previous(unraisable)

    hook.redelivers_interrupts = True
    return hook


def exit_cli(code: int) -> None:
    """End a CLI with `code`. A failing run leaves through os._exit after flushing, skipping interpreter teardown:
    orbax / tensorstore background threads that outlive a failed restore otherwise print an asyncio traceback
    after the one `error:` line (measured: a truncated checkpoint file).

    Args:
      code: the exit status.
    Returns:
      never.
    """
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


DEBUG_ENV = "L2E_DEBUG"
"""Set to 1 (or pass --debug) to print the traceback of an unexpected error before its `error:` line (cli.guard)."""


class ParserExit(SystemExit):
    """An exit of the argument parser itself (--help, a usage error): the only SystemExit the CLI guard
    (cli.guard.guarded) passes on."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line `error: <message>` to stderr and exit with status 2
    (argparse's own error output is a multi-line usage dump); its exits raise `ParserExit` (the only
    SystemExit the CLI guard passes on). Every such parser takes `--debug` (the traceback of an unexpected error)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument("--debug", action="store_true",
                          help=f"on an unexpected error also print its traceback (or set {DEBUG_ENV}=1)")

    def exit(self, status=0, message=None):
        """Print `message` (if any) to stderr and leave with `status` (ParserExit).

        Args:
          status: the exit status.
          message: printed first.
        Returns:
          never.
        """
        if message:
            self._print_message(message, sys.stderr)
        raise ParserExit(status)

    def error(self, message):
        """Print `error: <message>` to stderr and exit with status 2.

        Args:
          message: argparse's message.
        Returns:
          never (ParserExit, a SystemExit).
        """
        print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
        raise ParserExit(2)
