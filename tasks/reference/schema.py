"""The schemas of a reference directory's JSON files (layout: the module doc of tasks.reference), checked when they
are read, before anything is computed or written: one ReferenceDataError line names the file and the field."""
from __future__ import annotations

from base.io import check_json_object, json_type

__all__ = ["check_index", "check_metadata"]

INDEX_ENTRY = {"dir": "str", "kind": "str", "metadata": "str", "converged": "bool"}
METADATA = {"task": "str", "kind": "str", "spec": "object", "data": "object", "sampler": "null|object",
            "seed": "null|int", "num_divergent": "count", "num_grad_evals": "null|count", "seconds": "null|number",
            "finite": "bool", "function_space": "null|object", "weight_space": "null|object", "test": "null|object",
            "dispersion": "null|object", "converged": "bool", "convergence_rule": "str", "per_chain": "object"}
DATA = {"train": "count", "test": "count", "classes": "count", "test_labels_sha256": "str", "test_y_mean": "number",
        "test_y_std": "number", "input_shape": "list"}
SAMPLER = {"chains": "count", "total_draws": "count", "warmup": "count", "samples_per_chain": "count",
           "thinning": "count", "max_num_doublings": "count", "init": "str"}
DISPERSION = {"weight_norm": "null|number", "pairwise_distance": "null|number",
              "pairwise_distance_within_chain": "null|number", "predictive_variance": "null|number",
              "num_samples": "count", "split": "str"}
RHAT = {"max": "null|number", "median": "null|number"}


def _plain_name(name: str) -> bool:
    """A single path component inside the reference directory (no separator, not "." / "..", not hidden)."""
    return bool(name) and "/" not in name and "\\" not in name and "\0" not in name and not name.startswith(".")


def check_index(index, where: str, error) -> dict:
    """Check a parsed reference.json: {task name: {"dir": a plain folder name, "kind", "metadata", "converged"}}.

    Args:
      index: the parsed file.
      where: the file, for messages.
      error: the exception type raised (ReferenceDataError).
    Returns:
      `index`.
    """
    check_json_object(index, where, {}, error=error)
    for name, entry in index.items():
        check_json_object(entry, f"{where}: entry {name!r}", INDEX_ENTRY, ("dir",), error)
        if not _plain_name(entry["dir"]):
            raise error(f"{where}: entry {name!r} has dir {entry['dir']!r}, not a folder name inside the reference "
                        "directory")
    return index


def check_metadata(meta, where: str, error, formats) -> dict:
    """Check a parsed task metadata.json: field kinds at every level that is read (data, sampler, dispersion,
    function_space.split_rhat) and the kind one of `formats`.

    Args:
      meta: the parsed file.
      where: the file, for messages.
      error: the exception type raised (ReferenceDataError).
      formats: the known kinds.
    Returns:
      `meta`.
    """
    check_json_object(meta, where, METADATA, ("kind", "spec"), error)
    if meta["kind"] not in formats:
        raise error(f"{where}: field 'kind' is {json_type(meta['kind'])}, expected one of {', '.join(formats)}")
    check_json_object(meta.get("data", {}), f"{where}: field 'data'", DATA, error=error)
    for key, fields in (("sampler", SAMPLER), ("dispersion", DISPERSION)):
        if meta.get(key) is not None:
            check_json_object(meta[key], f"{where}: field {key!r}", fields, error=error)
    function_space = meta.get("function_space") or {}
    if function_space.get("split_rhat") is not None:
        check_json_object(function_space["split_rhat"], f"{where}: field 'function_space.split_rhat'", RHAT,
                          error=error)
    spec = meta["spec"]
    if "model" in spec and not isinstance(spec["model"], dict):
        raise error(f"{where}: field 'spec.model' is {json_type(spec['model'])}, expected object")
    return meta
