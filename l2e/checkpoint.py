"""Meta-parameter checkpoints: the one place they are written (`save_checkpoint`, by `python -m meta_train`)
and read (`restore_checkpoint` on resume, `load_meta_params` / `load_sampler`).

A checkpoint root (e.g. `<run>/checkpoints`) holds one directory per committed step, named by the step
number. A step directory holds three items: `es_state` (orbax: the optimiser state's leaves as {"0": …,
"1": …} in tree-flatten order), `meta_params` (orbax: the MLP's flax params) and `meta` (JSON file
`meta/metadata`: the sampler kind `sampler_kind` ("l2e" when absent), its configuration `sampler`, the outer
iteration, the meta-training config).

Writing is two-phase, so a process killed at any point never leaves a partial step that is read: every item
goes into a staging directory `<root>/.tmp-<step>`, which is fsynced and renamed to `<root>/<step>` (atomic on
POSIX). Only digit-named directories holding all items are read; `clean_staging` removes leftovers.

`load_sampler(name_or_path)` accepts a shipped name (`SHIPPED`: "default" = "mass", "paper-form", "kinetic",
"meta-sgmcmc", "precond-l2e", "small-l2e"), a
meta-training output directory, its `checkpoints/` directory (latest step taken) or one step directory; with
none it loads the shipped "default". The sampler it returns is the checkpoint's kind (l2e.learned.REGISTRY).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from l2e import learned
from l2e.io import ConfigError, atomic_write_json, dataclass_from_dict, fsync_dir, one_line
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
kind's `shipped` rows; the folder is the name with "-" → "_"). "default" is `learned.DEFAULT_SHIPPED`, Mass-L2E
(`l2e.mass`, correct by construction, meta-trained by `python -m meta_train --preset default`); "paper-form" is the
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
      CheckpointError: missing, unreadable or not a JSON object.
    """
    f = step_dir / "meta" / "metadata"
    if not f.is_file():
        raise CheckpointError(f"checkpoint metadata missing: {f}")
    try:
        meta = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"corrupt checkpoint metadata {f}: {e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"corrupt checkpoint metadata {f}: not a JSON object")
    return meta


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
            raw = ocp.PyTreeCheckpointer().restore((step_dir / "meta_params").resolve())
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


def load_sampler(name_or_path: str | Path | None = None, *, posterior: Posterior, **overrides) -> SamplingAlgorithm:
    """A ready learned sampler for `posterior` from a checkpoint, of the checkpoint's kind
    (`l2e.learned.REGISTRY[kind].factory`).

    Args:
      name_or_path: a shipped name ("default" = "mass", "paper-form", "kinetic", "meta-sgmcmc", "precond-l2e",
        "small-l2e"), a run / checkpoints / step directory, or None (the shipped "default").
      posterior: the model (`l2e.Posterior`), keyword-only.
      **overrides: fields of the checkpoint's sampler config to replace (e.g. learning_rate=2.0 in ε²·N units,
        temperature=1.0, Mass-L2E's freeze_step=500).
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


# --------------------------------------------------------------------------- writing and resuming


def _tree_checkpointer():
    """A synchronous orbax checkpointer; in a multi-process run only process 0 writes (no barrier)."""
    import orbax.checkpoint as ocp

    if jax.process_count() > 1:
        opts = ocp.options.MultiprocessingOptions(primary_host=0, active_processes={0})
        return ocp.Checkpointer(ocp.StandardCheckpointHandler(), multiprocessing_options=opts)
    return ocp.Checkpointer(ocp.StandardCheckpointHandler())


def committed_steps(root: str | Path) -> list[int]:
    """The committed (digit-named, all items present) checkpoint steps under `root`.

    Args:
      root: a checkpoint root.
    Returns:
      the steps, ascending ([] when `root` does not exist).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir()
                  if p.is_dir() and p.name.isdigit() and all((p / item).is_dir() for item in ITEMS))


def clean_staging(root: str | Path) -> None:
    """Remove staging / half-deleted directories left by a killed writer (never a committed step).

    Args:
      root: a checkpoint root.
    Returns:
      None.
    """
    root = Path(root)
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith((".tmp-", ".del-")):
                shutil.rmtree(p, ignore_errors=True)


