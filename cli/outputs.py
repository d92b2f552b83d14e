"""What "our directory" means, in one place: every output directory a CLI of this project writes (a meta-training run,
an evaluation report, a NUTS reference, a checkpoint selection, a sampler card, budget curves) holds the marker file
MARKER naming its kind. A directory is ours only if it holds our marker: without one, any entry in it, hidden or
not, makes it foreign, and no CLI writes into, replaces or deletes anything in a foreign directory, nor in one whose
marker is of another kind (a `report.json` alone proves nothing). Some directories are never ours, whatever they hold
(`never_ours`): the filesystem root, a home folder, this project's repository root and any directory holding a
version-control folder. `OutputLock` is the exclusive lock of an output directory while a run computes and writes
it; it checks ownership once more before it creates or locks anything."""
from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from base.io import atomic_write_text, parse_json, read_bounded

__all__ = ["KINDS", "MARKER", "OutputLock", "VCS_FOLDERS", "check_ours", "check_output_dir", "entry_names",
           "never_ours", "read_marker", "refuse_never_ours", "require_ours", "write_marker"]

MARKER = ".l2e-output"
"""The marker file of an output directory: JSON {"kind": one of KINDS, "format": 1}."""
KINDS = {"run": "a meta-training run", "report": "an evaluation report", "reference": "a NUTS reference directory",
         "selection": "a checkpoint selection", "card": "a sampler card", "curve": "budget curves",
         "leaderboard": "a leaderboard"}
"""Marker kinds and how messages name them."""
DAMAGED = "?"
VCS_FOLDERS = (".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", ".pijul", "CVS", ".fslckout", "_FOSSIL_")
"""Entries that make a directory a version-control working tree (a folder or, as in a git worktree, a file)."""
PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The root of this project's source tree (where `cli/` lives)."""


def _home_folders() -> set[Path]:
    """$HOME and the user's home folder from the password database, resolved."""
    homes = {os.environ.get("HOME")}
    try:
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except (KeyError, OSError):
        pass
    return {Path(os.path.realpath(h)) for h in homes if h}


def never_ours(out: str | Path) -> str | None:
    """Why `out` can never be an output directory of ours, whatever it holds (a marker included).

    Args:
      out: a path (symbolic links are resolved).
    Returns:
      a phrase ("your home folder ($HOME)", ...) for the filesystem root, a home folder, this project's repository
      root or a directory holding a version-control folder (VCS_FOLDERS); None otherwise.
    """
    real = Path(os.path.realpath(out))
    if real == Path(real.anchor):
        return "the filesystem root"
    if real in _home_folders():
        return "your home folder ($HOME)"
    if real == PROJECT_ROOT and (real / "pyproject.toml").is_file():
        return "the root of this project's repository"
    if real.is_dir():
        vcs = [name for name in VCS_FOLDERS if os.path.lexists(real / name)]
        if vcs:
            return f"a version-control working tree (it holds {vcs[0]})"
    return None


def entry_names(directory: str | Path, limit: int = 3) -> str:
    """The first `limit` entry names of `directory` (sorted, hidden ones included), for messages.

    Args:
      directory: a directory.
      limit: how many names are shown (the rest counted).
    Returns:
      e.g. ".bashrc, .profile, .zshrc and 9 more".
    """
    names = sorted(p.name for p in Path(directory).iterdir())
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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


def refuse_never_ours(out: str | Path, error, action: str) -> None:
    """Raise `error` if `out` is never ours (`never_ours`), whatever it holds.

    Args:
      out: the directory (as the user named it; messages show it).
      error: the exception type raised (one line).
      action: what would be done, for the message.
    Returns:
      None.
    """
    why = never_ours(out)
    if why is not None:
        raise error(f"--output {out} is {why}: never an output directory of ours; refusing to {action}: choose "
                    "another --output")


def require_ours(out: str | Path, kind: str, error, action: str = "replace anything in it") -> None:
    """Raise `error` unless directory `out` holds the marker of `kind` and is not a directory that is never ours
    (`never_ours`), before a CLI replaces or deletes anything in it.

    Args:
      out: the directory (as the user named it; messages show it).
      kind: a key of KINDS.
      error: the exception type raised (one line).
      action: what would be done, for the message.
    Returns:
      None.
    """
    refuse_never_ours(out, error, action)
    found = read_marker(out)
    if found == kind:
        return
    if found is None:
        raise error(f"--output {out} is not marked as {KINDS[kind]} of this project (no {MARKER} file: written by "
                    f"another program or by an older version); refusing to {action}: choose another --output")
    if found == DAMAGED:
        raise error(f"--output {out}: its {MARKER} marker is damaged; refusing to {action}: choose another --output")
    raise error(f"--output {out} holds {KINDS[found]}, not {KINDS[kind]}; choose another --output")


