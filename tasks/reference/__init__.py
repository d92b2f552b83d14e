"""Reference posteriors on disk (NUTS references, `python -m evaluate reference`): the format, writing and reading.

One module for both users: evaluate writes references (evaluate.hmc_reference) and reads them for its reports;
meta_train reads them for the "fidelity" objective.  A reference directory ROOT holds

    ROOT/reference.json           the index {task name: {"dir": SUBDIR, "kind", "metadata": "SUBDIR/metadata.json",
                                  "converged"}}; task names as `task_name` (evaluate's report names)
    ROOT/SUBDIR/metadata.json     {"task", "kind", "spec" (the task spec as a dict), "data": {"train", "test", …, the
                                  kind's fingerprint of the test split}, sampler, diagnostics, …}
    classification: SUBDIR/probs.txt (BMA probabilities (n_test, C), one row per test point in the task's order,
                    "%.18e"; the NeurIPS 2021 BDL text layout), SUBDIR/chain_probs.npz (probs: per-chain BMA
                    probabilities (chains, n_test, C) float32) and SUBDIR/draw_probs.npz (probs: a thinned set of
                    the draws' probabilities (S, n', C) float16, chain (S,), rows (n',): the test points they are
                    on when not all); fingerprint: "classes", "test_labels_sha256"
    regression:     SUBDIR/predictive.npz (loc, scale: per-draw Gaussian predictives (S, n_test) float32, standardised
                    target units); fingerprint: "test_y_mean", "test_y_std"

Reading checks everything and refuses with one `ReferenceDataError` line: a stored spec that is not the task's
(`tasks.reference.specs.comparable_specs`: every field but data_dir, fields added later at their old defaults), another
test split (size, label fingerprint or target statistics), probabilities of the wrong shape, outside [0, 1] or with
rows that do not sum to 1, a row order that does not beat the majority class (`check_alignment`).  A plain text
file of probabilities (`load_reference_probs`) is read with the same checks.  The .npz files (`load_draws`,
predictive.npz) are read by tasks.reference.schema: a regular file and a zip archive of the named .npy arrays only
(never unpickled), each of its dtype kind and number of dimensions with at most MAX_ARRAY_VALUES values and at most
MAX_READ_DRAWS draws — all read from the array headers before anything is allocated — then the shapes against the
reference (classes, test rows, row indices in [0, n), chain indices), probabilities in [0, 1] with rows summing to 1,
at least two draws not all the same, and the draws' average matching probs.txt on the rows they name (the reference's
own test order).  Every file is written atomically.

Modules: files (names, per-kind files, the probability reader, writing), read (finding and checking a task's entry,
the per-draw predictives), schema (the JSON and .npz files' schemas), specs (the stored spec against the configured
one).
"""
from tasks.reference.files import (DRAWS, FORMATS, INDEX, METADATA, PREDICTIVE, ROW_SUM_ATOL, ReferenceDataError,
                                   check_alignment, data_fingerprint, labels_sha256, load_reference_probs, read_index,
                                   slugify, task_name, write_reference)
from tasks.reference.read import (find_reference_dir, load_draws, load_reference_dir, load_task_dir,
                                  load_text_reference, read_json_index)
from tasks.reference.schema import MAX_ARRAY_VALUES, MAX_READ_DRAWS
from tasks.reference.specs import SPEC_ADDED, SPEC_IGNORED, comparable_specs, spec_dict

__all__ = ["DRAWS", "FORMATS", "INDEX", "MAX_ARRAY_VALUES", "MAX_READ_DRAWS", "METADATA", "PREDICTIVE", "ROW_SUM_ATOL",
           "ReferenceDataError", "SPEC_ADDED", "SPEC_IGNORED", "check_alignment", "comparable_specs",
           "data_fingerprint", "find_reference_dir", "labels_sha256", "load_draws", "load_reference_dir",
           "load_reference_probs", "load_task_dir", "load_text_reference", "read_index", "read_json_index", "slugify",
           "spec_dict", "task_name", "write_reference"]