def _stage(stage: Path, state: PyTree, meta_params: PyTree, metadata: dict,
           after_item: Callable[[str], None] | None) -> None:
    """Write the three items into the (empty) staging directory and fsync it."""
    ckptr = _tree_checkpointer()
    ckptr.save(stage / "es_state", {str(i): np.asarray(x) for i, x in enumerate(jax.tree.leaves(state))})
    if after_item is not None:
        after_item("es_state")
    ckptr.save(stage / "meta_params", jax.tree.map(np.asarray, meta_params))
    atomic_write_json(stage / "meta" / "metadata", metadata)
    for p in (stage / "meta", stage):
        fsync_dir(p)


def save_checkpoint(root: str | Path, step: int, state: PyTree, meta_params: PyTree, metadata: dict,
                    keep: int = KEEP_CHECKPOINTS, after_item: Callable[[str], None] | None = None) -> Path:
    """Commit checkpoint `step` under `root` atomically.

    Args:
      root: the checkpoint root (created if missing).
      step: the step number (the directory name).
      state: the optimiser state (any pytree; restored leaf by leaf into a template of the same structure).
      meta_params: the meta-model's params.
      metadata: JSON-serialisable dict (sampler_kind, sampler, iteration, config).
      keep: the newest committed steps to keep (0: every step; older ones are renamed away before deletion, so a
        kill during pruning leaves no partial step).
      after_item: called with an item's name once it is staged (fault injection).
    Returns:
      the step directory `<root>/<step>`.
    Raises:
      OSError: an item could not be written (nothing is committed).
    """
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stage = root / f".tmp-{step}"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    try:
        _stage(stage, state, meta_params, metadata, after_item)
    except Exception as e:  # orbax / tensorstore raise ValueError etc. for a full disk or I/O failure
        shutil.rmtree(stage, ignore_errors=True)
        raise OSError(f"cannot write checkpoint {step} under {root} ({type(e).__name__}: {one_line(e)})") from None
    final = root / str(step)
    if final.exists():  # the same step written again (e.g. after a resume from an older one)
        old = root / f".del-{step}"
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(stage, final)
    fsync_dir(root)
    for old_step in (committed_steps(root)[:-keep] if keep else []):
        doomed = root / f".del-{old_step}"
        os.replace(root / str(old_step), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return final


def restore_checkpoint(root: str | Path, template_state: PyTree) -> tuple[int, PyTree]:
    """The latest committed checkpoint's optimiser state under `root`.

    Args:
      root: the checkpoint root.
      template_state: a pytree of the state's structure, shapes and dtypes.
    Returns:
      (step, state), the state's leaves restored into `template_state`'s structure and dtypes; (0, template_state)
      when there is no checkpoint.
    Raises:
      CheckpointError: a damaged checkpoint or one whose leaves have other shapes.
    """
    import orbax.checkpoint as ocp

    root = Path(root)
    steps = sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()) if root.is_dir() else []
    if not steps:
        return 0, template_state
    path = (root / str(steps[-1])).resolve()
    check_complete(path)
    leaves, treedef = jax.tree.flatten(template_state)
    template = {str(i): np.asarray(x) for i, x in enumerate(leaves)}
    try:
        restored = _tree_checkpointer().restore(path / "es_state", args=ocp.args.StandardRestore(template))
        new_leaves = [np.asarray(restored[str(i)]) for i in range(len(leaves))]
    except Exception as e:  # orbax raises many types for damaged files
        raise CheckpointError(f"cannot restore checkpoint {path} (corrupt or from another run: "
                              f"{type(e).__name__}); delete that step directory to resume from an earlier one"
                              ) from None
    for i, (new, old) in enumerate(zip(new_leaves, leaves)):
        if new.shape != np.shape(old):
            raise CheckpointError(f"checkpoint {path} holds an ES state of another shape "
                                  f"(leaf {i}: {new.shape}, expected {np.shape(old)})")
    new_leaves = [jnp.asarray(new, dtype=old.dtype) for new, old in zip(new_leaves, leaves)]
    return steps[-1], jax.tree.unflatten(treedef, new_leaves)
