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


def _value(obj: Any, name: str, current: Any, value: str, full: str) -> Any:
    """The new value of field `name` of `obj` from command-line text: a group given as one string (its class's
    `from_override`) or a typed value (`_convert`)."""
    if dataclasses.is_dataclass(current):
        parse = getattr(type(current), "from_override", None)  # a group that can be given as one string
        if parse is None:
            raise ConfigError(f"{full} is a group; set one of its keys, e.g. {full}.<key>=…")
        try:
            return parse(value)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{full}: {one_line(e)}") from None
    return _convert(value, typing.get_type_hints(type(obj))[name], full)


def _apply(obj: Any, tree: dict, where: str) -> Any:
    """`obj` with every override of `tree` ({field: text, or {sub-field: …} for a group}) applied at once: each group
    is rebuilt once with all its new fields, so its checks (and the top level's) see the whole configuration, never
    a half-applied one (`inner.num_steps=8 inner.num_samples=2` is valid in either order)."""
    names = {f.name for f in dataclasses.fields(obj)}
    new = {}
    for name, sub in tree.items():
        full = where + name
        if name not in names:
            raise ConfigError(f"unknown config key: {full} (known here: {', '.join(sorted(names))})")
        current = getattr(obj, name)
        if isinstance(sub, dict):
            if not dataclasses.is_dataclass(current):
                raise ConfigError(f"unknown config key: {full}.{next(iter(sub))} ({full} is not a group)")
            new[name] = _apply(current, sub, full + ".")
        else:
            new[name] = _value(obj, name, current, sub, full)
    try:
        return dataclasses.replace(obj, **new)
    except (ValueError, TypeError) as e:
        raise ConfigError(one_line(e)) from None


def parse_overrides(overrides: list[str], prefix: str = "") -> dict:
    """["a.b=value", …] as a tree {"a": {"b": "value"}, …}; each key at most once.

    Args:
      overrides: the key=value items.
      prefix: prepended to every key.
    Returns:
      the tree (values stripped text).
    Raises:
      ConfigError: an item without "=", an empty key, a key given twice, or a group given both whole and by key
        (which would make the result depend on the order).
    """
    tree: dict = {}
    given: dict[str, str] = {}
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override must look like key=value, got {item!r}")
        key, value = item.split("=", 1)
        key = prefix + key.strip()
        path = key.split(".")
        if not all(path):
            raise ConfigError(f"override key {key!r} has an empty part (in {item!r})")
        for i in range(1, len(path) + 1):
            head = ".".join(path[:i])
            if head in given and i == len(path):
                raise ConfigError(f"override {key} given twice: {given[head]!r} and {item!r} (give each key once)")
            if head in given:
                raise ConfigError(f"override {head} set both whole ({given[head]!r}) and by key ({item!r}) (give "
                                  "each key once)")
        clash = next((k for k in given if k.startswith(key + ".")), None)
        if clash is not None:
            raise ConfigError(f"override {key} set both whole ({item!r}) and by key ({given[clash]!r}) (give each "
                              "key once)")
        given[key] = item
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value.strip()
    return tree


def apply_overrides(config: Any, overrides: list[str], prefix: str = "") -> Any:
    """`config` (a frozen dataclass, nested ones for groups) with every "a.b=value" applied at once: each key at most
    once (`parse_overrides`), each group rebuilt once with all its new fields, so every check runs on the whole
    configuration after all overrides (the order of the items does not matter).

    prefix: prepended to every key (e.g. "grid." to address one group). Unknown keys, keys given twice, groups set
    as a whole without a parser, unparsable values and values the dataclasses' own checks refuse raise ConfigError.

    Args:
      config: a frozen dataclass.
      overrides: ["a.b=value", …].
      prefix: prepended to every key.
    Returns:
      the new dataclass (`config` itself when there are no overrides).
    Raises:
      ConfigError: see above.
    """
    tree = parse_overrides(list(overrides), prefix)
    return _apply(config, tree, "") if tree else config


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
