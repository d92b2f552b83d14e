"""Publishing a directory of outputs as a set: a staging directory beside the output, swapped in atomically.

The output named on the command line may be a symbolic link: the set is staged beside, and swapped with, the
directory it points to (`resolve_output`); the link itself is never renamed or replaced. Each staging directory is
locked by the process that writes it (cli.DirectoryLock) and removed when that process fails (cli.guard); one left
by a process that died (SIGKILL, power loss) is unlocked and removed by the next `staging_dir` of that output."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import uuid
from pathlib import Path

from base.io import fsync_dir

__all__ = ["discard_staging", "publish_dir", "resolve_output", "staging_dir", "stale_staging"]

RENAME_EXCHANGE = 2
_NAME_ROOM = 200
"""Output names longer than this are shortened (with a hash) in the hidden sibling names, which must fit the
filesystem's 255-byte limit with their suffixes."""
_HELD: dict[str, tuple] = {}
"""Staging directories of this process: path -> (its lock, the failure-cleanup token)."""


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap directories `a` and `b` (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this filesystem cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def resolve_output(out: str | Path) -> Path:
    """The directory an output path names: symbolic links (of the path and its parents) resolved, so that a set is
    published into a link's target and the link stays as it is.

    Args:
      out: the output path.
    Returns:
      the resolved absolute path (it need not exist).
    """
    return Path(os.path.realpath(out))


def _stem(out: Path) -> str:
    """`out`'s name, shortened with a hash when the hidden sibling names built on it would be too long."""
    name = out.name
    if len(name.encode()) <= _NAME_ROOM:
        return name
    return name[:_NAME_ROOM // 2] + "~" + hashlib.sha256(name.encode()).hexdigest()[:12]


def stale_staging(out: str | Path) -> list[Path]:
    """Remove the staging / old-set directories of `out` that no live process holds (left by a killed run).

    Args:
      out: the output directory (resolved like `resolve_output`).
    Returns:
      the removed directories.
    """
    from cli.lock import DirectoryLock, LockHeldError

    out = resolve_output(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    stem = _stem(out)
    for p in out.parent.iterdir():
        if not (p.name.startswith(f".{stem}.staging-") or p.name.startswith(f".{stem}.old-")) or str(p) in _HELD:
            continue
        if p.is_symlink() or not p.is_dir():
            continue
        try:
            lock = DirectoryLock(p).acquire()
        except (LockHeldError, OSError):
            continue  # a live run's, or gone meanwhile
        try:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
        finally:
            lock.release()
    return removed


def _release(stage: Path, remove: bool) -> None:
    from cli.guard import settled

    lock, token = _HELD.pop(str(stage), (None, None))
    settled(token)
    if remove:
        shutil.rmtree(stage, ignore_errors=True)
    if lock is not None:
        lock.release()


def staging_dir(out: str | Path) -> Path:
    """A new empty directory beside `out` (same filesystem, hidden name `.<name>.staging-<id>`) in which a set
    of files is prepared before `publish_dir` swaps it in. It is locked by this process and removed if the CLI
    fails (cli.guard); stale staging directories of `out` are removed first (`stale_staging`).

    Args:
      out: the directory the set will become (a symbolic link: its target).
    Returns:
      the staging directory.
    """
    from cli.guard import on_failure
    from cli.lock import DirectoryLock

    out = resolve_output(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stale_staging(out)
    stage = out.parent / f".{_stem(out)}.staging-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    lock = DirectoryLock(stage).acquire()
    _HELD[str(stage)] = (lock, on_failure(lambda: _release(stage, remove=True)))
    return stage


def discard_staging(stage: str | Path) -> None:
    """Remove a staging directory that will not be published (and release it).

    Args:
      stage: from `staging_dir`.
    Returns:
      None.
    """
    _release(Path(stage), remove=True)


def publish_dir(stage: str | Path, out: str | Path, replaced: tuple[str, ...], kind: str | None = None) -> Path:
    """Make the fully written directory `stage` the directory `out`, atomically as a set: readers see either
    the old set or the new one. Entries of the old `out` that `stage` lacks and whose names are not in
    `replaced` (files of the old set that the new set does not have) are carried over; the rest of the old
    directory is deleted. Where the filesystem cannot exchange two directories, the swap is two renames. A
    symbolic link `out` is kept: the set replaces its target (`resolve_output`).

    Args:
      stage: the fully written staging directory.
      out: the published directory.
      replaced: names of old entries the new set replaces (dropped even when the new set lacks them).
      kind: the output kind (cli.outputs.KINDS) whose marker the set gets; None: no marker.
    Returns:
      `out` as a Path.
    """
    stage, shown, out = Path(stage), Path(out), resolve_output(out)
    if kind is not None:
        from cli.outputs import write_marker

        write_marker(stage, kind)
    for p in (stage, *stage.rglob("*")):
        if p.is_dir():
            fsync_dir(p)
    if not out.exists():
        os.replace(stage, out)
        fsync_dir(out.parent)
        _release(stage, remove=False)  # the lock was on the directory now at `out`
        return shown
    old = stage
    if not _exchange(stage, out):
        old = out.parent / f".{_stem(out)}.old-{uuid.uuid4().hex[:12]}"
        os.replace(out, old)
        os.replace(stage, out)
    fsync_dir(out.parent)
    _release(stage, remove=False)
    for entry in list(old.iterdir()):
        if entry.name not in replaced and not (out / entry.name).exists():
            os.replace(entry, out / entry.name)
    shutil.rmtree(old, ignore_errors=True)
    return shown
