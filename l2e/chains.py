"""Running a sampler for many steps, keeping only thinned samples.

The hot path.  On XLA:CPU a conv net's gradient inside `lax.scan`/`while_loop` runs several times
slower than the same step as a standalone jitted call, while a jitted function that holds a few
steps *unrolled in Python* runs at (or below) the standalone cost (measured in bench/inner_loop.py).
So the inner loop is a Python loop over one compiled "chunk" of `chunk` unrolled steps; the state
stays on device between calls, and only the states at the sample steps are kept (memory O(K·d),
independent of the number of steps).

Randomness: update t (0-based) uses fold_in(key, t), split into a minibatch key and a noise key, so
a chain is a pure function of (key, initial state) whatever the chunk length.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from l2e.types import PyTree

# kernel(key, state, minibatch, args) -> state
Kernel = Callable[[jax.Array, Any, Any, Any], Any]
# sample_batch(key, data, batch_size) -> minibatch
BatchFn = Callable[[jax.Array, Any, int], Any]


@dataclasses.dataclass(frozen=True)
class ChainSchedule:
    """num_steps updates; num_samples states kept, `thinning` updates apart, the last after the final update.

    chunk: updates per compiled call (Python-unrolled); it must divide the sample steps.
    """

    num_steps: int
    num_samples: int
    thinning: int
    batch_size: int = 128
    chunk: int = 10

    def __post_init__(self):
        for name in ("num_steps", "num_samples", "thinning", "batch_size", "chunk"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if (self.num_samples - 1) * self.thinning >= self.num_steps:
            raise ValueError(
                f"{self.num_samples} samples {self.thinning} steps apart do not fit in {self.num_steps} steps"
            )

    @property
    def sample_steps(self) -> tuple[int, ...]:
        """Numbers of updates done when each sample is taken (1-based counts)."""
        k = self.num_samples
        return tuple(self.num_steps - (k - 1 - i) * self.thinning for i in range(k))

    @property
    def chunk_length(self) -> int:
        """The largest length ≤ chunk that divides every sample step."""
        g = math.gcd(*self.sample_steps) if self.num_samples > 1 else self.num_steps
        g = math.gcd(g, self.num_steps)
        return max(d for d in range(1, min(self.chunk, g) + 1) if g % d == 0)


def make_chunk(kernel: Kernel, sample_batch: BatchFn, batch_size: int, length: int):
    """chunk(state, key, start, data, args) -> state: `length` unrolled updates starting at update index `start`."""

    def chunk(state, key, start, data, args):
        for i in range(length):
            k_batch, k_noise = jax.random.split(jax.random.fold_in(key, start + i))
            batch = sample_batch(k_batch, data, batch_size)
            state = kernel(k_noise, state, batch, args)
        return state

    return chunk


def run_chain(
    chunk_fn: Callable,
    state: Any,
    key: jax.Array,
    data: Any,
    args: Any,
    schedule: ChainSchedule,
    position_fn: Callable[[Any], PyTree] = lambda s: s.position,
    progress: Callable[[int], None] | None = None,
) -> tuple[Any, PyTree]:
    """Run `schedule.num_steps` updates with a compiled `chunk_fn` (from `make_chunk`, jitted, of length
    `schedule.chunk_length`).  Returns (final state, samples): the leaves of `position_fn(state)` at the
    sample steps, stacked on a new leading axis 0 of size num_samples.
    """
    length = schedule.chunk_length
    wanted = set(schedule.sample_steps)
    samples = []
    for start in range(0, schedule.num_steps, length):
        state = chunk_fn(state, key, jnp.asarray(start, jnp.int32), data, args)
        if start + length in wanted:
            samples.append(position_fn(state))
        if progress is not None:
            progress(length)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *samples)
    return state, stacked


def member_device(index: int):
    """The local device of chain / ensemble member / population member `index`: round robin over
    `jax.local_devices()`.  Each member runs the same single-member program whatever the device count (so the
    same numbers), and members on different devices overlap because dispatch is asynchronous."""
    devices = jax.local_devices()
    return devices[index % len(devices)]


_ON_DEVICE: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_ON_DEVICE_MAX = 16


def on_device(data: Any, device) -> Any:
    """`data` (a pytree of arrays, e.g. a task's train split) on `device`, cached per (arrays, device): tasks that
    share their arrays (the same dataset) share one copy; on the device the arrays already live on, no copy is
    made.  The 16 most recently used entries are kept."""
    leaves = jax.tree.leaves(data)
    key = (tuple(id(x) for x in leaves), device)
    if key in _ON_DEVICE:
        _ON_DEVICE.move_to_end(key)
    else:
        _ON_DEVICE[key] = (leaves, jax.device_put(data, device))  # holds the arrays, so their ids stay unique
        if len(_ON_DEVICE) > _ON_DEVICE_MAX:
            _ON_DEVICE.popitem(last=False)
    return _ON_DEVICE[key][1]
