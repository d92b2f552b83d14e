"""Placing chains, ensemble members and population members on the local devices.

Two ways to use several devices:
  * round robin (`member_device`, `DeviceDataCache`): member i runs the single-member program on local device
    i mod n; dispatch is asynchronous, so members on different devices overlap, and the numbers do not
    depend on the device count;
  * a 1-D mesh ("pop",) over the population axis (`population_mesh`, `shard_population`, `replicate`,
    `per_member`): one vmapped program per device over its share of the population.
"""
from __future__ import annotations

import collections
import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def member_device(index: int):
    """The local device of chain / ensemble member / population member `index`: round robin.

    Args:
      index: the member's index (≥ 0).
    Returns:
      `jax.local_devices()[index mod n]`.
    """
    devices = jax.local_devices()
    return devices[index % len(devices)]


class DeviceDataCache:
    """Copies of data pytrees (e.g. a task's train split) on devices, keyed by (ids of the arrays, device).

    Tasks that share their arrays (the same dataset) share one copy per device; on the device the arrays
    already live on, `jax.device_put` makes no copy. The `max_entries` most recently used entries are kept;
    each entry holds the source arrays, so their ids stay unique while cached.
    """

    def __init__(self, max_entries: int = 16):
        """Args:
          max_entries: the most recently used entries kept.
        """
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[tuple, tuple] = collections.OrderedDict()

    def put(self, data: Any, device) -> Any:
        """`data` on `device`, from the cache when present.

        Args:
          data: a pytree of arrays.
          device: a jax device.
        Returns:
          the pytree on `device`.
        """
        leaves = jax.tree.leaves(data)
        key = (tuple(id(x) for x in leaves), device)
        if key in self._entries:
            self._entries.move_to_end(key)
        else:
            self._entries[key] = (leaves, jax.device_put(data, device))
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return self._entries[key][1]

    def __len__(self) -> int:
        return len(self._entries)


def population_mesh(population: int) -> Mesh:
    """A 1-D Mesh ("pop",) over the largest number of devices (≤ all of them) that divides `population`
    (all devices when population is a multiple of the device count). $L2E_NO_SHARDING=1: one device.

    Multi-host: the mesh takes the same number of devices from every process (so every process holds a
    share of the population and a replica of the fitness); the population must be a multiple of the number
    of processes. Meshes over the same devices compare equal, so jit caches keyed on them are shared.

    Args:
      population: the population size.
    Returns:
      a 1-D jax Mesh with axis "pop".
    Raises:
      ValueError: multi-host with a population that is not a multiple of the number of processes.
    """
    devices = jax.devices()
    if os.environ.get("L2E_NO_SHARDING", "").lower() in ("1", "true", "yes") and jax.process_count() == 1:
        devices = devices[:1]
    procs = jax.process_count()
    if procs == 1:
        n = max(d for d in range(1, min(population, len(devices)) + 1) if population % d == 0)
        return Mesh(np.array(devices[:n]), ("pop",))
    if population % procs:
        raise ValueError(f"es.population ({population}) must be a multiple of the number of processes ({procs})")
    by_proc = [[d for d in devices if d.process_index == p] for p in range(procs)]
    per = max(d for d in range(1, min(len(ds) for ds in by_proc) + 1) if (population // procs) % d == 0)
    return Mesh(np.array([d for ds in by_proc for d in ds[:per]]), ("pop",))


def _put(tree, sharding: NamedSharding):
    """Place `tree` with `sharding`; multi-host safe (every process holds the same host values)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx], dtype=host.dtype)

    return jax.tree.map(one, tree)


def shard_population(tree, mesh: Mesh):
    """Shard axis 0 of every leaf over mesh axis "pop".

    Args:
      tree: a pytree of arrays with the population on axis 0 (a multiple of the mesh size).
      mesh: from `population_mesh`.
    Returns:
      the sharded pytree.
    """
    return _put(tree, NamedSharding(mesh, PartitionSpec("pop")))


def replicate(tree, mesh: Mesh):
    """Replicate every leaf on all devices of `mesh`.

    Args:
      tree: a pytree of arrays.
      mesh: a Mesh.
    Returns:
      the replicated pytree.
    """
    return _put(tree, NamedSharding(mesh, PartitionSpec()))


def per_member(fn, mesh: Mesh, member_args: tuple[bool, ...], out_replicated: bool = False):
    """jit(shard_map) of `fn` over the population: arguments flagged in `member_args` have the population on
    axis 0 (sharded over "pop"), the others are shared (replicated). Each device runs `fn` vmapped over its
    local members; on a one-device mesh, plain jit(vmap) (shard_map over one device is slower on XLA:CPU).
    out_replicated: the outputs are gathered onto every device of the mesh (so every host can read them).

    Args:
      fn: the single-member function.
      mesh: from `population_mesh`.
      member_args: per positional argument, whether it carries the population on axis 0.
      out_replicated: gather the outputs onto every device.
    Returns:
      the jitted population function (outputs with the population on axis 0).
    """
    pop, rep = PartitionSpec("pop"), PartitionSpec()
    local = jax.vmap(fn, in_axes=tuple(0 if b else None for b in member_args))
    if mesh.size == 1:
        return jax.jit(local)
    mapped = jax.shard_map(local, mesh=mesh, in_specs=tuple(pop if b else rep for b in member_args),
                           out_specs=pop)
    if not out_replicated:
        return jax.jit(mapped)
    return jax.jit(mapped, out_shardings=NamedSharding(mesh, rep))
