"""What both CLIs share: `--set key=value` overrides on frozen dataclasses, rebuilding a dataclass from its
JSON dict, the one-line `error:` argument parser, atomic file writes and an exclusive directory lock."""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import sys
import types
import typing
import uuid
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "DirectoryLock", "LockHeldError", "OneLineErrorParser", "apply_overrides",
           "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "dataclass_from_dict", "fsync_dir",
           "one_line"]


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
        if typ in (int, float, str):
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
    unparsable values and values the dataclass's own checks refuse raise ConfigError."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override must look like key=value, got {item!r}")
        key, value = item.split("=", 1)
        key = prefix + key.strip()
        config = _set(config, key.split("."), value.strip(), key)
    return config


def dataclass_from_dict(cls: type, data: dict) -> Any:
    """Rebuild dataclass `cls` from `dataclasses.asdict` / JSON output: nested dataclass fields recursively,
    lists back to tuples (one level of nesting); keys `data` lacks keep their defaults."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v, t = data[f.name], hints[f.name]
        if dataclasses.is_dataclass(t):
            v = dataclass_from_dict(t, v)
        elif isinstance(v, list):
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        kw[f.name] = v
    return cls(**kw)


# --------------------------------------------------------------------------- the CLI parser


def one_line(error: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse parser whose usage errors print one line `error: <message>` to stderr and exit with status 2
    (argparse's own error output is a multi-line usage dump)."""

    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


# --------------------------------------------------------------------------- atomic writes


def fsync_dir(path: str | Path) -> None:
    """fsync directory `path` (makes renames and new entries in it durable); best effort."""
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
    gets the ordinary mode (0666 less the umask)."""
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
    """`atomic_write_bytes` of `text` encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, **dumps_kwargs) -> Path:
    """`atomic_write_bytes` of `json.dumps(obj, **dumps_kwargs)` (default indent=2, sort_keys=True; no
    trailing newline)."""
    dumps_kwargs = {"indent": 2, "sort_keys": True, **dumps_kwargs}
    return atomic_write_text(path, json.dumps(obj, **dumps_kwargs))


# --------------------------------------------------------------------------- the directory lock


class LockHeldError(RuntimeError):
    """Another process holds the lock of this directory."""


class DirectoryLock:
    """Exclusive advisory lock of a directory: fcntl.flock on the directory itself (no lock file is created,
    so the directory's contents are untouched). Held by one process at a time; released on `release()`, on
    leaving the `with` block, or when the process dies (even by SIGKILL). The directory must exist."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._fd: int | None = None

    def acquire(self) -> "DirectoryLock":
        """Take the lock without waiting; LockHeldError if another process holds it (OSError if the
        directory cannot be opened)."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeldError(f"{self.directory} is in use by another process") from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
