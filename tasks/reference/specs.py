"""A task spec stored with a result (a NUTS reference's metadata.json) against the configured task's spec."""
from __future__ import annotations

import dataclasses
import json

__all__ = ["SPEC_ADDED", "SPEC_IGNORED", "comparable_specs", "spec_dict"]

SPEC_IGNORED = ("data_dir",)
"""Spec fields not compared (a location, not the data: the data are checked by the test-set size and label
fingerprint / target statistics instead)."""
SPEC_ADDED = {"activation": "relu", "factory": None, "valid": None, "max_train": None, "noise": "hetero"}
"""Spec fields added after references were first stored, with the value a spec stored without them had."""


def spec_dict(spec) -> dict:
    """The JSON form of a task spec (dataclass), less SPEC_IGNORED."""
    d = json.loads(json.dumps(dataclasses.asdict(spec)))
    return {k: v for k, v in d.items() if k not in SPEC_IGNORED}


def _with_added(stored: dict, configured: dict) -> dict:
    out = dict(stored)
    for k, v in configured.items():
        if k not in out and k in SPEC_ADDED:
            out[k] = SPEC_ADDED[k]
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _with_added(out[k], v)
    return out


def comparable_specs(stored: dict, spec) -> tuple[dict, dict, list[str]]:
    """(stored, configured, differing top-level fields): `stored` less SPEC_IGNORED with the SPEC_ADDED fields it
    lacks (and its nested model dict lacks) at their old values, `spec_dict(spec)`, and the sorted keys on which
    they differ (empty: the stored result is the configured task's)."""
    configured = spec_dict(spec)
    stored = _with_added({k: v for k, v in stored.items() if k not in SPEC_IGNORED}, configured)
    return stored, configured, sorted(k for k in set(stored) | set(configured) if stored.get(k) != configured.get(k))
