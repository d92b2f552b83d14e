"""What both CLIs share: `--set key=value` overrides on frozen dataclasses, rebuilding a dataclass from its
JSON dict, the one-line `error:` argument parser, atomic file writes and an exclusive directory lock."""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import fcntl
import json
import math
import os
import shutil
import signal
import sys
import types
import typing
import uuid
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "DirectoryLock", "LockHeldError", "OneLineErrorParser", "SEED_RANGE", "Terminated",
           "apply_overrides", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "check_seed",
           "dataclass_from_dict", "fsync_dir", "handle_sigterm", "one_line", "publish_dir", "read_json", "staging_dir"]


class ConfigError(ValueError):
    """A configuration the user gave that cannot be used (unknown key, bad value)."""


# --------------------------------------------------------------------------- overrides and dicts


def _convert(value: str, typ: Any, key: str) -> Any:
    """`value` (command-line text) as type `typ`: bool, int, float, str, tuple[T, ...] or Optional[T]."""
    origin = typing.get_origin(typ)
    try:
        if typ is bool:
            if value.lower() in ("1", "true", "yes"):
                return True
            if value.lower() in ("0", "false", "no"):
                return False
            raise ValueError(value)
        if typ is float:
            number = float(value)
            if not math.isfinite(number):
                raise ConfigError(f"bad value for {key}: {value!r} (expected a finite number)")
            return number
        if typ in (int, str):
            return typ(value)
        if origin is tuple:
            inner = typing.get_args(typ)[0]
            items = [v for v in value.replace("(", "").replace(")", "").split(",") if v.strip()]
            return tuple(_convert(v.strip(), inner, key) for v in items)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(typ) if a is not type(None)]
            if value.lower() in ("none", "null", ""):
                return None
            return _convert(value, args[0], key)
    except ValueError:
        raise ConfigError(f"bad value for {key}: {value!r} (expected {getattr(typ, '__name__', typ)})") from None
    raise ConfigError(f"cannot set {key} from the command line")


def _set(obj: Any, path: list[str], value: str, full: str) -> Any:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    if path[0] not in names:
        raise ConfigError(f"unknown config key: {full} (known here: {', '.join(sorted(names))})")
    current = getattr(obj, path[0])
    if len(path) == 1:
        if dataclasses.is_dataclass(current):
            parse = getattr(type(current), "from_override", None)  # a group that can be given as one string
            if parse is None:
                raise ConfigError(f"{full} is a group; set one of its keys, e.g. {full}.<key>=…")
            try:
                return dataclasses.replace(obj, **{path[0]: parse(value)})
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{full}: {one_line(e)}") from None
        new = _convert(value, hints[path[0]], full)
    else:
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"unknown config key: {full}")
        new = _set(current, path[1:], value, full)
    try:
        return dataclasses.replace(obj, **{path[0]: new})
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e).splitlines()[0]) from None


def apply_overrides(config: Any, overrides: list[str], prefix: str = "") -> Any:
    """`config` (a frozen dataclass, nested ones for groups) with each "a.b=value" applied in order.

    prefix: prepended to every key (e.g. "grid." to address one group). Unknown keys, groups set as a whole,
    unparsable values and values the dataclass's own checks refuse raise ConfigError.

    Args:
      config: a frozen dataclass.
      overrides: ["a.b=value", …].
      prefix: prepended to every key.
    Returns:
      the new dataclass.
    Raises:
      ConfigError: see above.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override must look like key=value, got {item!r}")
        key, value = item.split("=", 1)
        key = prefix + key.strip()
        config = _set(config, key.split("."), value.strip(), key)
    return config


SEED_RANGE = 2**32
"""Seeds are integers in [0, 2**32): jax.random.PRNGKey keeps only the low 32 bits (without x64), so larger or
negative seeds would silently alias others (2**32 gives the key of 0), and ≥ 2**63 overflows."""


def read_json(path: str | Path, where: str, error: type[Exception] = ConfigError, shown: str | None = None) -> Any:
    """json.loads of the file at `path`; a missing, unreadable or invalid file raises one `error` line
    "{where}: {shown} not found / cannot read … / is not valid JSON (…)" (shown: default the path).

    Args:
      path: the file.
      where: the message's prefix.
      error: the exception type raised.
      shown: how the file is named in the message (default: the path).
    Returns:
      the parsed JSON value.
    """
    path = Path(path)
    shown = str(path) if shown is None else shown
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{where}: {shown} not found") from None
    except OSError as e:
        raise error(f"{where}: cannot read {shown} ({e.strerror})") from None
    except ValueError as e:
        raise error(f"{where}: {shown} is not valid JSON ({str(e).splitlines()[0]})") from None


def check_seed(seed: Any, name: str = "seed") -> None:
    """Check that `seed` is an int in [0, SEED_RANGE).

    Args:
      seed: the value.
      name: the name in the error message.
    Returns:
      None.
    Raises:
      ConfigError: otherwise.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_RANGE:
        raise ConfigError(f"{name} must be an integer in [0, 2**32), got {seed!r}")


