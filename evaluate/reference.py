"""The references of an evaluation: `load_references` resolves `--reference [TASK=]PATH` against the configured
tasks (the files and their checks: tasks.reference), and `REFERENCE_TASKS` lists the tasks of the committed NUTS
references (results/references/)."""
from __future__ import annotations

from pathlib import Path

from tasks.models import ModelSpec
from tasks.reference import (INDEX, ROW_SUM_ATOL, ReferenceDataError, check_alignment, load_reference_dir,
                             load_reference_probs, load_text_reference, read_json_index)
from tasks.regression import RegressionSpec
from tasks.task import TaskSpec
from tasks.zoo import FORCED_TRAIN

__all__ = ["HELD_OUT_REFERENCES", "META_TRAIN_REFERENCES", "REFERENCE_TASKS", "ROW_SUM_ATOL", "ReferenceDataError", "check_alignment", "load_reference_dir",
           "load_reference_probs", "load_references"]

REFERENCE_TASKS = (
    (RegressionSpec("uci:power-plant", hidden=()),
     "dataset+task (UCI power plant, 6,697 training rows; heteroscedastic *linear* Gaussian model: every MLP tried "
     "left NUTS chains in different functional modes, see results/references/README.md)"),
    (TaskSpec("digits", ModelSpec("mlp", hidden=(32,))),
     "architecture (8x8 digit images with an MLP 32; meta-training saw only CNNs)"),
    (TaskSpec("mnist", ModelSpec("mlp", hidden=(8,)), max_train=10000),
     "dataset+architecture (MNIST, first 10,000 training images: 8,000 train; MLP 8; meta-training saw digits CNNs)"),
    (TaskSpec("mnist", ModelSpec("mlp", hidden=()), max_train=10000),
     "dataset+architecture (MNIST, first 10,000 training images: 8,000 train; softmax regression, 7,850 parameters, "
     "whose posterior NUTS can converge on; meta-training saw digits CNNs)"),
    (TaskSpec("breast_cancer", ModelSpec("mlp", hidden=(16,))),
     "dataset+architecture (tabular binary classification, 30 features, MLP 16; no meta-training reference is "
     "tabular binary)"),
    (TaskSpec("digits", ModelSpec("mlp", hidden=(16,))), "meta-training reference (digits, MLP 16)"),
    (TaskSpec("wine", ModelSpec("mlp", hidden=(16,))), "meta-training reference (wine, MLP 16)"),
)
"""The tasks of the committed NUTS references (results/references/; `python -m evaluate reference --preset
references`), in the order that fixes their keys (task t: fold_in(PRNGKey(0), t)), with why each is held out (or
that it is a meta-training reference)."""

META_TRAIN_REFERENCES = FORCED_TRAIN
"""The references the shipped learned samplers were meta-trained against (fidelity objectives; digits/mlp-16,
wine/mlp-16: tasks.zoo.FORCED_TRAIN). The zoo's split (tasks.zoo.split) extends this to every zoo posterior and
governs any new meta-training: it may read the zoo's meta-training half only."""
HELD_OUT_REFERENCES = tuple(
    name for name in ("uci:power-plant[mile-s1]/mlp-linear", "digits/mlp-32", "mnist/mlp-8-n10000",
                      "mnist/mlp-linear-n10000", "breast_cancer/mlp-16") if name not in META_TRAIN_REFERENCES)
"""The issue-12 references the shipped learned samplers never saw in meta-training, by task name (the zoo's split
puts power plant and breast_cancer/mlp-16 in its meta-training half for new meta-training: tasks.zoo)."""


def load_references(references: dict | None, names: list[str], tasks: list) -> dict[str, dict]:
    """{task name: reference} from {task name or None: path}; None stands for the only task, or, for a
    reference directory, for every configured task the directory holds.

    A path is a plain text file of probabilities (classification; see `load_reference_probs`) or a directory
    with reference.json (from `python -m evaluate reference`), whose stored task kind, spec (all fields
    except data_dir) and test data must match the configured task.  Every entry is checked (shape against the
    task's test split, probabilities, row order).  Returned per task: {"path", "kind", "probs" (n, C) and
    "accuracy" (classification) or "loc", "scale" (S, n) (regression), "metadata" (dict, None for a text file),
    "dispersion" (the reference's evaluate.dispersion statistics on the test split from its metadata; None for a
    text file or a reference written before they were stored)}.
    """
    out = {}
    for key, path in (references or {}).items():
        is_dir = Path(path).is_dir()
        if is_dir and not (Path(path) / INDEX).is_file():
            raise ReferenceDataError(f"reference {path}: a directory without {INDEX} (not written by "
                                     "`python -m evaluate reference`)")
        if key is None and is_dir:
            index = read_json_index(Path(path), f"reference directory {path}")
            selected = [n for n in names if n in index]
            if not selected:
                raise ReferenceDataError(f"reference directory {path} holds none of the configured tasks "
                                         f"({', '.join(names)}); it has: {', '.join(index) or 'none'}")
        elif key is None:
            if len(names) != 1:
                raise ReferenceDataError(f"--reference {path}: the configuration has {len(names)} tasks; "
                                         f"name one as TASK=PATH (tasks: {', '.join(names)})")
            selected = [names[0]]
        else:
            if key not in names:
                raise ReferenceDataError(f"--reference for unknown task {key!r}; tasks: {', '.join(names)}")
            selected = [key]
        for name in selected:
            if name in out:
                raise ReferenceDataError(f"reference for task {name!r} given twice ({out[name]['path']}, {path})")
            task = tasks[names.index(name)]
            out[name] = load_reference_dir(path, name, task) if is_dir else load_text_reference(path, task, name)
    return out
