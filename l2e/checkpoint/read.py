"""Reading checkpoints: shipped names, step directories, metadata, meta-parameter checks, `load_meta_params` and
`load_sampler` (the package docstring of l2e.checkpoint describes the layout)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from l2e import learned
from base.io import ConfigError, check_json_object, dataclass_from_dict, one_line, parse_json, read_bounded
from l2e.meta_model import NUM_FEATURES
from l2e.types import LearnedSampler, Posterior, PyTree, SamplingAlgorithm


ITEMS = ("es_state", "meta_params", "meta")
KEEP_CHECKPOINTS = 3


def _shipped_table() -> dict[str, str]:
    table = {"default": learned.DEFAULT_SHIPPED}
    table.update({name: name for name in learned.shipped()})
    return {name: target.replace("-", "_") for name, target in table.items()}


SHIPPED = _shipped_table()
"""Shipped name -> directory under the `checkpoints` package, from the learned-sampler registry (l2e.learned: each
kind's `shipped` rows; the folder is the name with "-" → "_"). "default" is `learned.DEFAULT_SHIPPED`, Transient-L2E
(`l2e.transient`, tuning-free and correct by construction in its window); "mass" is Mass-L2E (meta-trained by
`python -m meta_train --preset default`); "paper-form" is the
paper-form L2E (the evaluation's `l2e` method and the golden smoke evaluation run it); "kinetic" the meta-trained
Kinetic-L2E; "meta-sgmcmc", "precond-l2e" and "small-l2e" the published rows (checkpoints/*/PROVENANCE.md)."""


def check_meta_params(meta_params: Any, where: str, inputs: int = NUM_FEATURES, outputs: int = 2) -> PyTree:
    """Validate a restored meta-parameter tree: Dense layers `inputs` → … → `outputs` with consistent shapes.

    Args:
      meta_params: the restored tree.
      where: the name in the error message (e.g. the step directory).
      inputs: the expected input width (default: the paper-form L2E's 9).
      outputs: the expected output width (default 2).
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      CheckpointError: another structure or shape.
    """
    try:
        return learned.check_stack(meta_params, where, inputs, outputs)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def check_head_tree(meta_params: Any, where: str) -> PyTree:
    """Validate a restored Meta-SGMCMC meta-parameter tree {head: Dense stack}.

    Args:
      meta_params: the restored tree.
      where: the name in the error message.
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      CheckpointError: another structure or shape.
    """
    return check_kind_params(learned.get("meta_sgmcmc"), meta_params, where)


def check_kind_params(entry: LearnedSampler, meta_params: Any, where: str) -> PyTree:
    """`l2e.learned.check_meta_params` of a kind's meta-model, its ValueError as a CheckpointError.

    Args:
      entry: the kind's registry entry.
      meta_params: the restored tree.
      where: the name in the error message.
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      CheckpointError: not that kind's meta-model.
    """
    try:
        return learned.check_meta_params(entry, meta_params, where)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt or of another meta-model shape."""


def shipped_checkpoint(name: str = "default") -> Path:
    """The directory of a shipped checkpoint.

    Args:
      name: a key of SHIPPED.
    Returns:
      its absolute path under the `checkpoints` package.
    Raises:
      CheckpointError: an unknown name.
    """
    import checkpoints

    if name not in SHIPPED:
        raise CheckpointError(f"unknown shipped sampler {name!r} (known: {', '.join(SHIPPED)})")
    return Path(checkpoints.__file__).resolve().parent / SHIPPED[name]


def resolve_checkpoint(name_or_path: str | Path | None) -> Path:
    """The directory a name or path refers to.

    Args:
      name_or_path: None → shipped "default"; a key of SHIPPED (a plain string) → that shipped checkpoint;
        anything else → the path itself.
    Returns:
      a Path (not checked to exist).
    """
    if name_or_path is None:
        return shipped_checkpoint()
    if isinstance(name_or_path, str) and name_or_path in SHIPPED:
        return shipped_checkpoint(name_or_path)
    return Path(name_or_path)


def resolve_step_dir(path: str | Path) -> Path:
    """The checkpoint step directory named by `path`.

    Args:
      path: a meta-training run directory, its checkpoints directory (the latest step is taken) or a step directory.
    Returns:
      the step directory.
    Raises:
      CheckpointError: missing path, no complete step, or an incomplete latest step.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if (path / "meta_params").is_dir():
        return path
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: not a directory")
    steps = sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())
    if not steps:
        raise CheckpointError(f"no complete checkpoint step under {path}")
    latest = root / str(steps[-1])
    check_complete(latest, ("meta_params", "meta"))
    return latest


def check_complete(step_dir: Path, items: tuple[str, ...] = ITEMS) -> None:
    """Check that a committed step directory holds its items: steps are committed whole (renamed from staging), so
    a missing item is damage, never a step to skip silently in favour of an older one.

    Args:
      step_dir: the step directory.
      items: the item directories it must hold.
    Returns:
      None.
    Raises:
      CheckpointError: an item is missing.
    """
    missing = [item for item in items if not (step_dir / item).is_dir()]
    if missing:
        raise CheckpointError(f"checkpoint step {step_dir} is incomplete (no {', '.join(missing)}); delete or "
                              "repair that step directory to use an earlier one")


def read_meta(step_dir: Path) -> dict:
    """The JSON metadata of a checkpoint step (orbax JsonSave writes it to `meta/metadata`).

    Args:
      step_dir: the step directory.
    Returns:
      the metadata dict.
    Raises:
      CheckpointError: missing, unreadable, larger than base.io.MAX_FILE_BYTES, nested deeper than
        base.io.MAX_JSON_DEPTH, not a JSON object, or a field of META_SCHEMA of another type.
    """
    f = step_dir / "meta" / "metadata"
    if not f.exists():
        raise CheckpointError(f"checkpoint metadata missing: {f}")
    try:
        meta = parse_json(read_bounded(f))
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint metadata {f}: {e.strerror or type(e).__name__}") from None
    except ValueError as e:
        raise CheckpointError(f"corrupt checkpoint metadata {f}: {one_line(e)}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"corrupt checkpoint metadata {f}: not a JSON object")
    return check_json_object(meta, f"checkpoint metadata {f}", META_SCHEMA, error=CheckpointError)


META_SCHEMA = {"iteration": "count", "sampler_kind": "str", "sampler": "object", "config": "object"}
"""The kinds of the checkpoint metadata fields that are read (base.io.check_json_object)."""


@contextlib.contextmanager
def _quiet_native_stderr(settle_seconds: float = 0.3):
    """File descriptor 2 redirected to a temporary file while orbax restores; replayed on success, dropped on
    failure. A damaged file makes tensorstore's callback threads print "Event loop is closed" tracebacks straight
    to fd 2, before and shortly after orbax raises; the caller reports the failure as one line instead. On failure
    the redirection is held `settle_seconds` longer for the in-flight callbacks."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        ok = False
        try:
            yield
            ok = True
        finally:
            if not ok:
                time.sleep(settle_seconds)
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode(errors="replace"))


def sampler_kind(meta: dict, where: str = "checkpoint") -> str:
    """The learned sampler kind a checkpoint's metadata records ("l2e" when it records none: older runs).

    Args:
      meta: the checkpoint's metadata.
      where: the name in the error message.
    Returns:
      a key of `l2e.learned.REGISTRY`.
    Raises:
      CheckpointError: an unknown kind.
    """
    kind = meta.get("sampler_kind", "l2e")
    if not isinstance(kind, str) or kind not in learned.REGISTRY:
        raise CheckpointError(f"{where}: unknown sampler kind {kind!r} (known: {', '.join(learned.REGISTRY)})")
    return kind


def load_meta_params(name_or_path: str | Path | None = None) -> tuple[PyTree, Any, dict]:
    """A checkpoint's meta-parameters, sampler configuration and metadata, without building the sampler.

    Args:
      name_or_path: a shipped name (SHIPPED), a run / checkpoints / step directory, or None (the shipped
        "default").
    Returns:
      (meta_params: float32 numpy flax params of the kind's meta-model, config: an instance of the kind's config
      dataclass (`l2e.learned.REGISTRY[kind].config`), metadata: the JSON dict).
    Raises:
      CheckpointError: missing, incomplete, corrupt, of an unknown kind or of another meta-model shape.
    """
    import orbax.checkpoint as ocp

    step_dir = resolve_step_dir(resolve_checkpoint(name_or_path))
    meta = read_meta(step_dir)
    kind = learned.REGISTRY[sampler_kind(meta, str(step_dir))]
    try:
        with warnings.catch_warnings(), _quiet_native_stderr():  # orbax warns about sharding (we convert to numpy)
            warnings.simplefilter("ignore", UserWarning)
            raw = _restore_numpy(ocp, (step_dir / "meta_params").resolve())
    except Exception as e:  # orbax raises many types for damaged files
        raise CheckpointError(f"corrupt checkpoint {step_dir}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    params = check_kind_params(kind, raw, str(step_dir))
    sampler = meta.get("sampler", {})
    where = f"checkpoint metadata {step_dir / 'meta' / 'metadata'}"
    if not isinstance(sampler, dict):
        raise CheckpointError(f"{where}: 'sampler' is a {type(sampler).__name__}, expected a JSON object")
    fields = {f.name for f in dataclasses.fields(kind.config)}
    try:
        config = dataclass_from_dict(kind.config, {k: v for k, v in sampler.items() if k in fields}, "sampler.")
    except ConfigError as e:
        raise CheckpointError(f"{where}: {e}") from None
    return params, config, meta


def _restore_numpy(ocp, path: Path):
    """The pytree saved at `path`, every leaf restored as a host numpy array: a checkpoint written on one backend
    (e.g. with a CPU sharding file) restores on any other (a GPU / TPU host), since no device sharding is rebuilt."""
    import logging

    import jax
    import numpy as np

    checkpointer = ocp.PyTreeCheckpointer()
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # orbax warns that a step written without _CHECKPOINT_METADATA lacks it: noise here
    try:
        metadata = checkpointer.metadata(path)
    finally:
        absl.setLevel(level)
    tree = getattr(getattr(metadata, "item_metadata", metadata), "tree", getattr(metadata, "item_metadata", metadata))
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(path, restore_args=restore_args)


def load_sampler(name_or_path: str | Path | None = None, *, posterior: Posterior, **overrides) -> SamplingAlgorithm:
    """A ready learned sampler for `posterior` from a checkpoint, of the checkpoint's kind
    (`l2e.learned.REGISTRY[kind].factory`).

    Args:
      name_or_path: a shipped name ("default" = "transient", "mass", "paper-form", "kinetic", "meta-sgmcmc",
        "precond-l2e", "small-l2e"), a run / checkpoints / step directory, or None (the shipped "default").
      posterior: the model (`l2e.Posterior`), keyword-only.
      **overrides: fields of the checkpoint's sampler config to replace (e.g. freeze_step=500, the first update
        whose state you keep, for Transient-L2E and Mass-L2E; learning_rate=2.0 in ε²·N units for a sampler that
        has one; temperature=1.0). After the chain, `l2e.check_temperature(infos)` says whether it ran at its
        target temperature.
    Returns:
      SamplingAlgorithm: init(position), step(key, state, minibatch) -> (state, info).
    Raises:
      CheckpointError: as `load_meta_params`; ValueError: an unknown override.
    """
    params, config, meta = load_meta_params(name_or_path)
    try:
        config = dataclasses.replace(config, **overrides)
    except TypeError as e:  # an unknown field
        raise ValueError(f"load_sampler: {one_line(e)}") from None
    return learned.REGISTRY[sampler_kind(meta)].factory(posterior, params, config)
