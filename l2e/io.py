"""What the sampler library's checkpoints need of files and configurations, and what every layer above re-uses:
ConfigError and its one-line message, JSON reading with one-line errors, rebuilding a frozen dataclass from its JSON
dict (checkpoint metadata and run configurations), and atomic file writes.

Command-line plumbing (`--set` overrides, the one-line-error parser, signals, the directory lock, publishing an
output directory as a set) lives in the `cli` package, above tasks and below meta_train / evaluate: the sampler
library has no command line."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
import uuid
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "dataclass_from_dict",
           "fsync_dir", "one_line", "read_json"]


class ConfigError(ValueError):
    """A configuration the user gave that cannot be used (unknown key, bad value)."""


# --------------------------------------------------------------------------- JSON and dataclasses


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


# --------------------------------------------------------------------------- messages


def one_line(error: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty).

    Args:
      error: an exception.
    Returns:
      a one-line string.
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
