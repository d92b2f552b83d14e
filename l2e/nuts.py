"""Full-batch NUTS over several chains (blackjax): the project's HMC reference and the NUTS-BDE baseline.

Each chain runs blackjax's Stan-style `window_adaptation` (step size by dual averaging to a target acceptance
rate, diagonal inverse mass matrix from the slow windows) from its own initial position, then NUTS with the
adapted parameters.  Chains are not vmapped (their step sizes differ; a `vmap` would make every tree as deep as
the deepest): chain c runs on local device c mod n, one after another on one device and side by side on several
(the same program per chain, so the same numbers whatever the device count).  Samples are kept every `thinning`
transitions, in a Python loop over a jitted block of `thinning` transitions, so memory holds only the kept draws.

NUTS-BDE (Sommer et al., 2024): the initial positions are deep-ensemble members (docs/samplers.md § NUTS;
references: docs/evaluation.md § Reference posteriors from NUTS).

`l2e.nuts` is this module: `init`, `build_kernel` and the factory `nuts` (one chain at fixed parameters, a
`FullBatchAlgorithm`), and `nuts_chains` (adapted chains).
"""
from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np

from l2e.checks import check_in_range, check_positive, check_step_count
from l2e.devices import member_device
from l2e.types import FullBatchAlgorithm, PyTree

__all__ = ["NUTSInfo", "build_kernel", "init", "nuts", "nuts_chains"]


class NUTSInfo(NamedTuple):
    """Per-chain diagnostics of `nuts_chains` (numpy arrays of shape (chains,) unless noted).

    step_size: adapted step size; inverse_mass_matrix: (chains, d) adapted diagonal;
    acceptance_rate: mean over the sampling transitions; num_divergent: divergent sampling transitions;
    num_grad_evals: leapfrog steps (= full-batch gradient evaluations), warm-up + sampling;
    seconds: wall time of warm-up + sampling of each chain; the first chain's includes compiling both programs
    (they are compiled once per call and device and reused by the other chains). On several devices the chains
    overlap, and a chain's seconds are the wall time from the start until it finished.
    """

    step_size: np.ndarray
    inverse_mass_matrix: np.ndarray
    acceptance_rate: np.ndarray
    num_divergent: np.ndarray
    num_grad_evals: np.ndarray
    seconds: np.ndarray


def init(position: PyTree, logdensity_fn: Callable[[PyTree], jax.Array], key: jax.Array | None = None):
    """blackjax's NUTS state at `position` (deterministic: the key is accepted for the full-batch interface and unused).

    Args:
      position: θ, a pytree of float arrays.
      logdensity_fn: params -> scalar log p(θ | D) up to a constant (full batch).
      key: unused (NUTS draws its momentum in every step).
    Returns:
      blackjax HMCState (position, logdensity: scalar, logdensity_grad: pytree like θ).
    """
    del key
    return blackjax.nuts.init(position, logdensity_fn)


def build_kernel(logdensity_fn: Callable[[PyTree], jax.Array], max_num_doublings: int = 10):
    """One NUTS transition of blackjax (multinomial, iterative; velocity Verlet; divergence threshold 1000).

    Args:
      logdensity_fn: params -> scalar log p(θ | D) up to a constant (full batch).
      max_num_doublings: at most 2^max_num_doublings leapfrog steps per transition (static).
    Returns:
      kernel(key, state, step_size, inverse_mass_matrix) -> (HMCState, blackjax NUTSInfo): step_size ε (θ units
      per unit momentum) and inverse_mass_matrix (diagonal (d,) or dense (d, d)) are call arguments; the key
      draws the momentum and the trajectory's directions.
    """
    kernel = blackjax.mcmc.nuts.build_kernel()

    def step(key: jax.Array, state, step_size, inverse_mass_matrix):
        metric = blackjax.mcmc.metrics.default_metric(inverse_mass_matrix)
        return kernel(key, state, logdensity_fn, step_size, metric, max_num_doublings)

    return step


def nuts(logdensity_fn: Callable[[PyTree], jax.Array], step_size, inverse_mass_matrix,
         max_num_doublings: int = 10) -> FullBatchAlgorithm:
    """blackjax NUTS at a fixed step size and inverse mass matrix as a FullBatchAlgorithm.

    Args:
      logdensity_fn: params -> scalar log p(θ | D) up to a constant (full batch).
      step_size: ε > 0 (scalar).
      inverse_mass_matrix: diagonal (d,) or dense (d, d).
      max_num_doublings: at most 2^max_num_doublings leapfrog steps per transition.
    Returns:
      FullBatchAlgorithm: init(position, key) -> HMCState (the key is unused), step(key, state) -> (HMCState,
      blackjax NUTSInfo).
    """
    check_positive(step_size=step_size)
    check_step_count("max_num_doublings", max_num_doublings, 1)
    kernel = build_kernel(logdensity_fn, max_num_doublings)

    def init_fn(position: PyTree, key: jax.Array | None = None):
        return init(position, logdensity_fn, key)

    def step(key: jax.Array, state):
        return kernel(key, state, step_size, inverse_mass_matrix)

    return FullBatchAlgorithm(init_fn, step)


