"""Chains in batches: the M chains of a chain allocation (EvalConfig.chains = M) as one vmapped, compiled program.

`registry.run_method` hands a method that declares `Method.batch_chains` a `ChainBatch` of M key pairs instead of
running it M times; its runner passes the keys on to `driver.run_single_chain`, which runs them (`batched.run_batched`). Chain
c has the keys of the one-at-a-time path (fold_in(init key, c), fold_in(chain key, c)), the same initial state, the
same minibatches and noise; the vmapped program may round differently (tests/test_batch.py bounds the difference).
Each chain is then finalised on its own and the M results pooled by `outputs.merge_chains`, exactly as the
one-at-a-time path pools its runs (divergence, T_kin, draws per chain); the batch's wall time is split evenly.

When chains are batched (`use_batches`; EvalConfig.batch_chains):
- "never": one at a time; "always": batched;
- "auto" (the default): batched unless the model's NLL holds a convolution and the backend is the CPU — XLA:CPU
  turns a vmapped convolution into a grouped one, 16× one chain's update for 10 chains of the digits CNN against
  2.25× for the MLP (BENCHMARKS.md, "Chains in batches on a GPU") — read from the NLL's jaxpr, so a user's model is
  judged the same way.
Memory rule: a batch holds at most MAX_BATCH_BYTES of chain states (its chains × one state's bytes); more chains run
in batches of that width (`batch_width`; a caller may ask for a smaller width, so that one compiled program serves
calls of different sizes), the last padded with copies of one of its chains (evaluate.methods.batched.run_calls).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
__all__ = ["BATCH_MODES", "MAX_BATCH_BYTES", "ChainBatch", "batch_width", "chain_batch", "has_convolution",
           "use_batches"]

BATCH_MODES = ("auto", "always", "never")
MAX_BATCH_BYTES = 2 * 2**30
"""The most bytes of chain states one vmapped batch holds (M × one chain's state; the activations of a minibatch
per chain come on top, bounded by the task limits)."""


class ChainBatch(NamedTuple):
    """M chains' keys: init_keys and chain_keys, each (M, 2)."""

    init_keys: jax.Array
    chain_keys: jax.Array


def chain_batch(init_key, chain_key, m: int) -> ChainBatch:
    """The keys of chains 0 … m − 1 as the one-at-a-time path derives them."""
    return ChainBatch(jnp.stack([jax.random.fold_in(init_key, c) for c in range(m)]),
                      jnp.stack([jax.random.fold_in(chain_key, c) for c in range(m)]))


def _eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (list, tuple)) else [param]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def has_convolution(task) -> bool:
    """Whether the task's mean-minibatch NLL holds a convolution (read from its jaxpr on a batch of 2)."""
    params = task.init_params(jax.random.PRNGKey(0))
    batch = task.sample_batch(jax.random.PRNGKey(0), task.train_data, 2)
    jaxpr = jax.make_jaxpr(task.posterior.nll)(params, batch).jaxpr
    return any(e.primitive.name.startswith("conv_general") for e in _eqns(jaxpr))


def use_batches(cfg, task) -> bool:
    """Whether the chains of a chain allocation run batched under cfg.batch_chains (module doc)."""
    mode = cfg.batch_chains
    if mode == "never":
        return False
    if mode == "always" or jax.default_backend() != "cpu":
        return True
    key = ("has_convolution", task.spec)
    cached = _CONV.get(key)
    if cached is None:
        cached = _CONV[key] = has_convolution(task)
    return not cached


_CONV: dict = {}


def batch_width(n: int, state_bytes: int, width: int | None = None) -> int:
    """Chains per vmapped program for n chains whose states take state_bytes each: `width` (the caller's batch
    width, e.g. the curves' seeds × M), else n, at most MAX_BATCH_BYTES // state_bytes (and at least 1)."""
    return max(1, min(width or n, n if width is None else width, MAX_BATCH_BYTES // max(state_bytes, 1)))
