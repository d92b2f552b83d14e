"""Shared types of every sampler: the posterior a sampler targets and the blackjax-style interfaces.

Conventions: a sampler's state is a NamedTuple with a `position` field (the parameter pytree θ); a step
returns `(state, info)`, info a NamedTuple with at least `loss` (mean minibatch NLL at the pre-update
position, f32 scalar) and `is_finite` (bool scalar: the new state is finite); momentum methods add
`kinetic` = Σ_i r'_i·∇_rK(θ, r')_i at the post-update momentum r'.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any
Minibatch = Any


class Posterior(NamedTuple):
    """Unnormalised posterior of a model, in the units samplers need.

    nll: (params, minibatch) -> scalar, the **mean** negative log-likelihood over the minibatch.
    log_prior: params -> scalar, log p(θ) up to a constant.
    data_size: N, the true number of training examples (the likelihood is N × mean NLL).
    """

    nll: Callable[[PyTree, Minibatch], jax.Array]
    log_prior: Callable[[PyTree], jax.Array]
    data_size: int

    def value_and_potential_grad(self, params: PyTree, minibatch: Minibatch) -> tuple[jax.Array, PyTree, PyTree]:
        """(loss, ḡ, ∇Ũ): the mean minibatch NLL (scalar), its gradient ḡ and the stochastic potential
        gradient ∇Ũ = N·ḡ − ∇log p(θ)."""
        loss, g = jax.value_and_grad(self.nll)(params, minibatch)
        gp = jax.grad(self.log_prior)(params)
        grad_u = jax.tree.map(lambda a, b: self.data_size * a - b, g, gp)
        return loss, g, grad_u

    def potential_grad(self, params: PyTree, minibatch: Minibatch) -> tuple[PyTree, PyTree]:
        """(ḡ, ∇Ũ): `value_and_potential_grad` without the loss."""
        _, g, grad_u = self.value_and_potential_grad(params, minibatch)
        return g, grad_u


class SamplingAlgorithm(NamedTuple):
    """A minibatch sampler: `init(position) -> state`, `step(key, state, minibatch) -> (state, info)`;
    both pure and jittable."""

    init: Callable[[PyTree], Any]
    step: Callable[[jax.Array, Any, Minibatch], tuple[Any, Any]]


class FullBatchAlgorithm(NamedTuple):
    """A full-batch sampler (MCLMC, NUTS): `init(position, key) -> state`, `step(key, state) -> (state, info)`;
    both pure and jittable. The log density is fixed when the algorithm is built."""

    init: Callable[[PyTree, jax.Array], Any]
    step: Callable[[jax.Array, Any], tuple[Any, Any]]


def normal_like(key: jax.Array, tree: PyTree) -> PyTree:
    """Independent N(0, 1) draws with the structure, shapes and dtypes of `tree`.

    One draw of the total size, split into leaves: a single RNG call compiles and runs much faster
    on XLA:CPU than one call per leaf.
    """
    leaves, treedef = jax.tree.flatten(tree)
    sizes = [x.size for x in leaves]
    flat = jax.random.normal(key, (sum(sizes),), leaves[0].dtype)
    out, start = [], 0
    for x, n in zip(leaves, sizes):
        out.append(flat[start:start + n].reshape(x.shape).astype(x.dtype))
        start += n
    return jax.tree.unflatten(treedef, out)


def _flat(tree: PyTree) -> jax.Array:
    """Every coordinate of every leaf in one (d,) vector (jax.tree order); XLA fuses it into a reduction."""
    leaves = jax.tree.leaves(tree)
    return leaves[0].reshape(-1) if len(leaves) == 1 else jnp.concatenate([x.reshape(-1) for x in leaves])


def tree_sum(tree: PyTree) -> jax.Array:
    """Σ of every coordinate of every leaf (scalar)."""
    return jnp.sum(_flat(tree))


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    """Σ_i a_i·b_i over every coordinate of two pytrees of the same structure (scalar)."""
    return jnp.sum(_flat(a) * _flat(b))


def tree_size(tree: PyTree) -> int:
    """Number of coordinates d of a pytree (a Python int)."""
    return sum(x.size for x in jax.tree.leaves(tree))


def settled(tree: PyTree) -> PyTree:
    """`tree` through an optimisation barrier: diagnostics (Info sums) computed from a step's finished
    outputs this way stay out of the update's fusions, so adding them leaves the state bit-identical."""
    return jax.lax.optimization_barrier(tree)


def all_finite(*scalars: jax.Array) -> jax.Array:
    """Bool scalar: every one of `scalars` is finite (cheap finiteness flag of a step's outputs)."""
    return functools.reduce(operator.and_, [jnp.isfinite(s) for s in scalars])


class SamplerAPI:
    """A sampler's factory that also exposes the sampler's module (as blackjax's top-level samplers do):
    `l2e.sghmc(posterior, lr, friction)` calls the factory; `l2e.sghmc.init`, `l2e.sghmc.build_kernel` are
    the sampler's, and any other attribute is looked up in its module (`l2e.sghmc.SGHMCState`)."""

    def __init__(self, factory: Callable, init: Callable, build_kernel: Callable, module):
        functools.update_wrapper(self, factory)
        self.factory, self.init, self.build_kernel, self.module = factory, init, build_kernel, module

    def __call__(self, *args, **kwargs):
        return self.factory(*args, **kwargs)

    def __getattr__(self, name: str):
        if name == "module":  # not yet set (during unpickling / copying)
            raise AttributeError(name)
        return getattr(self.module, name)

    def __repr__(self) -> str:
        return f"<sampler {self.module.__name__}.{self.factory.__name__}>"
