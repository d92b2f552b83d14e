"""`build(spec, cache)`: the task of any task spec (classification `TaskSpec` or `RegressionSpec`)."""
from __future__ import annotations

from tasks.base import TaskBase, TaskCache
from tasks.regression import RegressionSpec, build_regression_task
from tasks.task import TaskSpec, build_task


def build(spec: TaskSpec | RegressionSpec, cache: TaskCache | None = None) -> TaskBase:
    """Build a `TaskSpec` (classification `Task`) or a `RegressionSpec` (`RegressionTask`); with `cache`, once
    per spec."""
    if isinstance(spec, RegressionSpec):
        return build_regression_task(spec, cache)
    if isinstance(spec, TaskSpec):
        return build_task(spec, cache)
    raise TypeError(f"not a task spec: {spec!r}")
