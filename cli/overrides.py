"""`key=value` overrides on frozen dataclass configurations (the `--set` of every CLI) and the seed check."""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from base.io import ConfigError, one_line


def _shown(value: str) -> str:
    """`value`'s repr for a message, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:76] + "…" + text[-1]


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
                raise ConfigError(f"bad value for {key}: {_shown(value)} (expected a finite number)")
            return number
        if typ is int:
            number = int(value)
            if abs(number) >= 2**63:
                raise ConfigError(f"bad value for {key}: {_shown(value)} ({key} must be an integer of magnitude "
                                  "below 2**63)")
            return number
        if typ is str:
            return value
        if origin is tuple:
            inner = typing.get_args(typ)[0]
            items = [v for v in value.replace("(", "").replace(")", "").split(",") if v.strip()]
            return tuple(_convert(v.strip(), inner, key) for v in items)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(typ) if a is not type(None)]
            if value.lower() in ("none", "null"):
                return None
            if not value.strip():
                if typing.get_origin(args[0]) is tuple:  # an empty list is not "unset": say which is meant
                    raise ConfigError(f"bad value for {key}: '' (an empty list; give values, or none for the default)")
                return None
            return _convert(value, args[0], key)
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"bad value for {key}: {_shown(value)} (expected {getattr(typ, '__name__', typ)})") from None
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
