"""Publishing a directory of outputs as a set: a staging directory beside the output, moved in as `out`.

The output named on the command line may be a symbolic link: the set is staged beside, and published into, the
directory it points to (`resolve_output`); the link itself is never renamed or replaced. Publishing never swaps a
directory that holds entries we did not write: the staging directory is swapped with `out` (atomically as a set)
only when `out` does not exist or holds nothing but our marker and entries of the set (`publish_dir`); otherwise
the set's entries are moved into `out` and the rest of it is left as it is. Nothing is deleted that this process did
not create or move aside itself, by recorded identity (device and inode) rather than by name: each staging or
old-set directory holds the record file STAGING_RECORD from its creation, is locked by the process that writes it
(cli.DirectoryLock) and removed when that process fails (cli.guard); one left by a process that died (SIGKILL, power
loss) is unlocked and removed by the next `staging_dir` of that output only if it still holds its record, never
crossing into another filesystem (`remove_ours`)."""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import uuid
from pathlib import Path

from base.io import fsync_dir

__all__ = ["STAGING_RECORD", "discard_staging", "publish_dir", "remove_ours", "resolve_output", "staging_dir",
           "stale_staging"]

RENAME_EXCHANGE = 2
_NAME_ROOM = 200
"""Output names longer than this are shortened (with a hash) in the hidden sibling names, which must fit the
filesystem's 255-byte limit with their suffixes."""
STAGING_RECORD = ".l2e-staging"
"""The record file of a staging or old-set directory this project created beside an output: JSON {"output": the
resolved output path}."""
_HELD: dict[str, tuple] = {}
"""Staging directories of this process: path -> (its lock, the failure-cleanup token, (st_dev, st_ino))."""


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


def _identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of directory `path` itself (links not followed); None if it is not one."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def remove_ours(path: str | Path) -> bool:
    """Delete `path`, a file or a directory tree that this process created (or checked to hold only what it wrote),
    never following symbolic links (a link is removed, not its target) nor entering a mount point or another
    filesystem: what lies below one stays, with the directories above it.

    Args:
      path: the file or directory.
    Returns:
      whether it is gone.
    """
    path = Path(path)
    root = _identity(path)
    if root is None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True
    return _remove_tree(path, root[0])


def _remove_tree(path: Path, dev: int) -> bool:
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            path.unlink()
            return True
        if st.st_dev != dev or os.path.ismount(path):
            return False
        gone = [_remove_tree(path / name, dev) for name in os.listdir(path)]
        if all(gone):
            path.rmdir()
        return all(gone)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _new_sibling(out: Path, what: str) -> tuple[Path, object, tuple[int, int]]:
    """A new directory `.<name>.<what>-<id>` beside `out` holding its record (STAGING_RECORD), locked by this
    process: (path, lock, identity)."""
    from cli.lock import DirectoryLock

    path = out.parent / f".{_stem(out)}.{what}-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    ident, lock = _identity(path), None
    try:
        lock = DirectoryLock(path).acquire()
        _write_record(path, out)
    except BaseException:  # a full disk while writing the record: the directory made just above goes, nothing else
        if lock is not None:
            lock.release()
        if _identity(path) == ident:
            remove_ours(path)
        raise
    return path, lock, ident


def _write_record(directory: Path, out: Path) -> None:
    (directory / STAGING_RECORD).write_text(json.dumps({"output": str(out)}) + "\n")


def _holds_record(directory: Path, out: Path) -> bool:
    """Whether `directory` holds the record naming `out` (a regular file: read only then)."""
    f = directory / STAGING_RECORD
    try:
        if not stat.S_ISREG(os.lstat(f).st_mode) or os.lstat(f).st_size > 65536:
            return False
        return json.loads(f.read_text()) == {"output": str(out)}
    except (OSError, ValueError):
        return False


