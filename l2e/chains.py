"""Running a sampler for many steps, keeping only thinned samples.

The hot path.  On XLA:CPU a conv net's gradient inside `lax.scan`/`while_loop` runs several times
slower than the same step as a standalone jitted call, while a jitted function that holds a few
steps *unrolled in Python* runs at (or below) the standalone cost (measured in bench/inner_loop.py).
So the inner loop is a Python loop over one compiled "chunk" of `chunk` unrolled steps; the state
stays on device between calls, and only the states at the sample steps are kept (memory O(K·d),
independent of the number of steps). Each step's Info (a few scalars) is kept: stacked inside the chunk,
held as device arrays and concatenated once at the end, on the host (numpy).

Randomness: update t (0-based) uses fold_in(key, t), split into a minibatch key and a noise key, so
a chain is a pure function of (key, initial state) whatever the chunk length.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from l2e.types import PyTree

# kernel(key, state, minibatch, args) -> (state, info)
Kernel = Callable[[jax.Array, Any, Any, Any], tuple[Any, Any]]
# sample_batch(key, data, batch_size) -> minibatch
BatchFn = Callable[[jax.Array, Any, int], Any]


@dataclasses.dataclass(frozen=True)
class ChainSchedule:
    """num_steps updates; num_samples states kept, `thinning` updates apart, the last after the final update.

    Attributes:
      num_steps: updates in all.
      num_samples: states kept.
      thinning: updates between kept states.
      batch_size: minibatch size B.
      chunk: updates per compiled call (Python-unrolled); the largest length ≤ chunk that divides the sample steps
        is used (`chunk_length`).
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
        """The numbers of updates done when each sample is taken (1-based counts), ascending; the last is num_steps."""
        k = self.num_samples
        return tuple(self.num_steps - (k - 1 - i) * self.thinning for i in range(k))

    @property
    def chunk_length(self) -> int:
        """The largest length ≤ chunk that divides every sample step (and num_steps)."""
        g = math.gcd(*self.sample_steps) if self.num_samples > 1 else self.num_steps
        g = math.gcd(g, self.num_steps)
        return max(d for d in range(1, min(self.chunk, g) + 1) if g % d == 0)


PHASES = ("burn_in", "adapt", "window")
"""The phases of a sampler that gathers statistics over the end of its burn-in and freezes its constants at one update
(`freeze_phase`): before the adaptation window, in it, after the freeze."""


def adaptation_start(freeze_step: int, adapt_fraction: float) -> int:
    """The first update of the adaptation window: the last adapt_fraction of the freeze_step burn-in updates (≥ 1);
    a traced freeze_step gives the same count, traced (jnp.round rounds half to even, as round does)."""
    if isinstance(freeze_step, jax.core.Tracer):
        return freeze_step - jnp.maximum(1, jnp.round(adapt_fraction * freeze_step).astype(freeze_step.dtype))
    return int(freeze_step) - max(1, int(round(adapt_fraction * int(freeze_step))))


def freeze_at(config, start: int):
    """The sampling-window rule of a sampler that freezes its constants at `config.freeze_step` (Mass-L2E, Step-L2E,
    Transient-L2E: `LearnedSampler.window`): `config` with freeze_step = start, the first update of the window.

    Args:
      config: a frozen dataclass configuration with an int field freeze_step.
      start: the first update of the sampling window (≥ 1).
    Returns:
      The configuration with freeze_step = start.
    """
    return dataclasses.replace(config, freeze_step=int(start))


def freeze_phase(freeze_step: int, start: int, length: int, adapt_start: int | None = None) -> str | None:
    """The phase of updates start, …, start + length − 1 of a sampler whose constants freeze at update freeze_step
    after an adaptation window from update adapt_start (None: no separate adaptation phase): "burn_in" when all precede
    the window (with adapt_start None: the freeze), "adapt" when all lie in [adapt_start, freeze_step), "window" when
    all follow the freeze; None (its general kernel, which branches on the step) when they straddle a boundary or one
    of them is the freeze update — the kernel that chunk may run with (`run_chain`'s chunk_at)."""
    end = start + length
    if start > freeze_step:
        return "window"
    if adapt_start is None:
        return "burn_in" if end <= freeze_step else None
    if end <= adapt_start:
        return "burn_in"
    return "adapt" if start >= adapt_start and end <= freeze_step else None


class ChainResult(NamedTuple):
    """The outcome of `run_chain`.

    state: the final state (on device); samples: `position_fn(state)` at the sample steps, leaves stacked on a new
    leading axis of size num_samples (device arrays); info: every step's Info, leaves stacked on a new axis of size
    num_steps (numpy, host; axis `info_axis` of run_chain).
    """

    state: Any
    samples: PyTree
    info: Any


