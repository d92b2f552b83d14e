"""A method's parameter samples as ArviZ InferenceData (netCDF4 file, h5netcdf engine), so that traces, ESS and
R̂ can be inspected with ArviZ / xarray: `arviz.from_netcdf(path).posterior`."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import arviz as az
import jax
import numpy as np

from base.io import atomic_write_bytes

__all__ = ["leaf_names", "write_inference_data"]


def _key_name(key) -> str:
    for attr in ("key", "name", "idx"):  # DictKey, GetAttrKey, SequenceKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaf_names(tree) -> list[str]:
    """One name per leaf of `tree` (flattening order): its path keys joined by "." (e.g. "dense_0.kernel"),
    "x" for a bare array."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    names = [".".join(_key_name(k) for k in path) or "x" for path in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"leaf names are not unique: {names}")
    return names


def _by_chain(values: np.ndarray, chain_ids: np.ndarray, chains: np.ndarray, draws: int) -> np.ndarray:
    """values (K, ...) in collection order → (chains, draws, ...), each chain's samples in order, NaN-padded."""
    dtype = np.result_type(values.dtype, np.float32)
    out = np.full((len(chains), draws) + values.shape[1:], np.nan, dtype=dtype)
    for i, c in enumerate(chains):
        mine = values[chain_ids == c]
        out[i, :len(mine)] = mine
    return out


def write_inference_data(path, samples, chain_ids, draws_per_chain: int | None = None,
                         sample_stats: dict[str, Any] | None = None) -> Path:
    """Write parameter samples to `path` as InferenceData (netCDF4, atomically) and return the path.

    samples: a pytree of arrays (K, ...) in collection order (several chains: round-robin); chain_ids (K,) int:
    the chain (ensemble member) of each sample.  Group "posterior": one variable per leaf, named by its pytree
    path ("dense_0.kernel"), dims (chain, draw, <name>_dim_0, ...); the chain coordinate holds the chain ids,
    draw d of a chain is its d-th sample.  draws_per_chain: draws per chain (default: the most any chain has);
    a chain with fewer samples (non-finite draws dropped) is padded with NaN at the end.  sample_stats:
    optional {name: array (K, ...)} per sample, arranged the same way (group "sample_stats").
    """
    chain_ids = np.asarray(chain_ids).reshape(-1)
    leaves = [np.asarray(a) for a in jax.tree.leaves(samples)]
    if not leaves or any(a.shape[0] != len(chain_ids) for a in leaves):
        raise ValueError(f"every sample leaf needs a leading axis of {len(chain_ids)} (one per chain id), got "
                         f"{[a.shape for a in leaves]}")
    if len(chain_ids) == 0:
        raise ValueError("no samples to write")
    chains, counts = np.unique(chain_ids, return_counts=True)
    draws = int(counts.max()) if draws_per_chain is None else int(draws_per_chain)
    if counts.max() > draws:
        raise ValueError(f"a chain has {int(counts.max())} samples, more than draws_per_chain={draws}")
    arrange = lambda a: _by_chain(np.asarray(a), chain_ids, chains, draws)  # noqa: E731
    groups = {"posterior": {n: arrange(a) for n, a in zip(leaf_names(samples), leaves)}}
    if sample_stats:
        groups["sample_stats"] = {k: arrange(v) for k, v in sample_stats.items()}
    idata = az.from_dict(**groups, coords={"chain": chains, "draw": np.arange(draws)})
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "samples.nc"
        idata.to_netcdf(str(scratch), engine="h5netcdf")
        return atomic_write_bytes(path, scratch.read_bytes())
