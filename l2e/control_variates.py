"""Control variates for SG-MCMC (Baker, Fearnhead, Fox & Nemeth, 2019): what SGLD-CV and SGHMC-CV share.

An anchor θ̂ near the posterior mode (found by SGD: `find_anchor`, or `build_sgd_kernel` in a driver of one's own)
and the full-data NLL gradient there, ḡ(θ̂) = (1/n)·Σ_i ∇ℓ_i(θ̂) over every training example (`anchor_at`), turn
the minibatch potential gradient into

    ∇Ũ_cv(θ) = ∇U(θ̂) + (N/B)·Σ_{i∈B} [∇ℓ_i(θ) − ∇ℓ_i(θ̂)]  (prior terms exact: −∇log p(θ) replaces −∇log p(θ̂))
             = N·[ḡ_B(θ) − ḡ_B(θ̂) + ḡ(θ̂)] − ∇log p(θ),

an unbiased estimate of ∇U(θ) whose noise vanishes as θ → θ̂ (the noise of plain SG-MCMC does not: at large N it
dominates the injected noise and the chain runs hot). `cv_posterior(posterior, anchor)` is a `Posterior` whose
`value_and_potential_grad` returns exactly this estimate (and the plain minibatch loss), so SGLD-CV and SGHMC-CV are
the SGLD and SGHMC kernels on it (l2e/sgld_cv.py, l2e/sghmc_cv.py). Cost: two minibatch gradients per step (at θ and
at θ̂, on the same minibatch), plus the anchor's: the SGD steps (one minibatch gradient each) and one pass over the
data (n/B minibatch gradients). `refreshed` moves the anchor to the chain's current θ (another pass over the data).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from l2e.chains import ChainSchedule, make_chunk, run_chain
from l2e.checks import check_in_range, check_positive, check_step_count
from l2e.diffusions import position_update, sgd_momentum
from l2e.types import Posterior, PyTree, all_finite, settled, tree_sum

__all__ = ["Anchor", "SGDInfo", "SGDState", "anchor_at", "build_sgd_kernel", "check_anchor", "cv_posterior",
           "find_anchor", "full_gradient_cost", "full_nll_grad", "refreshed", "sgd_init"]


class Anchor(NamedTuple):
    """position: θ̂ (pytree); nll_grad: ḡ(θ̂), the mean NLL gradient over every training example (pytree like θ,
    per-datum units), so that ∇U(θ̂) = N·nll_grad − ∇log p(θ̂)."""

    position: PyTree
    nll_grad: PyTree


def check_anchor(anchor) -> None:
    """Refuse what is not an anchor: an `Anchor` whose nll_grad has its position's structure.

    Args:
      anchor: the value given as an anchor.
    Raises:
      ValueError: naming what it is.
    """
    if not isinstance(anchor, Anchor):
        raise ValueError(f"anchor must be an l2e.control_variates.Anchor (anchor_at, find_anchor), got a "
                         f"{type(anchor).__name__}")
    if jax.tree.structure(anchor.position) != jax.tree.structure(anchor.nll_grad):
        raise ValueError("anchor.nll_grad must have the structure of anchor.position")


def _rows(data) -> int:
    return int(jax.tree.leaves(data)[0].shape[0])


def full_nll_grad(posterior: Posterior, position: PyTree, data, chunk_size: int | None = None) -> PyTree:
    """ḡ(θ): the gradient of the mean NLL over the whole data set.

    Args:
      posterior: the model (`l2e.Posterior`).
      position: θ (pytree).
      data: every training example, as `posterior.nll` takes a minibatch.
      chunk_size: None: `data` is one batch; else `data` is a pytree of arrays with a leading example axis, taken in
        chunks of this many rows (Python-unrolled; the last may be shorter) and their gradients weighted by rows.
    Returns:
      ḡ(θ), a pytree like θ (jittable: under jit the chunks are one program).
    """
    grad = jax.grad(posterior.nll)
    if chunk_size is None:
        return grad(position, data)
    check_step_count("chunk_size", chunk_size, 1)
    n = _rows(data)
    total = None
    for start in range(0, n, chunk_size):
        chunk = jax.tree.map(lambda a, s=start: a[s:s + chunk_size], data)
        weight = _rows(chunk) / n
        g = jax.tree.map(lambda x, w=weight: w * x, grad(position, chunk))
        total = g if total is None else jax.tree.map(jnp.add, total, g)
    return total


def anchor_at(posterior: Posterior, position: PyTree, data, chunk_size: int | None = None) -> Anchor:
    """The anchor at θ̂ = `position`: θ̂ and ḡ(θ̂) over `data` (`full_nll_grad`; cost: one pass over the data).

    Args:
      posterior, position, data, chunk_size: as `full_nll_grad`.
    Returns:
      Anchor.
    """
    return Anchor(position, full_nll_grad(posterior, position, data, chunk_size))


def cv_posterior(posterior: Posterior, anchor: Anchor) -> Posterior:
    """The posterior whose minibatch gradient is the control-variate estimate (module doc).

    Its nll(θ, B) has the value of posterior.nll(θ, B) (the loss a step reports) and the gradient
    ḡ_B(θ) − ḡ_B(θ̂) + ḡ(θ̂) (θ̂ and ḡ(θ̂) held fixed), so N·∇nll − ∇log p(θ) = ∇Ũ_cv(θ); its log prior and N are
    the posterior's. Evaluating it costs two minibatch gradients.

    Args:
      posterior: the model (`l2e.Posterior`).
      anchor: the Anchor (may be traced: a chain state's).
    Returns:
      an `l2e.Posterior`.
    """
    anchor = jax.lax.stop_gradient(anchor)

    def nll(params, minibatch):
        at_anchor = jax.grad(posterior.nll)(anchor.position, minibatch)
        shift = jax.lax.stop_gradient(jax.tree.map(jnp.subtract, anchor.nll_grad, at_anchor))
        linear = sum(jnp.vdot(c, p) for c, p in zip(jax.tree.leaves(shift), jax.tree.leaves(params)))
        return posterior.nll(params, minibatch) + (linear - jax.lax.stop_gradient(linear))

    return Posterior(nll, posterior.log_prior, posterior.data_size)


def refreshed(state, posterior: Posterior, data, chunk_size: int | None = None):
    """A CV sampler's state with its anchor moved to the state's position (one more pass over the data).

    Args:
      state: an SGLDCVState or SGHMCCVState (any NamedTuple with `position` and `anchor`).
      posterior, data, chunk_size: as `anchor_at`.
    Returns:
      the state with anchor = anchor_at(posterior, state.position, data, chunk_size).
    """
    return state._replace(anchor=anchor_at(posterior, state.position, data, chunk_size))


# ------------------------------------------------------------------------ the anchor's SGD


class SGDState(NamedTuple):
    """position: θ; velocity: v (θ units per step, pytree like θ); step: updates done (int32 scalar)."""

    position: PyTree
    velocity: PyTree
    step: jax.Array


class SGDInfo(NamedTuple):
    """loss: mean minibatch NLL at the pre-update θ (f32 scalar); is_finite: loss and Σθ' finite (bool scalar)."""

    loss: jax.Array
    is_finite: jax.Array


def sgd_init(position: PyTree) -> SGDState:
    """The SGD state at `position` (velocity 0, step 0).

    Args:
      position: θ₀, a pytree of float arrays.
    Returns:
      SGDState.
    """
    return SGDState(position, jax.tree.map(jnp.zeros_like, position), jnp.zeros((), jnp.int32))


def build_sgd_kernel(posterior: Posterior):
    """The anchor search: heavy-ball SGD on the MAP objective U(θ)/N = mean NLL − log p(θ)/N with a cosine decay of
    the learning rate to 0 over `num_steps` updates (one minibatch gradient each):
    v ← μ·v − lr_t·∇Ũ(θ)/N, θ ← θ + v, lr_t = lr·½(1 + cos(π·t/num_steps)).

    Args:
      posterior: the model (`l2e.Posterior`).
    Returns:
      kernel(key, state, minibatch, learning_rate, momentum, num_steps) -> (SGDState, SGDInfo): lr in mean-loss
      units (SGLD's lr = ε·N and SGHMC's lr = ε²·N are on this scale), μ ∈ [0, 1); all three traceable. The key is
      unused (SGD is deterministic given the minibatch).
    """

    def kernel(key, state: SGDState, minibatch, learning_rate, momentum, num_steps):
        del key
        decay = 0.5 * (1.0 + jnp.cos(jnp.pi * state.step / num_steps))
        step_size = learning_rate * decay / posterior.data_size
        loss, _, grad_u = posterior.value_and_potential_grad(state.position, minibatch)
        kick = functools.partial(sgd_momentum, z=0.0, momentum=momentum, step_size=step_size, noise_std=0.0)
        vel = jax.tree.map(lambda v, g: kick(v, g), state.velocity, grad_u)
        pos = jax.tree.map(functools.partial(position_update, step_size=1.0), state.position, vel)
        return SGDState(pos, vel, state.step + 1), SGDInfo(loss, all_finite(loss, tree_sum(settled(pos))))

    return kernel


def find_anchor(posterior: Posterior, position: PyTree, key: jax.Array, data, sample_batch, batch_size: int,
                num_steps: int, learning_rate: float, momentum: float = 0.9, chunk_size: int | None = None,
                chunk: int = 10) -> Anchor:
    """SGD from `position` for `num_steps` minibatches (`build_sgd_kernel`), then the anchor there (`anchor_at`).

    Args:
      posterior: the model; position: θ₀; key: the minibatch key (update t: fold_in(key, t), as `l2e.run_chain`).
      data, sample_batch, batch_size: the training data, `sample_batch(key, data, B) -> minibatch` and B.
      num_steps: SGD updates (0: the anchor at θ₀); learning_rate: lr > 0 (mean-loss units); momentum: μ ∈ [0, 1).
      chunk_size: the full-data pass's chunks (`full_nll_grad`); chunk: SGD updates per compiled call.
    Returns:
      Anchor. Cost: num_steps + ⌈n/B⌉ minibatch gradients (n the rows of `data`).
    """
    check_step_count("num_steps", num_steps, 0)
    check_positive(learning_rate=learning_rate)
    check_in_range("momentum", momentum, 0.0, 1.0, include_high=False)
    if num_steps:
        kernel = build_sgd_kernel(posterior)
        schedule = ChainSchedule(num_steps, 1, num_steps, batch_size, min(chunk, num_steps))
        fn = jax.jit(make_chunk(lambda k, s, b, a: kernel(k, s, b, *a), sample_batch, batch_size,
                                schedule.chunk_length))
        args = (jnp.float32(learning_rate), jnp.float32(momentum), jnp.int32(num_steps))
        position = run_chain(fn, sgd_init(position), key, data, args, schedule).state.position
    return jax.jit(functools.partial(anchor_at, posterior, chunk_size=chunk_size))(position, data)


def full_gradient_cost(rows: int, batch_size: int) -> int:
    """⌈rows / B⌉: a pass over `rows` examples in minibatch gradients of B (the convention of the CV samplers)."""
    return math.ceil(rows / batch_size)
