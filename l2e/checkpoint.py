"""Meta-parameter checkpoints: written by `python -m meta_train`, read by `load_sampler`.

A checkpoint step directory (orbax) holds the items `meta_params` (the MLP's flax params) and
`meta` (JSON: the L2E sampler configuration, the outer iteration, the meta-training config).
`load_sampler(path)` accepts a meta-training output directory, its `checkpoints/` directory
(latest step taken) or one step directory; with no path it loads the checkpoint shipped in
the `checkpoints` package.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from l2e.l2e import L2EConfig, l2e
from l2e.meta_model import NUM_FEATURES
from l2e.types import Posterior, PyTree, SamplingAlgorithm


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt or of another meta-model shape."""


def shipped_checkpoint() -> Path:
    """Path of the meta-trained sampler shipped with the package."""
    import checkpoints

    return Path(checkpoints.__file__).resolve().parent / "default"


def resolve_step_dir(path: str | Path) -> Path:
    """The checkpoint step directory named by `path` (run dir, checkpoints dir, or step dir)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if (path / "meta_params").is_dir():
        return path
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    steps = sorted((int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    for s in steps:
        if (root / str(s) / "meta_params").is_dir() and (root / str(s) / "meta").is_dir():
            return root / str(s)
    raise CheckpointError(f"no complete checkpoint step under {path}")


def read_meta(step_dir: Path) -> dict:
    """The JSON metadata of a checkpoint step (orbax JsonSave writes it to `meta/metadata`)."""
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


def check_meta_params(meta_params: Any, where: str) -> PyTree:
    """Validate a restored meta-parameter tree: Dense layers 9 → … → 2 with consistent shapes."""
    try:
        layers = sorted(meta_params, key=lambda k: int(k.split("_")[-1]))
        shapes = [(tuple(meta_params[k]["kernel"].shape), tuple(meta_params[k]["bias"].shape)) for k in layers]
    except (TypeError, KeyError, ValueError, AttributeError):
        raise CheckpointError(f"{where}: not an L2E meta-model parameter tree") from None
    fan_in = NUM_FEATURES
    for (kin, kout), (b,) in shapes:
        if kin != fan_in or b != kout:
            raise CheckpointError(
                f"{where}: meta-model of another shape (layer {kin}x{kout}, expected input {fan_in})")
        fan_in = kout
    if fan_in != 2:
        raise CheckpointError(f"{where}: meta-model has {fan_in} outputs, expected 2")
    return jax.tree.map(lambda x: np.asarray(x, np.float32), meta_params)


def load_meta_params(path: str | Path | None = None) -> tuple[PyTree, L2EConfig, dict]:
    """(meta_params, sampler config, metadata) from a checkpoint (default: the shipped one)."""
    import orbax.checkpoint as ocp

    step_dir = resolve_step_dir(shipped_checkpoint() if path is None else path)
    meta = read_meta(step_dir)
    try:
        with warnings.catch_warnings():  # orbax warns about sharding; we convert to host numpy anyway
            warnings.simplefilter("ignore", UserWarning)
            raw = ocp.PyTreeCheckpointer().restore((step_dir / "meta_params").resolve())
    except Exception as e:  # orbax raises many types for damaged files
        raise CheckpointError(f"corrupt checkpoint {step_dir}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    params = check_meta_params(raw, str(step_dir))
    fields = {f.name for f in dataclasses.fields(L2EConfig)}
    config = L2EConfig(**{k: v for k, v in meta.get("sampler", {}).items() if k in fields})
    return params, config, meta


def load_sampler(path: str | Path | None = None, *, posterior: Posterior, **overrides) -> SamplingAlgorithm:
    """A ready L2E sampler for `posterior` from a meta-training checkpoint (default: the shipped one).

    `overrides` replace fields of the checkpoint's L2EConfig (e.g. learning_rate=2.0, temperature=1.0).
    """
    params, config, _ = load_meta_params(path)
    return l2e(posterior, params, dataclasses.replace(config, **overrides))
