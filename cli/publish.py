"""Publishing a directory of outputs as a set: a staging directory beside the output, swapped in atomically."""
from __future__ import annotations

import ctypes
import os
import shutil
import uuid
from pathlib import Path

from l2e.io import fsync_dir


RENAME_EXCHANGE = 2


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


def staging_dir(out: str | Path) -> Path:
    """A new empty directory beside `out` (same filesystem, hidden name `.<name>.staging-<id>`) in which a set
    of files is prepared before `publish_dir` swaps it in.

    Args:
      out: the directory the set will become.
    Returns:
      the staging directory.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.staging-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    return stage


def publish_dir(stage: str | Path, out: str | Path, replaced: tuple[str, ...]) -> Path:
    """Make the fully written directory `stage` the directory `out`, atomically as a set: readers see either
    the old set or the new one. Entries of the old `out` that `stage` lacks and whose names are not in
    `replaced` (files of the old set that the new set does not have) are carried over; the rest of the old
    directory is deleted. Where the filesystem cannot exchange two directories, the swap is two renames.

    Args:
      stage: the fully written staging directory.
      out: the published directory.
      replaced: names of old entries the new set replaces (dropped even when the new set lacks them).
    Returns:
      `out` as a Path.
    """
    stage, out = Path(stage), Path(out)
    for p in (stage, *stage.rglob("*")):
        if p.is_dir():
            fsync_dir(p)
    if not out.exists():
        os.replace(stage, out)
        fsync_dir(out.parent)
        return out
    old = stage
    if not _exchange(stage, out):
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:12]}"
        os.replace(out, old)
        os.replace(stage, out)
    fsync_dir(out.parent)
    for entry in list(old.iterdir()):
        if entry.name not in replaced and not (out / entry.name).exists():
            os.replace(entry, out / entry.name)
    shutil.rmtree(old, ignore_errors=True)
    return out
