"""Sums over the chain axis of M chains held in one state (every leaf's leading axis M).

On XLA:CPU (jax 0.10) `jnp.sum(x, axis=0)` over a large array's leading axis runs about 40× slower than the same sum
added chain by chain (bench/leading_reduce.py; results/bench_leading_reduce.json). Policy-L2E's gathering windows paid
it at every update.
"""
from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp

__all__ = ["UNROLL", "chain_sum"]


UNROLL = 32
"""Up to this many chains the sum is unrolled (M slices added in one fusion); beyond it, a fori_loop over them."""


def chain_sum(x: jax.Array, keep: jax.Array) -> jax.Array:
    """Σ_c x[c] over the leading (chain) axis of `x`, over the chains where `keep` (M,) holds; a left-out chain's
    entries may be non-finite and do not reach the sum.

    Added chain by chain, not `jnp.sum(x, axis=0)`: on XLA:CPU a reduce over a large array's leading axis runs about
    40× slower than these adds (bench/leading_reduce.py); in Policy-L2E's gathering windows it was an eighth of an
    update's time on a 269k-parameter MLP (20.2 → 17.7 ms in a same-process A/B; docs/decisions.md).

    Args:
      x: an array (M, …).
      keep: (M,) bool.
    Returns:
      an array of x's shape without its leading axis.
    """
    zero = jnp.zeros((), x.dtype)
    if x.shape[0] <= UNROLL:
        return functools.reduce(operator.add, [jnp.where(keep[c], x[c], zero) for c in range(x.shape[0])])
    return jax.lax.fori_loop(0, x.shape[0], lambda c, acc: acc + jnp.where(keep[c], x[c], zero),
                             jnp.zeros(x.shape[1:], x.dtype))