def _scalar_ok(v: Any, t: Any) -> bool:
    """Whether JSON value `v` fits a scalar type hint `t` (int, float, bool, str; other hints are not checked)."""
    if t is bool:
        return isinstance(v, bool)
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t is str:
        return isinstance(v, str)
    return True


def dataclass_from_dict(cls: type, data: dict, where: str = "") -> Any:
    """Rebuild dataclass `cls` from `dataclasses.asdict` / JSON output: nested dataclass fields recursively,
    lists back to tuples (one level of nesting); keys `data` lacks keep their defaults. A value of the wrong
    JSON type (a string where a number belongs, a list where an object belongs, a non-finite float) or one the
    dataclass's own checks refuse raises ConfigError naming the key (prefixed by `where`).

    Args:
      cls: the dataclass.
      data: the dict.
      where: the key prefix in error messages.
    Returns:
      an instance of `cls`.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where.rstrip('.') or cls.__name__}: expected a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v, t, key = data[f.name], hints[f.name], f"{where}{f.name}"
        if dataclasses.is_dataclass(t):
            v = dataclass_from_dict(t, v, key + ".")
        elif isinstance(v, list):
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        elif isinstance(v, dict) or typing.get_origin(t) is tuple or not _scalar_ok(v, t):
            raise ConfigError(f"{key}: bad value {v!r} (expected {getattr(t, '__name__', t)})")
        kw[f.name] = v
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where.rstrip('.') or cls.__name__}: {one_line(e)}") from None


# --------------------------------------------------------------------------- the CLI parser


def one_line(error: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty).

    Args:
      error: an exception.
    Returns:
      a one-line string.
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM (see `handle_sigterm`): the CLIs treat it like Ctrl-C."""


def handle_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in the main thread, so the CLIs end it with their one-line message and
    cleanup (the default action kills the process silently), and SIGINT raise KeyboardInterrupt even when the
    parent started us with SIGINT ignored (a non-interactive shell's `cmd &` does: `kill -INT` was then a no-op).

    Returns:
      None (installs the handlers; main thread only).
    """
    def raise_terminated(signum, frame):
        raise Terminated("terminated (SIGTERM)")

    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line `error: <message>` to stderr and exit with status 2
    (argparse's own error output is a multi-line usage dump)."""

    def error(self, message):
        """Print `error: <message>` to stderr and exit with status 2.

        Args:
          message: argparse's message.
        Returns:
          never (SystemExit).
        """
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


# --------------------------------------------------------------------------- atomic writes


def fsync_dir(path: str | Path) -> None:
    """fsync directory `path` (makes renames and new entries in it durable); best effort.

    Args:
      path: a directory.
    Returns:
      None (errors are ignored).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically: a fsynced temporary file in the same directory renamed over `path`
    (readers see the old file or the new one, never part of one). Creates the parent directories. The file
    gets the ordinary mode (0666 less the umask).

    Args:
      path: the destination.
      data: the bytes.
    Returns:
      `path` as a Path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write_bytes` of `text` encoded as UTF-8.

    Args:
      path: the destination.
      text: the text.
    Returns:
      `path` as a Path.
    """
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, **dumps_kwargs) -> Path:
    """`atomic_write_bytes` of `json.dumps(obj, **dumps_kwargs)` (default indent=2, sort_keys=True; no
    trailing newline).

    Args:
      path: the destination.
      obj: a JSON-serialisable value.
      **dumps_kwargs: passed to json.dumps.
    Returns:
      `path` as a Path.
    """
    dumps_kwargs = {"indent": 2, "sort_keys": True, **dumps_kwargs}
    return atomic_write_text(path, json.dumps(obj, **dumps_kwargs))


# --------------------------------------------------------------------------- directory sets

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


# --------------------------------------------------------------------------- the directory lock


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
        return self

    def release(self) -> None:
        """Release the lock if held (a no-op otherwise).

        Returns:
          None.
        """
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
