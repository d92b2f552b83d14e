"""The evaluated methods: L2E, SGHMC, cyclical SGHMC and deep ensembles, all on the same gradient budget.

Every chain (and every ensemble member) runs through `l2e.chains.make_chunk` + `jax.jit` +
`l2e.chains.run_chain`: a Python loop over a compiled chunk of a few unrolled updates (never a CNN
gradient inside `lax.scan`; see l2e/chains.py).  The tuned hyperparameter (the learning rate) and the
L2E meta-parameters enter the chunk as traced `args`, so a whole tuning grid compiles once per
(task, method, schedule); compiled chunks and prediction functions are cached in this module.

`run_<method>(task, key, hp, cfg, split) -> MethodResult` with
    key: (init_key, chain_key) or one key that is split into them,
    hp: {"learning_rate": lr} (+ "meta_params" and "sampler" (L2EConfig) for L2E),
    split: "test" / "inner_valid" / ... (a Splits field) or a (x, y) tuple.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import l2e
from l2e.chains import ChainSchedule, make_chunk, run_chain
from tasks.task import Task

__all__ = ["DEState", "MethodResult", "RUNNERS", "predict_log_probs", "run_csghmc", "run_deep_ensemble",
           "run_l2e", "run_method", "run_sghmc", "split_data"]


@dataclasses.dataclass
class MethodResult:
    """samples_log_probs: (K, n, C) float32 log-softmax outputs of the **finite** samples on the split
    (collection order; divergent samples removed, so K may be smaller than requested).

    grad_evals: minibatch gradient evaluations done; seconds: wall time of the chain(s) (see `_timed_runs`);
    divergent_chains: chains / members with a non-finite sample; num_requested: samples asked for.
    """

    samples_log_probs: np.ndarray
    grad_evals: int
    seconds: float
    divergent_chains: int
    hyperparameters: dict
    num_requested: int = 0


class DEState(NamedTuple):
    """Deep-ensemble member state: parameters and the optax optimiser state."""

    position: Any
    opt_state: Any


# --------------------------------------------------------------------------- kernels
# kernel(key, state, minibatch, args) -> state; `args` holds traced hyperparameters.


def _sghmc_kernel(task: Task) -> Callable:
    def kernel(key, state, batch, args):
        return l2e.sghmc(task.posterior, args["lr"], args["friction"]).step(key, state, batch)

    return kernel


def _csghmc_kernel(task: Task, num_steps: int, num_cycles: int, exploration_ratio: float,
                   momentum_decay: float) -> Callable:
    def kernel(key, state, batch, args):
        alg = l2e.cyclical_sghmc(task.posterior, args["lr"], num_steps=num_steps, num_cycles=num_cycles,
                                 exploration_ratio=exploration_ratio, momentum_decay=momentum_decay)
        return alg.step(key, state, batch)

    return kernel


def _l2e_kernel(task: Task, sampler: l2e.L2EConfig) -> Callable:
    def kernel(key, state, batch, args):
        config = dataclasses.replace(sampler, learning_rate=args["lr"])  # traced lr skips the positivity check
        return l2e.build_kernel(task.posterior, config)(key, state, batch, args["meta"])

    return kernel


def _de_optimizer(lr, steps: int, momentum: float) -> optax.GradientTransformation:
    return optax.sgd(optax.cosine_decay_schedule(lr, steps), momentum=momentum)


def _de_kernel(task: Task, steps: int, momentum: float) -> Callable:
    n = task.data_size

    def loss(params, batch):
        return task.nll(params, batch) - task.log_prior(params) / n

    def kernel(key, state, batch, args):
        del key  # deterministic given the minibatch
        grads = jax.grad(loss)(state.position, batch)
        updates, opt_state = _de_optimizer(args["lr"], steps, momentum).update(grads, state.opt_state, state.position)
        return DEState(optax.apply_updates(state.position, updates), opt_state)

    return kernel


# --------------------------------------------------------------------------- compiled-function caches

_CHUNKS: dict[tuple, Callable] = {}
_WARM: set[tuple] = set()
_PREDICT: dict[tuple, Callable] = {}


def _chunk_fn(cache_key: tuple, task: Task, make_kernel: Callable[[], Callable], schedule: ChainSchedule):
    """The jitted chunk of `schedule.chunk_length` updates, cached per (cache_key, batch size, length)."""
    key = (cache_key, task.spec, schedule.batch_size, schedule.chunk_length)
    if key not in _CHUNKS:
        _CHUNKS[key] = jax.jit(make_chunk(make_kernel(), task.sample_batch, schedule.batch_size,
                                          schedule.chunk_length))
    return key, _CHUNKS[key]


def _warm_up(key: tuple, fn: Callable, state, data, args) -> None:
    """Compile `fn` (one discarded call) unless it already ran, so timings exclude compilation."""
    if key not in _WARM:
        jax.block_until_ready(fn(state, jax.random.PRNGKey(0), jnp.asarray(0, jnp.int32), data, args))
        _WARM.add(key)


def _predict_fn(task: Task) -> Callable:
    """jit((K-stacked params, x (B, ...)) -> (K, B, C) log-softmax), cached per task spec."""
    if task.spec not in _PREDICT:
        def predict(params, x):
            return jax.vmap(lambda p: jax.nn.log_softmax(task.logits(p, x)))(params)

        _PREDICT[task.spec] = jax.jit(predict)
    return _PREDICT[task.spec]


def split_data(task: Task, split) -> tuple[jax.Array, jax.Array]:
    """(x, y) of a named split of the task (train / inner_valid / outer_valid / test) or the given tuple."""
    if isinstance(split, str):
        if split not in ("train", "inner_valid", "outer_valid", "test"):
            raise ValueError(f"unknown split {split!r}")
        return getattr(task.splits, split)
    return split


def predict_log_probs(task: Task, samples, x, batch: int = 256) -> np.ndarray:
    """(K, n, C) float32 log-probabilities of K stacked parameter samples on inputs x, in padded batches."""
    fn = _predict_fn(task)
    n = int(x.shape[0])
    out = []
    for start in range(0, n, batch):
        xb = x[start:start + batch]
        m = int(xb.shape[0])
        if m < batch:  # pad to a fixed shape: one compilation per task
            xb = jnp.concatenate([xb, jnp.zeros((batch - m, *xb.shape[1:]), xb.dtype)])
        out.append(np.asarray(fn(samples, xb))[:, :m])
    return np.concatenate(out, axis=1)


# --------------------------------------------------------------------------- shared driver


def _keys(key) -> tuple[jax.Array, jax.Array]:
    if isinstance(key, (tuple, list)):
        return key[0], key[1]
    k1, k2 = jax.random.split(key)
    return k1, k2


def _finite_tree(tree) -> np.ndarray:
    """(K,) bool: all leaves finite for each sample (leading axis)."""
    leaves = jax.tree.leaves(tree)
    k = leaves[0].shape[0]
    ok = np.ones(k, bool)
    for leaf in leaves:
        ok &= np.asarray(jnp.all(jnp.isfinite(leaf.reshape(k, -1)), axis=1))
    return ok


def _finalise(task: Task, samples, chain_of_sample: list[int], split, cfg, grad_evals: int, seconds: float,
              hp: dict) -> MethodResult:
    """Predict on the split, drop non-finite samples, count the chains they belong to as divergent."""
    x, _ = split_data(task, split)
    log_probs = predict_log_probs(task, samples, x, cfg.eval_batch)
    ok = _finite_tree(samples) & np.all(np.isfinite(log_probs), axis=(1, 2))
    divergent = len({c for c, good in zip(chain_of_sample, ok) if not good})
    return MethodResult(log_probs[ok], grad_evals, seconds, divergent, hp, num_requested=len(ok))


def _args(hp: dict) -> dict:
    return {"lr": jnp.asarray(hp["learning_rate"], jnp.float32)}


def _run_single_chain(task, key, hp, cfg, split, method, cache_key, make_kernel, init_fn, args) -> MethodResult:
    schedule = cfg.schedule(method)
    init_key, chain_key = _keys(key)
    state = init_fn(task.init_params(init_key))
    ck, fn = _chunk_fn(cache_key, task, make_kernel, schedule)
    _warm_up(ck, fn, state, task.train_data, args)
    t0 = time.perf_counter()
    _, samples = run_chain(fn, state, chain_key, task.train_data, args, schedule)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    return _finalise(task, samples, [0] * schedule.num_samples, split, cfg, schedule.num_steps, seconds, hp)


# --------------------------------------------------------------------------- methods


def run_sghmc(task: Task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One SGHMC chain of G steps; K samples `cfg.sample_thinning` steps apart ending at step G."""
    friction = float(hp.get("friction", cfg.grid.sghmc_frictions[0]))
    hp = {**hp, "friction": friction, "thinning": cfg.sample_thinning}
    init = l2e.sghmc(task.posterior, 1.0, friction).init
    args = {**_args(hp), "friction": jnp.asarray(friction, jnp.float32)}
    return _run_single_chain(task, key, hp, cfg, split, "sghmc", ("sghmc",),
                             lambda: _sghmc_kernel(task), init, args)


