"""The exclusive advisory lock of an output or run directory (held while a process computes and writes it)."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


class LockHeldError(RuntimeError):
    """Another process holds the lock of this directory."""


class DirectoryLock:
    """Exclusive advisory lock of a directory: fcntl.flock on the directory itself (no lock file is created,
    so the directory's contents are untouched). Held by one process at a time; released on `release()`, on
    leaving the `with` block, or when the process dies (even by SIGKILL). The directory must exist."""

    def __init__(self, directory: str | Path):
        """Args:
          directory: the directory to lock (must exist; not opened until `acquire`).
        """
        self.directory = Path(directory)
        self._fd: int | None = None
        self._cleanup: int | None = None

    def acquire(self) -> "DirectoryLock":
        """Take the lock without waiting.

        Returns:
          self.
        Raises:
          LockHeldError: another process holds it; OSError: the directory cannot be opened.
        """
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeldError(f"{self.directory} is in use by another process") from None
        self._fd = fd
        from cli.guard import on_failure

        self._cleanup = on_failure(self.release)  # a CLI that fails releases it (cli.guard)
        return self

    def release(self) -> None:
        """Release the lock if held (a no-op otherwise).

        Returns:
          None.
        """
        from cli.guard import settled

        settled(self._cleanup)
        self._cleanup = None
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
