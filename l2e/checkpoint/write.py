"""Writing and resuming checkpoints: the two-phase commit of a step (staged, fsynced, renamed), pruning, leftover
staging directories and restoring the optimiser state (the package docstring of l2e.checkpoint describes the layout)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from l2e.checkpoint.read import ITEMS, KEEP_CHECKPOINTS, CheckpointError, check_complete
from base.io import atomic_write_json, fsync_dir, one_line
from l2e.types import PyTree

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