def _split_output(out):
    """(state, info) from a kernel's output, refusing a bare state (a kernel of the old interface)."""
    if not isinstance(out, tuple) or hasattr(out, "_fields") or len(out) != 2:
        raise TypeError(f"a kernel must return (state, info), got {type(out).__name__}")
    return out


def make_chunk(kernel: Kernel | tuple[Kernel, ...], sample_batch: BatchFn, batch_size: int, length: int):
    """A chunk of `length` updates unrolled in Python, to be jitted (module doc: why not `lax.scan`).

    Update t uses fold_in(key, t), split into the minibatch key and the kernel's key.

    Args:
      kernel: kernel(key, state, minibatch, args) -> (state, info); or a tuple of P of them, a periodic kernel:
        update i of the chunk runs kernel[i % P], so update t of a chain runs kernel[t % P] where chunks start at
        multiples of `length` (as `run_chain`'s do; l2e.policy.chunk_kernels).
      sample_batch: sample_batch(key, data, batch_size) -> minibatch.
      batch_size: B.
      length: updates per chunk (with a tuple of P kernels, a multiple of P).
    Returns:
      chunk(state, key, start, data, args) -> (state, infos): `length` updates starting at update index `start`
      (int32 scalar); infos: the updates' Info leaves stacked on a new axis 0 of size `length`.
    Raises:
      ValueError: a tuple of kernels whose number does not divide `length`.
      TypeError (when traced): the kernel returns a bare state instead of (state, info).
    """
    kernels = kernel if isinstance(kernel, tuple) else (kernel,)
    if not kernels or length % len(kernels):
        raise ValueError(f"a chunk of {length} updates cannot cycle through {len(kernels)} kernels")

    def chunk(state, key, start, data, args):
        infos = []
        for i in range(length):
            k_batch, k_noise = jax.random.split(jax.random.fold_in(key, start + i))
            batch = sample_batch(k_batch, data, batch_size)
            state, info = _split_output(kernels[i % len(kernels)](k_noise, state, batch, args))
            infos.append(info)
        return state, jax.tree.map(lambda *xs: jnp.stack(xs), *infos)

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
    info_axis: int = 0,
    chunk_at: Callable[[int], Callable] | None = None,
) -> ChainResult:
    """Run `schedule.num_steps` updates with a compiled `chunk_fn`, keeping the thinned samples.

    Args:
      chunk_fn: from `make_chunk`, jitted, of length `schedule.chunk_length`.
      state: the initial state.
      key: the chain's PRNG key (update t uses fold_in(key, t)).
      data: the training data, passed to the chunk's sample_batch.
      args: the kernel's extra argument (hyperparameters, meta-parameters; None if none).
      schedule: the ChainSchedule.
      position_fn: state -> what to keep at a sample step (default: the position).
      progress: optional callable(updates just done), called after each chunk.
      info_axis: the axis the Infos are concatenated on: 0 for a single chain; 1 for a chunk vmapped over a
        leading population axis.
      chunk_at: optional start -> the compiled chunk for the chunk whose first update is `start` (a Python int),
        instead of chunk_fn for every chunk: kernels specialised to the phases of a sampler that changes at a
        known update (a burn-in, then a frozen window), each without a per-update branch on the step.
    Returns:
      ChainResult(final state, samples, info): samples are the leaves of `position_fn(state)` at the sample steps,
      stacked on a new leading axis 0 of size num_samples; info holds every step's Info (numpy), num_steps long on
      `info_axis`.
    """
    length = schedule.chunk_length
    wanted = set(schedule.sample_steps)
    samples, infos = [], []
    for start in range(0, schedule.num_steps, length):
        fn = chunk_fn if chunk_at is None else chunk_at(start)
        state, info = fn(state, key, jnp.asarray(start, jnp.int32), data, args)
        infos.append(info)
        if start + length in wanted:
            samples.append(position_fn(state))
        if progress is not None:
            progress(length)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *samples)
    # on the host: an eager jnp.concatenate would compile once per distinct number of chunks
    info = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=info_axis), *infos)
    return ChainResult(state, stacked, info)


def per_chain_batches(sample_batch, chains: int):
    """sample_batch(key, data, batch_size) -> minibatch made into one that draws `chains` independent minibatches
    (leaves with a leading axis `chains`), what a kernel of batched chains takes (l2e.policy's; a `make_chunk`
    BatchFn)."""
    def batches(key, data, batch_size):
        return jax.vmap(lambda k: sample_batch(k, data, batch_size))(jax.random.split(key, chains))

    return batches
