"""Hyperparameter checks, in one place: every factory and configuration calls these where values enter.

Only concrete Python numbers are checked; traced values (e.g. a learning rate under jit for a tuning grid)
pass through unchecked.
"""
from __future__ import annotations

import math


def is_concrete(value) -> bool:
    """Whether `value` is a Python number that can be checked at build time (bool excluded).

    Args:
      value: anything.
    Returns:
      a Python bool.
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive(**values) -> None:
    """Check that every concrete value is a positive finite number (traced values pass).

    Args:
      **values: name = value.
    Returns:
      None.
    Raises:
      ValueError: naming the first value that is not.
    """
    for name, v in values.items():
        if is_concrete(v) and not (0 < v < math.inf):
            raise ValueError(f"{name} must be a positive finite number, got {v}")


def check_in_range(name: str, value, low: float, high: float, include_high: bool = True) -> None:
    """Check low ≤ value ≤ high (value < high when not include_high) for a concrete value (traced values pass).

    Args:
      name: the name in the error message.
      value: the value.
      low: the lower bound (included).
      high: the upper bound.
      include_high: whether `high` itself is allowed.
    Returns:
      None.
    Raises:
      ValueError: out of range.
    """
    if not is_concrete(value):
        return
    ok = low <= value <= high if include_high else low <= value < high
    if not ok:
        bracket = "]" if include_high else ")"
        raise ValueError(f"{name} must be in [{low}, {high}{bracket}, got {value}")
