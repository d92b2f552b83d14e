"""Re-running some samplers of a card: `python -m evaluate card --methods A,B` runs only the named samplers, and
`--update` merges their rows into the card (or analytic benchmark) already in --output, every other row kept as it
was. Both configurations must agree field for field: rows run under different configurations never share a table."""
from __future__ import annotations

import json

from base.io import ConfigError

__all__ = ["parse_methods", "select", "check_same_config", "merge"]


def parse_methods(text: str | None) -> tuple[str, ...] | None:
    """The --methods value as a tuple of sampler names (comma-separated, blanks around names dropped); None: every
    sampler. An empty list or a repeated name is a ConfigError."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise ConfigError(f"--methods {text!r}: an empty sampler name")
    if len(set(names)) != len(names):
        raise ConfigError(f"--methods {text!r}: a sampler named twice")
    return names


def select(samplers: dict, names: tuple[str, ...] | None, notes: list[str]) -> dict:
    """The builders of `names`, in the card's order (all of them for None); a name the card does not have is a
    ConfigError that lists the names it has (and why a sampler is missing, from `notes`)."""
    if names is None:
        return samplers
    unknown = [n for n in names if n not in samplers]
    if unknown:
        why = f" ({'; '.join(notes)})" if notes else ""
        raise ConfigError(f"--methods: no sampler named {unknown[0]!r} on the card{why}; it has: "
                          + ", ".join(samplers))
    return {n: b for n, b in samplers.items() if n in names}


def _plain(config: dict) -> dict:
    return json.loads(json.dumps(config))


def check_same_config(old: dict, config: dict, where: str) -> None:
    """Refuse (ConfigError) to merge rows run under `config` into the result `old` (read from `where`) when any field
    differs; the first differing field is named."""
    new, before = _plain(config), old.get("config")
    if not isinstance(before, dict):
        raise ConfigError(f"--update: {where} has no configuration to match")
    for key in sorted(set(new) | set(before)):
        if new.get(key) != before.get(key):
            raise ConfigError(f"--update: {where} was run with {key}={before.get(key)!r}, this run has "
                              f"{key}={new.get(key)!r}; re-run the whole card or pass the same --set")


def _ordered(rows: list[dict], targets: list[str], samplers: list[str]) -> list[dict]:
    """rows sorted (stably) by their target's, then their sampler's position in the given orders."""
    return sorted(rows, key=lambda r: (targets.index(r["target"]), samplers.index(r["sampler"])))


def _first_seen(*lists) -> list:
    return list(dict.fromkeys(x for seq in lists for x in seq))


def merge(old: dict, new: dict, names: tuple[str, ...]) -> dict:
    """`old` (a card or an analytic benchmark) with every row, best point, grid and skip note of the samplers in
    `names` replaced by `new`'s; the other samplers' entries, the targets' and samplers' order and the notes kept
    (new notes appended); a card's SGHMC band is `new`'s (the same seeds under the same configuration).

    Args:
      old: the result read from --output; new: this run's result (only `names` run); names: the --methods names.
    Returns:
      The merged result (a new dict; neither input is changed).
    """
    out = {**old, "config": _plain(new["config"])}
    lists = [k for k in ("rows", "best") if k in new]
    targets = _first_seen(*([r["target"] for r in old.get(k, [])] + [r["target"] for r in new[k]] for k in lists))
    samplers = _first_seen(*([r["sampler"] for r in old.get(k, [])] for k in lists),
                           old.get("step_sizes", {}), names)
    for k in lists:
        kept = [r for r in old.get(k, []) if r["sampler"] not in names]
        out[k] = _ordered(kept + list(new[k]), targets, samplers)
    for k in ("step_sizes", "skipped"):
        if k in new or k in old:
            merged = {s: v for s, v in old.get(k, {}).items() if s not in names}
            merged.update(new.get(k, {}))
            out[k] = {s: merged[s] for s in _first_seen(samplers, merged) if s in merged}
    if "band" in new:
        out["band"] = {**old.get("band", {}), **new["band"]}
    out["notes"] = _first_seen(old.get("notes", []), new.get("notes", []))
    return out