def run_csghmc(task: Task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One cyclical-SGHMC chain of G steps with M = cfg.cycles cycles; a sample at the end of each of the
    last K cycles (the last step of a cycle is in its sampling phase)."""
    g = cfg.grid
    static = (cfg.num_steps, cfg.cycles, g.csghmc_exploration_ratio, g.csghmc_momentum_decay)
    hp = {**hp, "num_cycles": cfg.cycles, "exploration_ratio": g.csghmc_exploration_ratio,
          "momentum_decay": g.csghmc_momentum_decay}
    init = l2e.cyclical_sghmc(task.posterior, 1.0, *static[:2], static[2], static[3]).init
    return _run_single_chain(task, key, hp, cfg, split, "csghmc", ("csghmc",) + static,
                             lambda: _csghmc_kernel(task, *static), init, _args(hp))


def run_l2e(task: Task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One L2E chain of G steps (same sample schedule as SGHMC).  hp needs "meta_params" and "sampler"
    (the checkpoint's L2EConfig; its learning_rate is replaced by hp["learning_rate"])."""
    meta_params, sampler = hp["meta_params"], hp["sampler"]
    static = dataclasses.replace(sampler, learning_rate=1.0)  # lr is traced; the rest is compiled in
    args = {**_args(hp), "meta": meta_params}
    init = l2e.l2e(task.posterior, meta_params, static).init
    record = {"learning_rate": hp["learning_rate"], "thinning": cfg.sample_thinning,
              "sampler": {k: v for k, v in dataclasses.asdict(sampler).items() if k != "learning_rate"}}
    return _run_single_chain(task, key, record, cfg, split, "l2e", ("l2e", static),
                             lambda: _l2e_kernel(task, static), init, args)


def run_deep_ensemble(task: Task, key, hp: dict, cfg, split="test") -> MethodResult:
    """K members, each from its own init and minibatch sequence, trained for G/K steps of SGD with
    momentum and cosine decay on the MAP objective; each member's final parameters are one sample."""
    schedule = cfg.schedule("deep_ensemble")
    steps, k = schedule.num_steps, cfg.num_samples
    momentum = cfg.grid.de_momentum
    hp = {**hp, "optimizer": f"sgd(momentum={momentum}) + cosine decay to 0", "steps_per_member": steps,
          "members": k}
    args = _args(hp)
    init_key, chain_key = _keys(key)
    opt = _de_optimizer(1.0, steps, momentum)  # the state's structure does not depend on lr

    def init(m):
        params = task.init_params(jax.random.fold_in(init_key, m))
        return DEState(params, opt.init(params))

    ck, fn = _chunk_fn(("deep_ensemble", steps, momentum), task, lambda: _de_kernel(task, steps, momentum), schedule)
    _warm_up(ck, fn, init(0), task.train_data, args)
    t0 = time.perf_counter()
    members = []
    for m in range(k):
        _, sample = run_chain(fn, init(m), jax.random.fold_in(chain_key, m), task.train_data, args, schedule)
        members.append(sample)
    samples = jax.tree.map(lambda *xs: jnp.concatenate(xs), *members)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    return _finalise(task, samples, list(range(k)), split, cfg, steps * k, seconds, hp)


RUNNERS: dict[str, Callable[..., MethodResult]] = {
    "l2e": run_l2e,
    "sghmc": run_sghmc,
    "csghmc": run_csghmc,
    "deep_ensemble": run_deep_ensemble,
}


def run_method(method: str, task: Task, key, hp: dict, cfg, split="test") -> MethodResult:
    """Dispatch to run_<method>."""
    return RUNNERS[method](task, key, hp, cfg, split)
