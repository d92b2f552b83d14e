"""Project-wide plumbing below the sampler library, used by every layer: ConfigError and its one-line message,
JSON reading with one-line errors and bounds, rebuilding a frozen dataclass from its JSON dict (checkpoint metadata
and run configurations), and atomic file writes.

Command-line plumbing (`--set` overrides, the one-line-error parser, signals, the directory lock, publishing an
output directory as a set) lives in the `cli` package, above tasks and below meta_train / evaluate."""
from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import stat
import types
import typing
import uuid
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "MAX_FILE_BYTES", "MAX_JSON_DEPTH", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "check_json_object", "dataclass_from_dict", "fsync_dir", "json_depth", "json_type",
           "one_line", "parse_json", "read_bounded", "read_json"]

MAX_FILE_BYTES = 64 * 2**20
"""The largest JSON / text file the project reads whole (configs, logs, metadata, indexes, task lists): 64 MiB."""
MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects accepted in a JSON file the project reads (its own files nest < 10)."""


class ConfigError(ValueError):
    """A configuration the user gave that cannot be used (unknown key, bad value)."""


# --------------------------------------------------------------------------- JSON and dataclasses


def read_bounded(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path`, refused before reading when it is larger than `limit` (or not a
    regular file: a FIFO, a device such as /dev/zero, a directory), so no input file can hang the process or
    exhaust its memory.

    Args:
      path: the file.
      limit: the largest size accepted, in bytes.
    Returns:
      the file's bytes (at most `limit`).
    Raises:
      FileNotFoundError: no such file; OSError: unreadable, not a regular file (EINVAL) or too large (EFBIG), its
        strerror a short phrase for messages.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO does not wait for a writer
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than the limit of {limit} bytes", str(path))
    return data


def json_depth(value: Any, stop: int | None = None) -> int:
    """The nesting depth of a parsed JSON value (a scalar 0, `[]` / `{}` 1, `[[1]]` 2), found without recursion.

    Args:
      value: a parsed JSON value.
      stop: return as soon as the depth exceeds this (None: the exact depth).
    Returns:
      the depth.
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if stop is not None and deepest > stop:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads of `text` with its nesting bounded (a deeply nested file would otherwise raise RecursionError
    here or in any recursive code that reads it later).

    Args:
      text: the JSON text (bytes are decoded as UTF-8).
      max_depth: the deepest nesting accepted.
    Returns:
      the parsed value.
    Raises:
      ValueError: invalid JSON, not UTF-8, or nested deeper than `max_depth` (one-line message).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    except ValueError as e:
        raise ValueError(one_line(e)) from None
    if json_depth(value, stop=max_depth) > max_depth:
        raise ValueError(f"nested more than {max_depth} levels deep")
    return value


def read_json(path: str | Path, where: str, error: type[Exception] = ConfigError, shown: str | None = None,
              max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The parsed JSON file at `path` (`read_bounded`, `parse_json`); a missing, unreadable, too large, too deeply
    nested or invalid file raises one `error` line "{where}: {shown} not found / cannot read … / is not valid JSON
    (…)" (shown: default the path).

    Args:
      path: the file.
      where: the message's prefix.
      error: the exception type raised.
      shown: how the file is named in the message (default: the path).
      max_bytes: the largest file accepted (bytes).
      max_depth: the deepest nesting accepted.
    Returns:
      the parsed JSON value.
    """
    path = Path(path)
    shown = str(path) if shown is None else shown
    try:
        return parse_json(read_bounded(path, max_bytes), max_depth)
    except FileNotFoundError:
        raise error(f"{where}: {shown} not found") from None
    except OSError as e:
        raise error(f"{where}: cannot read {shown} ({e.strerror or one_line(e)})") from None
    except ValueError as e:
        raise error(f"{where}: {shown} is not valid JSON ({one_line(e)})") from None


_JSON_TYPES = {
    "null": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "positive": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
    "str": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
}
"""The value kinds of `check_json_object` (count: an integer ≥ 0; number: finite; positive: finite > 0)."""


def json_type(value: Any) -> str:
    """How a message names a parsed JSON value's type: "a string 'abc'", "a list", "null", "a number 1.5".

    Args:
      value: a parsed JSON value.
    Returns:
      a short phrase.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"a number {value!r}"
    if isinstance(value, str):
        return f"a string {value[:40]!r}" + ("…" if len(value) > 40 else "")
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def check_json_object(value: Any, where: str, fields: dict[str, str], required: tuple[str, ...] = (),
                      error: type[Exception] = ConfigError) -> dict:
    """Check a parsed JSON object against a schema of field kinds, before anything uses it.

    Args:
      value: the parsed value.
      where: the file (and the path of `value` in it), for the message.
      fields: {field: kinds} with kinds one or more of _JSON_TYPES joined by "|" (e.g. "null|object"); fields not
        named are not checked.
      required: fields that must be present.
      error: the exception type raised.
    Returns:
      `value`.
    Raises:
      error: not an object, a required field missing, or a field of another kind (one line naming it).
    """
    if not isinstance(value, dict):
        raise error(f"{where}: expected a JSON object, got {json_type(value)}")
    for key in required:
        if key not in value:
            raise error(f"{where}: no field {key!r}")
    for key, kinds in fields.items():
        if key in value and not any(_JSON_TYPES[k](value[key]) for k in kinds.split("|")):
            raise error(f"{where}: field {key!r} is {json_type(value[key])}, expected {kinds.replace('|', ' or ')}")
    return value


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


def _fits(v: Any, t: Any) -> bool:
    """Whether JSON value `v` (lists already tuples) fits type hint `t`: the scalars of `_scalar_ok`, Optional[T]
    (None or T), tuple[T, ...] / tuple[T1, T2] (every item checked, nested tuples too); other hints are not checked."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (typing.Union, types.UnionType):
        return any(v is None if a is type(None) else _fits(v, a) for a in args)
    if origin is tuple or t is tuple:
        if not isinstance(v, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(x, args[0]) for x in v)
        return not args or (len(args) == len(v) and all(_fits(x, a) for x, a in zip(v, args)))
    if t in (bool, int, float, str):
        return not isinstance(v, (tuple, dict)) and _scalar_ok(v, t)
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
            if not _fits(v, t):  # every item of the type its field holds (a number where a name belongs: refused)
                raise ConfigError(f"{key}: bad value {json.dumps(v)[:80]} (expected {t})")
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
