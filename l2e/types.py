"""Shared types of every sampler: the posterior a sampler targets and the blackjax-style interface."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

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

    def potential_grad(self, params: PyTree, minibatch: Minibatch) -> tuple[PyTree, PyTree]:
        """Return (ḡ, ∇Ũ): the mean-minibatch NLL gradient and the stochastic potential gradient N·ḡ − ∇log p(θ)."""
        g = jax.grad(self.nll)(params, minibatch)
        gp = jax.grad(self.log_prior)(params)
        grad_u = jax.tree.map(lambda a, b: self.data_size * a - b, g, gp)
        return g, grad_u


class SamplingAlgorithm(NamedTuple):
    """A sampler: `init(position) -> state` and `step(key, state, minibatch) -> state`, both pure and jittable.

    Every state is a NamedTuple with a `position` field holding the parameter pytree θ.
    """

    init: Callable[[PyTree], Any]
    step: Callable[[jax.Array, Any, Minibatch], Any]


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
