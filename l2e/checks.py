"""Hyperparameter checks, in one place: every factory and configuration calls these where values enter.

Only concrete numbers are checked (Python, numpy and untraced 0-d JAX scalars alike); traced values (e.g. a learning rate under jit for a tuning grid)
pass through unchecked.
"""
from __future__ import annotations

import math

import jax
import numpy as np


def is_concrete(value) -> bool:
    """Whether `value` is a number that can be checked at build time: a Python int / float, a numpy scalar or 0-d
    array, or a 0-d JAX array that is not traced (bools excluded).

    Args:
      value: anything.
    Returns:
      a Python bool.
    """
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, float, np.integer, np.floating)):
        return True
    if isinstance(value, jax.core.Tracer):
        return False
    if isinstance(value, (np.ndarray, jax.Array)):
        return value.shape == () and value.dtype.kind in "iuf"
    return False


def as_number(value) -> float:
    """A concrete number (`is_concrete`) as a Python float (an int stays an int), for comparisons and messages.

    Args:
      value: a concrete number.
    Returns:
      a Python int or float.
    """
    return value if isinstance(value, (int, float)) else np.asarray(value).item()


def check_number(name: str, value) -> None:
    """Refuse a hyperparameter that is not a number: a bool, a string, None, a container or an array that is not
    0-d (`l2e.baoab(post, False)` would otherwise run with friction 0, `np.array([-0.1])` slip past the range checks
    and a string fail deep inside the kernel); traced values pass (a grid under jit).

    Args:
      name: the name in the error message.
      value: the value.
    Raises:
      ValueError: naming the value's type (or shape).
    """
    if isinstance(value, jax.core.Tracer) or is_concrete(value):
        return
    shape = getattr(value, "shape", None)
    what = f"an array of shape {tuple(shape)}" if shape not in (None, ()) else f"a {type(value).__name__}"
    raise ValueError(f"{name} must be a number (a scalar), got {what}: {str(value)[:40]}")


def check_positive(**values) -> None:
    """Check that every concrete value is a positive finite number (traced values pass).

    Args:
      **values: name = value.
    Returns:
      None.
    Raises:
      ValueError: naming the first value that is not (or is not a number: check_number).
    """
    for name, v in values.items():
        check_number(name, v)
        if is_concrete(v) and not (0 < as_number(v) < math.inf):
            raise ValueError(f"{name} must be a positive finite number, got {v}")


def check_in_range(name: str, value, low: float, high: float, include_high: bool = True,
                   include_low: bool = True) -> None:
    """Check low ≤ value ≤ high (value < high when not include_high, low < value when not include_low) for a concrete
    value (traced values pass).

    Args:
      name: the name in the error message.
      value: the value.
      low: the lower bound (included).
      high: the upper bound.
      include_high: whether `high` itself is allowed.
      include_low: whether `low` itself is allowed.
    Returns:
      None.
    Raises:
      ValueError: out of range, or not a number (check_number).
    """
    check_number(name, value)
    if not is_concrete(value):
        return
    value = as_number(value)
    ok = (low <= value if include_low else low < value) and (value <= high if include_high else value < high)
    if not ok:
        raise ValueError(f"{name} must be in {'[' if include_low else '('}{low}, {high}{']' if include_high else ')'}, "
                         f"got {value}")


def check_choice(name: str, value, allowed) -> None:
    """Check that `value` is one of `allowed` (a configuration's named option).

    Args:
      name: the name in the error message.
      value: the value.
      allowed: the allowed values.
    Returns:
      None.
    Raises:
      ValueError: naming the allowed values.
    """
    if value not in tuple(allowed):
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def check_step_count(name: str, value, minimum: int = 0) -> None:
    """Check an update count (a burn-in, a freeze step): a Python / numpy integer ≥ minimum, or a traced integer
    scalar (the evaluation passes budget-dependent counts as call arguments, so one compiled chunk serves every
    budget: evaluate.methods.driver); bools, floats and anything else are refused.

    Args:
      name: the name in the error message.
      value: the value.
      minimum: the least allowed value.
    Raises:
      ValueError: naming the value.
    """
    if isinstance(value, jax.core.Tracer):
        if value.shape != () or value.dtype.kind not in "iu":
            raise ValueError(f"{name} must be an integer scalar, got a traced {value.dtype} of shape {value.shape}")
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {value!r}")


def check_finite(**values) -> None:
    """Check that every concrete value is a finite number of any sign (an output multiplier, a scale); traced
    values pass.

    Args:
      **values: name = value.
    Raises:
      ValueError: naming the first value that is not (or is not a number: check_number).
    """
    for name, v in values.items():
        check_number(name, v)
        if is_concrete(v) and not math.isfinite(as_number(v)):
            raise ValueError(f"{name} must be a finite number, got {v}")


def check_flag(**values) -> None:
    """Check that every value is a bool (Python or numpy): a switch given as a string ("yes"), a number or an array
    would otherwise be read by its truth value (`"False"` is true) instead of refused.

    Args:
      **values: name = value.
    Raises:
      ValueError: naming the first value that is not a bool.
    """
    for name, v in values.items():
        if not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got a {type(v).__name__}: {str(v)[:40]}")