def stale_staging(out: str | Path) -> list[Path]:
    """Remove the staging / old-set directories of `out` that no live process holds (left by a killed run) and that
    still hold their record (STAGING_RECORD naming `out`): a sibling without it is never touched.

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
        if _identity(p) is None or not _holds_record(p, out):
            continue
        try:
            lock = DirectoryLock(p).acquire()
        except (LockHeldError, OSError):
            continue  # a live run's, or gone meanwhile
        try:
            if remove_ours(p):
                removed.append(p)
        finally:
            lock.release()
    return removed


def _release(stage: Path, remove: bool) -> None:
    """Forget staging directory `stage` of this process (release its lock); with `remove`, delete it if it still
    is the directory `staging_dir` created (same identity): once published it is the output and never removed."""
    from cli.guard import settled

    lock, token, ident = _HELD.pop(str(stage), (None, None, None))
    settled(token)
    try:
        if remove and ident is not None and _identity(stage) == ident:
            remove_ours(stage)
    finally:
        if lock is not None:
            lock.release()


def staging_dir(out: str | Path) -> Path:
    """A new empty directory beside `out` (same filesystem, hidden name `.<name>.staging-<id>`, holding only its
    record STAGING_RECORD) in which a set of files is prepared before `publish_dir` publishes it. It is locked by
    this process and removed if the CLI fails (cli.guard); stale staging directories of `out` are removed first
    (`stale_staging`).

    Args:
      out: the directory the set will become (a symbolic link: its target).
    Returns:
      the staging directory.
    """
    from cli.guard import on_failure

    out = resolve_output(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stale_staging(out)
    stage, lock, ident = _new_sibling(out, "staging")
    _HELD[str(stage)] = (lock, on_failure(lambda: _release(stage, remove=True)), ident)
    return stage


def discard_staging(stage: str | Path) -> None:
    """Remove a staging directory that will not be published (and release it); a no-op for one already published
    or not created by this process.

    Args:
      stage: from `staging_dir`.
    Returns:
      None.
    """
    _release(Path(stage), remove=True)


def publish_dir(stage: str | Path, out: str | Path, replaced: tuple[str, ...], kind: str | None = None) -> Path:
    """Make the fully written directory `stage` (from `staging_dir`) the set of outputs in `out`. The set is the
    stage's entries (with the marker of `kind`); `replaced` names the entries of an earlier set that the new one
    replaces even when it lacks them. `out` must be ours (cli.outputs.check_ours: absent, empty or marked as `kind`;
    never a home folder or a version-control working tree). When `out` is absent or holds nothing but the marker
    and entries of the set, the stage is swapped in atomically as a set (readers see the old set or the new one;
    where the filesystem cannot exchange two directories, two renames) and the old set is deleted. Otherwise the
    set is published into `out`: the old set's entries are moved aside, the new ones moved in (each atomically;
    on a failure the moves are undone) and every other entry of `out` stays as it is. An entry of the set that is a
    mount point is never replaced (ValueError). A symbolic link `out` is kept: the set goes into its target.

    Args:
      stage: the fully written staging directory.
      out: the published directory.
      replaced: names of old entries the new set replaces (dropped even when the new set lacks them).
      kind: the output kind (cli.outputs.KINDS) whose marker the set gets; None: no marker (and any marker of ours
        in `out` passes).
    Returns:
      `out` as a Path.
    """
    from cli.outputs import check_ours, write_marker
    from cli.process import raise_pending

    raise_pending()  # an interrupt a finaliser swallowed ends the run here, before anything is replaced
    stage, shown, out = Path(stage), Path(out), resolve_output(out)
    if str(stage) not in _HELD:
        raise ValueError(f"{stage} is not a staging directory of this process (cli.staging_dir)")
    check_ours(out, kind, ValueError, "publish into it")
    if kind is not None:
        write_marker(stage, kind)
    for p in (stage, *stage.rglob("*")):
        if p.is_dir():
            fsync_dir(p)
    new = sorted(p.name for p in stage.iterdir() if p.name != STAGING_RECORD)  # with the marker of `kind`
    ours = {*replaced, *new}  # kind None: a marker in `out` is not replaced, so it is kept like any other entry
    if _identity(out) is None:
        _swap_in(stage, out, ours)
        return shown
    mounts = [n for n in sorted(ours) if os.path.ismount(out / n)]
    if mounts:
        raise ValueError(f"{out / mounts[0]} is a mount point; refusing to replace it: choose another --output")
    if any(e.name not in ours for e in out.iterdir()):
        _write_into(stage, out, ours, new)
    else:
        _swap_in(stage, out, ours)
    return shown


def _swap_in(stage: Path, out: Path, ours: set[str]) -> None:
    """Publish `stage` as `out` (absent, or holding only the entries `ours`) by renaming or exchanging it; the old
    directory's entries (ours) are deleted (`_clear_old`)."""
    (stage / STAGING_RECORD).unlink()
    if _identity(out) is None:
        os.rename(stage, out)
        fsync_dir(out.parent)
        _release(stage, remove=False)  # the lock was on the directory now at `out`
        return
    os.chmod(stage, stat.S_IMODE(os.stat(out).st_mode))  # the directory keeps its permissions
    old = stage
    if not _exchange(stage, out):
        old = out.parent / f".{_stem(out)}.old-{uuid.uuid4().hex[:12]}"
        os.rename(out, old)
        try:
            os.rename(stage, out)
        except BaseException:
            os.rename(old, out)
            _write_record(stage, out)
            raise
    _release(stage, remove=False)  # its identity is `out` now: never removed as a staging directory again
    fsync_dir(out.parent)
    _clear_old(old, out, ours)