def _programs(logdensity_fn, num_warmup: int, thinning: int, target_acceptance_rate: float,
              max_num_doublings: int):
    """(warm, block), jitted: warm(key, position) -> (state, adapted parameters, leapfrog steps) runs the
    window adaptation; block(key, state, step_size, imm) -> (state, Σ acceptance, divergences, leapfrog steps)
    runs `thinning` NUTS transitions."""

    @jax.jit
    def warm(k, position):
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity_fn,
                                           target_acceptance_rate=target_acceptance_rate,
                                           max_num_doublings=max_num_doublings)
        (state, params), info = adapt.run(k, position, num_steps=num_warmup)
        return state, params, jnp.sum(info.info.num_integration_steps)

    @jax.jit
    def block(k, state, step_size, inverse_mass_matrix):
        alg = nuts(logdensity_fn, step_size, inverse_mass_matrix, max_num_doublings)

        def one(carry, kk):
            st, acc, div, grads = carry
            st, info = alg.step(kk, st)
            return (st, acc + info.acceptance_rate, div + info.is_divergent,
                    grads + info.num_integration_steps), None

        zero = jnp.zeros((), jnp.int32)
        carry, _ = jax.lax.scan(one, (state, jnp.zeros(()), zero, zero), jax.random.split(k, thinning))
        return carry

    return warm, block


def _run_one(programs, logdensity_fn, position, key, dev, num_warmup: int, num_samples: int, progress,
             chain: int) -> tuple[list, Any, Any, Any, Any, Any, Any]:
    """One chain on device `dev`: (kept positions, step size, imm, Σ acceptance, divergences, warm-up
    leapfrog steps, sampling leapfrog steps)."""
    warm, block = programs
    k_warm, k_run = (jax.device_put(k, dev) for k in jax.random.split(key))
    if num_warmup > 0:
        state, params, warm_grads = warm(k_warm, position)
        step_size, imm = params["step_size"], params["inverse_mass_matrix"]
    else:
        state = init(position, logdensity_fn)
        step_size = jax.device_put(jnp.asarray(1e-3), dev)
        imm = jnp.ones_like(jax.flatten_util.ravel_pytree(position)[0])
        warm_grads = jnp.zeros((), jnp.int32)
    acc = div = grads = 0
    kept = []
    for s in range(num_samples):
        state, a, d, g = block(jax.random.fold_in(k_run, s), state, step_size, imm)
        acc, div, grads = acc + a, div + d, grads + g
        kept.append(state.position)
        if progress is not None:
            progress(chain, s)
    return kept, step_size, imm, acc, div, warm_grads, grads


def nuts_chains(logdensity_fn: Callable[[PyTree], jax.Array], init_positions: PyTree, key: jax.Array,
                num_warmup: int, num_samples: int, thinning: int = 1, target_acceptance_rate: float = 0.8,
                max_num_doublings: int = 10, progress: Callable | None = None) -> tuple[PyTree, NUTSInfo]:
    """Run one NUTS chain per leading index of `init_positions` (module doc).

    Args:
      logdensity_fn: params -> scalar log p(θ | D) up to a constant (full batch).
      init_positions: a params pytree with a leading chain axis (C, ...).
      key: PRNG key (chain c uses fold_in(key, c)).
      num_warmup: window-adaptation transitions (≥ 0; 0: ε = 1e-3, unit mass).
      num_samples: draws kept per chain (≥ 1).
      thinning: transitions between kept draws (≥ 1).
      target_acceptance_rate: the dual-averaging target.
      max_num_doublings: at most 2^max_num_doublings leapfrog steps per transition.
      progress: optional callable(chain, draw) called after each kept draw (e.g. to advance a progress bar).
    Returns:
      (samples: the params pytree with leading axes (C, num_samples), NUTSInfo).
    Raises:
      ValueError: a negative warm-up or a non-positive num_samples / thinning.
    """
    for name, value, least in (("num_warmup", num_warmup, 0), ("num_samples", num_samples, 1), ("thinning", thinning, 1),
                               ("max_num_doublings", max_num_doublings, 1)):
        check_step_count(name, value, least)
    check_in_range("target_acceptance_rate", target_acceptance_rate, 0.0, 1.0, include_low=False, include_high=False)
    num_chains = jax.tree.leaves(init_positions)[0].shape[0]
    programs = _programs(logdensity_fn, num_warmup, thinning, target_acceptance_rate, max_num_doublings)
    devices = jax.local_devices()
    concurrent = len(devices) > 1 and num_chains > 1
    runs = []
    t_start = time.perf_counter()
    for c in range(num_chains):  # chain c on local device c mod n: chains overlap on a multi-device machine
        dev = member_device(c)
        position = jax.device_put(jax.tree.map(lambda x: x[c], init_positions), dev)
        t0 = time.perf_counter()
        run = _run_one(programs, logdensity_fn, position, jax.random.fold_in(key, c), dev, num_warmup,
                       num_samples, progress, c)
        if not concurrent:
            jax.block_until_ready(run[0][-1])
        runs.append((*run, time.perf_counter() - t0))
    draws, infos = [], []
    for kept, step_size, imm, acc, div, warm_grads, grads, seconds in runs:
        if concurrent:  # chains ran side by side: each chain's time is the wall time until it finished
            jax.block_until_ready(kept[-1])
            seconds = time.perf_counter() - t_start
        draws.append(jax.device_put(jax.tree.map(lambda *xs: jnp.stack(xs), *kept), devices[0]))
        infos.append((float(step_size), np.asarray(imm), float(acc) / (num_samples * thinning), int(div),
                      int(warm_grads) + int(grads), seconds))
    samples = jax.tree.map(lambda *xs: jnp.stack(xs), *draws)
    cols = list(zip(*infos))
    info = NUTSInfo(np.asarray(cols[0]), np.stack(cols[1]), np.asarray(cols[2]), np.asarray(cols[3]),
                    np.asarray(cols[4]), np.asarray(cols[5]))
    return samples, info
