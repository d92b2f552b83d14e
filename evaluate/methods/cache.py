"""`CompileCache`: the compiled functions of one evaluation, created by `evaluate()` and passed to every run.

A tuning grid's runs and the final run of a method share one compiled chunk (hyperparameters are traced
arguments), so each (task, method, schedule) compiles once per evaluation.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from l2e.devices import DeviceDataCache

__all__ = ["CompileCache"]


class CompileCache:
    """Compiled functions and per-device data of one evaluation.

    `get(key, build)`: the value stored under `key`, built by `build()` on first use (jitted chunks, prediction
    functions, compiled full-batch programs, measured step costs; keys start with a kind tag, e.g. ("chunk", …)).
    `warm_up(key, fn, ...)`: one discarded call of a jitted chunk per (key, device), so timed runs exclude
    compilation.  `data`: the DeviceDataCache holding task data on each device.
    """

    def __init__(self, data: DeviceDataCache | None = None):
        self._values: dict[tuple, Any] = {}
        self._warm: set[tuple] = set()
        self.data = DeviceDataCache() if data is None else data

    def get(self, key: tuple, build: Callable[[], Any]) -> Any:
        if key not in self._values:
            self._values[key] = build()
        return self._values[key]

    def warm_up(self, key: tuple, fn: Callable, state, data, args, device=None, chains: int | None = None) -> None:
        """Call chunk `fn(state, key, start, data, args) -> (state, infos)` once (result discarded) unless done for
        (key, device, chains);
        with `device`, on inputs placed there (a jitted function compiles once per device it runs on); with `chains`,
        a chunk vmapped over that many chains (evaluate.methods.batch: one key per chain)."""
        if chains is not None:
            key = key + ("chains", chains)
        if device is not None:
            key = key + (device,)
            state, args = jax.device_put((state, args), device)
            data = self.data.put(data, device)
        if key in self._warm:
            return
        k0 = jax.random.PRNGKey(0) if device is None else jax.device_put(jax.random.PRNGKey(0), device)
        if chains is not None:
            k0 = jnp.stack([k0] * chains)
            sharding = getattr(jax.tree.leaves(state)[0], "sharding", None)
            if sharding is not None and len(sharding.device_set) > 1:  # keys sharded like the chains' states
                k0 = jax.device_put(k0, sharding)
        jax.block_until_ready(fn(state, k0, jnp.asarray(0, jnp.int32), data, args))
        self._warm.add(key)

    def __len__(self) -> int:
        return len(self._values)
