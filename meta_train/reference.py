"""NUTS reference predictives for the "fidelity" meta-objective (meta_train.objectives; docs/meta_training.md
§ Objectives).

The reference directories `python -m evaluate reference` writes are read with tasks.reference (the format, its
checks and the spec comparison live there, below both meta_train and evaluate).  `load_task_reference(root,
task)` finds the entry whose stored spec is the task's (every field but data_dir, whatever its index name) and
checks it against the built task: classification, training- and test-set sizes, number of classes, the test labels'
fingerprint, probabilities of the right shape whose rows sum to 1 and beat the majority class.  Every refusal is
one `ReferenceError` line (a ConfigError: the CLI prints it as `error: …`, exit 2) naming the task.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from base.io import ConfigError
from tasks.reference import ReferenceDataError, find_reference_dir, load_draws, load_task_dir, task_name

__all__ = ["ReferenceError", "TaskReference", "find_reference_dir", "load_task_reference", "task_name"]


class ReferenceError(ConfigError):
    """A reference that is missing or does not fit its meta-training task (one line)."""


class TaskReference(NamedTuple):
    """A task's reference: probs (n_test, C) float32 (rows = the task's test split, in order), its directory, and
    pred_var: its kept draws' predictive variance (mean over test points and classes of the across-draw variance,
    ddof 1; meta_train.objectives.fidelity) or None when `load_task_reference` was not asked for it."""

    probs: np.ndarray
    path: str
    pred_var: float | None = None


def load_task_reference(root, task, draws: bool = False) -> TaskReference:
    """The checked reference of a built meta-training task in reference directory `root` (module doc); with
    `draws`, also its draws' predictive variance, from draw_probs.npz holding every test point (ReferenceError
    when the reference has no per-draw predictives or keeps a subset of rows)."""
    name = task_name(task.spec)
    if not task.likelihood.has_class_probs:
        raise ReferenceError(f"objective.kind fidelity needs classification tasks; meta-training task {name!r} is "
                             f"{task.kind}")
    try:
        d = find_reference_dir(root, task.spec, "objective.reference", "meta-training task")
        ref = load_task_dir(d, task, name)
        kept = load_draws(d, task.kind) if draws else None
    except ReferenceDataError as e:
        raise ReferenceError(str(e)) from None
    pred_var = None
    if draws:
        if (kept is None or kept["rows"] is not None or len(kept["probs"]) < 2
                or kept["probs"].shape[1:] != ref["probs"].shape):
            raise ReferenceError(f"the reference of meta-training task {name!r} ({d}) keeps no per-draw predictives "
                                 "on every test point (draw_probs.npz, ≥ 2 draws): objective.dispersion_weight "
                                 "needs them")
        pred_var = float(np.mean(np.var(np.asarray(kept["probs"], np.float64), axis=0, ddof=1)))
    return TaskReference(ref["probs"].astype(np.float32), str(d), pred_var)