def _clear_old(old: Path, out: Path, ours: set[str]) -> None:
    """Delete the old set in `old` (the directory `out` was before the swap). An entry that is not ours (added
    after the check) is moved back into `out`; where that fails, `old` is kept, without its record, and named in
    the OSError raised. An entry of ours that cannot be deleted stays, with the record (the next run removes it)."""
    _write_record(old, out)  # killed from here on: the next run's stale_staging removes what is left
    foreign = []
    for entry in sorted(old.iterdir()):
        if entry.name in ours or entry.name == STAGING_RECORD:
            continue
        try:
            if os.path.lexists(out / entry.name):
                raise FileExistsError
            os.rename(entry, out / entry.name)
        except OSError:
            foreign.append(entry.name)
    if foreign:
        (old / STAGING_RECORD).unlink(missing_ok=True)
        raise OSError(f"published {out}, but {', '.join(foreign)} of its previous contents could not be moved back "
                      f"into it: kept in {old}")
    remaining = [remove_ours(e) for e in sorted(old.iterdir()) if e.name != STAGING_RECORD]
    if all(remaining):
        remove_ours(old)


def _write_into(stage: Path, out: Path, ours: set[str], new: list[str]) -> None:
    """Publish the set in `stage` into `out`, which holds entries that are not ours: the old set's entries (names in
    `ours`) are moved aside into a directory of ours, then the new ones moved in; on any failure the moves are
    undone and the error raised. Nothing else in `out` is touched."""
    aside_dir, lock, _ = _new_sibling(out, "old")
    aside, moved = [], []
    try:
        for name in sorted(n for n in ours if os.path.lexists(out / n)):
            os.rename(out / name, aside_dir / name)
            aside.append(name)
        for name in new:
            os.rename(stage / name, out / name)
            moved.append(name)
    except BaseException:
        undone = _undo(moved, out, stage) & _undo(aside, aside_dir, out)
        if undone:
            remove_ours(aside_dir)  # only its record is left
        else:  # an old entry could not be put back: keep it (and the directory) for the user
            (aside_dir / STAGING_RECORD).unlink(missing_ok=True)
        lock.release()
        raise
    fsync_dir(out)
    _release(stage, remove=True)  # what is left of it: its record
    remove_ours(aside_dir)
    lock.release()


def _undo(names: list[str], src: Path, dst: Path) -> bool:
    """Move the entries `names` back from `src` to `dst` (newest first); whether every one went back."""
    ok = True
    for name in reversed(names):
        try:
            os.rename(src / name, dst / name)
        except OSError:
            ok = False
    return ok
