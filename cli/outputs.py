"""What "our directory" means, in one place: every output directory a CLI of this project writes (a meta-training run,
an evaluation report, a NUTS reference, a checkpoint selection, a sampler card, budget curves) holds the marker file
MARKER naming its kind, and no CLI replaces or deletes anything in a directory whose marker is not of its kind,
whatever else the directory contains (a `report.json` alone proves nothing). `OutputLock` is the exclusive lock of
an output directory while a run computes and writes it."""
from __future__ import annotations

import json
import os
from pathlib import Path

from base.io import atomic_write_text, parse_json, read_bounded

__all__ = ["KINDS", "MARKER", "OutputLock", "check_output_dir", "read_marker", "require_ours", "write_marker"]

MARKER = ".l2e-output"
"""The marker file of an output directory: JSON {"kind": one of KINDS, "format": 1}."""
KINDS = {"run": "a meta-training run", "report": "an evaluation report", "reference": "a NUTS reference directory",
         "selection": "a checkpoint selection", "card": "a sampler card", "curve": "budget curves"}
"""Marker kinds and how messages name them."""
DAMAGED = "?"


def read_marker(directory: str | Path) -> str | None:
    """The kind the marker of `directory` records.

    Args:
      directory: an output directory.
    Returns:
      a key of KINDS; None without a marker; "?" for a marker that is unreadable or names no known kind.
    """
    f = Path(directory) / MARKER
    if not f.exists() and not f.is_symlink():
        return None
    try:
        data = parse_json(read_bounded(f, 4096), max_depth=2)
    except (OSError, ValueError):
        return DAMAGED
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) and kind in KINDS else DAMAGED


def write_marker(directory: str | Path, kind: str) -> Path:
    """Mark `directory` as an output of kind `kind` (atomically).

    Args:
      directory: the directory (a staging directory, or an output being written in place).
      kind: a key of KINDS.
    Returns:
      the marker's path.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    return atomic_write_text(Path(directory) / MARKER, json.dumps({"format": 1, "kind": kind}) + "\n")


def require_ours(out: str | Path, kind: str, error, action: str = "replace anything in it") -> None:
    """Raise `error` unless directory `out` holds the marker of `kind` (before a CLI replaces or deletes anything
    in it).

    Args:
      out: the directory (as the user named it; messages show it).
      kind: a key of KINDS.
      error: the exception type raised (one line).
      action: what would be done, for the message.
    Returns:
      None.
    """
    found = read_marker(out)
    if found == kind:
        return
    if found is None:
        raise error(f"--output {out} is not marked as {KINDS[kind]} of this project (no {MARKER} file: written by "
                    f"another program or by an older version); refusing to {action}: choose another --output")
    if found == DAMAGED:
        raise error(f"--output {out}: its {MARKER} marker is damaged; refusing to {action}: choose another --output")
    raise error(f"--output {out} holds {KINDS[found]}, not {KINDS[kind]}; choose another --output")


def check_output_dir(out: str | Path, kind: str, own: str, overwrite: bool, error) -> None:
    """The output check of a CLI whose --output holds one set of files of `kind` (a card, budget curves): refuse an
    --output that is a dangling link or not a directory, holds another output of ours, holds `own` without
    `overwrite`, or holds anything without this kind's marker (before anything is computed).

    Args:
      out: the --output path.
      kind: a key of KINDS.
      own: the set's main file (e.g. "curve.json").
      overwrite: whether --overwrite was given.
      error: the exception type raised (one line).
    Returns:
      None.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise error(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
    if out.exists() and not out.is_dir():
        raise error(f"--output {out} exists and is not a directory")
    if out.is_dir():
        found = read_marker(out)
        if found in KINDS and found != kind:
            raise error(f"--output {out} holds {KINDS[found]}, not {KINDS[kind]}; choose another --output")
        if (out / own).exists() and not overwrite:
            raise error(f"{out / own} exists; pass --overwrite or choose another --output")
        if any(p for p in out.iterdir() if not p.name.startswith(".")):
            require_ours(out, kind, error, f"write {KINDS[kind]} into it")


class OutputLock:
    """The exclusive lock of an output directory while a run computes and writes it (cli.DirectoryLock): creates
    the directory if needed (and removes it again, if still empty, when the run fails; also through the CLI guard's
    failure cleanups)."""

    def __init__(self, out: Path, error):
        """Args:
          out: the output directory (a symbolic link to a directory locks and fills its target).
          error: the exception type of the one-line errors (in use, cannot be created, dangling link).
        """
        from cli.guard import on_failure
        from cli.lock import DirectoryLock, LockHeldError

        out = Path(out)
        if out.is_symlink() and not out.exists():
            raise error(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
        self.created = not out.exists()
        self.out = out
        try:
            out.mkdir(parents=True, exist_ok=True)
            self.lock = DirectoryLock(out).acquire()
        except LockHeldError:
            self._cleanup()
            raise error(f"--output {out} is in use by another evaluation") from None
        except OSError as e:
            self._cleanup()
            raise error(f"--output {out}: cannot create or lock it ({e.strerror})") from None
        self._token = on_failure(self._cleanup)

    def _cleanup(self) -> None:
        if self.created:
            try:
                if [p.name for p in self.out.iterdir()] == [MARKER]:  # marked by this run, nothing else written
                    (self.out / MARKER).unlink()
                self.out.rmdir()  # only if (then) empty
            except OSError:
                pass

    def release(self, failed: bool) -> None:
        """Release the lock; after a failure also remove the directory if this run created it and it is empty (or
        holds only the marker this run wrote).

        Args:
          failed: whether the run failed.
        Returns:
          None.
        """
        from cli.guard import settled

        settled(self._token)
        self.lock.release()
        if failed:
            self._cleanup()