def check_ours(out: str | Path, kind: str | None, error, action: str = "write into it",
               unmarked: str | None = None) -> None:
    """The ownership rule, before a CLI creates, writes into or replaces anything in directory `out`: refuse a
    directory that is never ours (`never_ours`), one whose marker is damaged or of another kind, and one without a
    marker that holds any entry, hidden or not. A directory that does not exist yet, an empty one and one holding
    the marker of `kind` pass.

    Args:
      out: the directory (as the user named it; messages show it).
      kind: a key of KINDS; None: a marker of any kind of ours passes (the caller checked the kind).
      error: the exception type raised (one line).
      action: what would be done, for the message.
      unmarked: what the message says of an unmarked, non-empty directory (default: "is not marked as <kind> of
        this project"); the entries it holds are named after it.
    Returns:
      None.
    """
    out = Path(out)
    refuse_never_ours(out, error, action)
    if not out.is_dir():
        return
    found = read_marker(out)
    if found in KINDS and kind in (found, None):
        return
    if found is None:
        if not any(out.iterdir()):
            return
        what = unmarked or f"is not marked as {KINDS[kind] if kind else 'an output'} of this project"
        raise error(f"--output {out} {what}: it holds {entry_names(out)} and no {MARKER} marker (entries this "
                    f"project did not write); refusing to {action}: choose another --output")
    require_ours(out, kind, error, action)


def check_output_dir(out: str | Path, kind: str, own: str, overwrite: bool, error) -> None:
    """The output check of a CLI whose --output holds one set of files of `kind` (a card, budget curves): refuse an
    --output that is a dangling link or not a directory, is never ours, holds another output of ours, holds `own`
    without `overwrite`, or holds anything (hidden entries too) without this kind's marker (`check_ours`), before
    anything is computed.

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
    refuse_never_ours(out, error, f"write {KINDS[kind]} into it")
    if out.is_dir():
        found = read_marker(out)
        if found in KINDS and found != kind:
            raise error(f"--output {out} holds {KINDS[found]}, not {KINDS[kind]}; choose another --output")
        if (out / own).exists() and not overwrite:
            raise error(f"{out / own} exists; pass --overwrite or choose another --output")
        check_ours(out, kind, error, f"write {KINDS[kind]} into it")


class OutputLock:
    """The exclusive lock of an output directory while a run computes and writes it (cli.DirectoryLock): checks
    ownership (`check_ours`) before anything is created, creates the directory if needed and, when the run fails
    (also through the CLI guard's failure cleanups), removes it again if this lock created it (recorded: the same
    directory, by device and inode) and it is empty or holds only its marker."""

    def __init__(self, out: Path, error, kind: str | None = None):
        """Args:
          out: the output directory (a symbolic link to a directory locks and fills its target).
          error: the exception type of the one-line errors (not ours, in use, cannot be created, dangling link).
          kind: the output kind (a key of KINDS) the run writes; None: any marker of ours passes (the caller
            checked the kind).
        """
        from cli.guard import on_failure
        from cli.lock import DirectoryLock, LockHeldError

        out = Path(out)
        if out.is_symlink() and not out.exists():
            raise error(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
        check_ours(out, kind, error, "write into it")
        self.out, self.created = out, None
        try:
            if not out.exists():
                out.mkdir(parents=True)
                st = out.stat()
                self.created = (st.st_dev, st.st_ino)
            self.lock = DirectoryLock(out).acquire()
        except LockHeldError:
            self._cleanup()
            raise error(f"--output {out} is in use by another evaluation") from None
        except OSError as e:
            self._cleanup()
            raise error(f"--output {out}: cannot create or lock it ({e.strerror})") from None
        self._token = on_failure(self._cleanup)

    def _cleanup(self) -> None:
        if self.created is None:
            return
        try:
            st = self.out.stat()
            if (st.st_dev, st.st_ino) != self.created:
                return  # not the directory this lock created (published over, or replaced meanwhile)
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
