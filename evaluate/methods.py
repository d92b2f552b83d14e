"""The evaluated methods: L2E, SGHMC, cyclical SGHMC, pSGLD, fSGHMC, deep ensembles (plain and noisy), MILE,
NUTS-BDE.

Minibatch methods (l2e, sghmc, csghmc, psgld, fsghmc, deep_ensemble, noisy_de) share the budget of G minibatch
gradient evaluations.  Every chain (and every ensemble member) runs through `l2e.chains.make_chunk` +
`jax.jit` + `l2e.chains.run_chain`: a Python loop over a compiled chunk of a few unrolled updates (never a CNN
gradient inside `lax.scan`; see l2e/chains.py).  The tuned hyperparameter (the learning rate) and the L2E
meta-parameters enter the chunk as traced `args`, so a whole tuning grid compiles once per (task, method,
schedule); compiled chunks and prediction functions are cached in this module.

Devices: deep-ensemble members (plain and noisy) run round robin on the local devices, each the same
single-member program as on one device (identical numbers whatever the device count), and so do NUTS-BDE's
chains (`l2e.nuts.nuts_chains`); MILE's vmapped chains are sharded over a mesh of the devices
(`meta_train.es.population_mesh`); the other methods run a single chain.

Full-batch methods (mile, nuts_bde) start from deep-ensemble members (BASELINES §6) and use their own budgets
(EvalConfig.mile_* / nuts_*); their gradient evaluations are full-batch ones.

`run_<method>(task, key, hp, cfg, split) -> MethodResult` with
    key: (init_key, chain_key) or one key that is split into them,
    hp: {"learning_rate": lr} (+ "meta_params" and "sampler" (L2EConfig) for L2E; "init_positions" (leaves
        (chains, ...)) and "step_size0" for MILE, "init_positions" for NUTS-BDE),
    split: "test" / "inner_valid" / ... (a Splits field) or a (x, y) tuple.
Works on classification tasks (`tasks.Task`) and regression tasks (`tasks.regression.RegressionTask`).
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import l2e
from l2e.chains import ChainSchedule, make_chunk, member_device, on_device, run_chain
from meta_train.es import population_mesh, replicate, shard_population
from l2e.types import normal_like

__all__ = ["DEState", "FULL_BATCH_METHODS", "MethodResult", "NoisyDEState", "RUNNERS", "barrier_entry",
           "is_regression", "predict_log_probs", "predict_outputs", "run_csghmc", "run_deep_ensemble", "run_fsghmc",
           "run_l2e", "run_method", "run_mile", "run_noisy_de", "run_nuts_bde", "run_psgld", "run_sghmc",
           "split_data"]

FULL_BATCH_METHODS = ("mile", "nuts_bde")
"""Methods that use full-batch gradients and their own budget (not G)."""


def is_regression(task) -> bool:
    return getattr(task, "kind", "classification") == "regression"


@dataclasses.dataclass
class MethodResult:
    """Output of one run on one split; only the **finite** samples are kept (collection order; divergent samples
    removed, so K may be smaller than requested).

    samples_log_probs: classification (K, n, C) float32 log-softmax outputs; None for regression.
    predictions: regression (K, n, 2) float32, [..., 0] = loc, [..., 1] = scale (standardised target units);
      None for classification.
    grad_evals: gradient evaluations done (minibatch ones, or full-batch ones for FULL_BATCH_METHODS);
    seconds: wall time of the chain(s) (after compilation, see `_run_single_chain`);
    divergent_chains: chains / members with a non-finite sample; num_requested: samples asked for.
    samples: the finite parameter samples, a pytree of numpy leaves (K, ...); chain_ids (K,) int: the chain
      (ensemble member) of each; num_chains: chains run; draws_per_chain: samples requested per chain.
    gradient: "minibatch" or "full-batch"; batch_size: B of a minibatch method (None for full batch).
    """

    samples_log_probs: np.ndarray | None
    grad_evals: int
    seconds: float
    divergent_chains: int
    hyperparameters: dict
    num_requested: int = 0
    predictions: np.ndarray | None = None
    samples: Any = None
    chain_ids: np.ndarray | None = None
    num_chains: int = 1
    draws_per_chain: int = 0
    gradient: str = "minibatch"
    batch_size: int | None = None

    @property
    def outputs(self) -> np.ndarray:
        """The per-sample predictions: log-probs (K, n, C) or [loc, scale] (K, n, 2)."""
        return self.samples_log_probs if self.predictions is None else self.predictions

    @property
    def num_finite(self) -> int:
        return int(self.outputs.shape[0])


class DEState(NamedTuple):
    """Deep-ensemble member state: parameters and the optax optimiser state."""

    position: Any
    opt_state: Any


class NoisyDEState(NamedTuple):
    """Noisy deep-ensemble member state: parameters, velocity v (parameter units per step), update count."""

    position: Any
    velocity: Any
    step: jax.Array


# --------------------------------------------------------------------------- kernels
# kernel(key, state, minibatch, args) -> state; `args` holds traced hyperparameters.


def _sghmc_kernel(task) -> Callable:
    def kernel(key, state, batch, args):
        return l2e.sghmc(task.posterior, args["lr"], args["friction"]).step(key, state, batch)

    return kernel


def _csghmc_kernel(task, num_steps: int, num_cycles: int, exploration_ratio: float,
                   momentum_decay: float) -> Callable:
    def kernel(key, state, batch, args):
        alg = l2e.cyclical_sghmc(task.posterior, args["lr"], num_steps=num_steps, num_cycles=num_cycles,
                                 exploration_ratio=exploration_ratio, momentum_decay=momentum_decay)
        return alg.step(key, state, batch)

    return kernel


def _l2e_kernel(task, sampler: l2e.L2EConfig) -> Callable:
    def kernel(key, state, batch, args):
        config = dataclasses.replace(sampler, learning_rate=args["lr"])  # traced lr skips the positivity check
        return l2e.build_kernel(task.posterior, config)(key, state, batch, args["meta"])

    return kernel


def _psgld_kernel(task, rho: float, lam: float) -> Callable:
    def kernel(key, state, batch, args):
        return l2e.psgld(task.posterior, args["lr"], rho, lam).step(key, state, batch)

    return kernel


def _fsghmc_kernel(posterior, friction: float) -> Callable:
    def kernel(key, state, batch, args):
        return l2e.fsghmc(posterior, args["lr"], friction).step(key, state, batch)

    return kernel


def _de_optimizer(lr, steps: int, momentum: float) -> optax.GradientTransformation:
    return optax.sgd(optax.cosine_decay_schedule(lr, steps), momentum=momentum)


def _de_kernel(task, steps: int, momentum: float) -> Callable:
    n = task.data_size

    def loss(params, batch):
        return task.nll(params, batch) - task.log_prior(params) / n

    def kernel(key, state, batch, args):
        del key  # deterministic given the minibatch
        grads = jax.grad(loss)(state.position, batch)
        updates, opt_state = _de_optimizer(args["lr"], steps, momentum).update(grads, state.opt_state, state.position)
        return DEState(optax.apply_updates(state.position, updates), opt_state)

    return kernel


def _noisy_de_kernel(task, steps: int, momentum: float, temperature: float = 1.0) -> Callable:
    """SGHMC in SGD-with-momentum form (BASELINES §0/§7), mean-loss units, a = 1 − momentum:
    v ← momentum·v − lr_t·(ḡ − ∇log p(θ)/N) + N(0, 2·a·lr_t·T/N),  θ ← θ + v,
    lr_t = lr·cosine decay to 0 over the member's steps (the DE schedule).  T = 0 is heavy-ball SGD (lr inside
    the velocity; optax's sgd puts it outside — identical for a constant lr)."""
    n = task.data_size
    schedule = optax.cosine_decay_schedule(1.0, steps)

    def kernel(key, state, batch, args):
        lr = args["lr"] * schedule(state.step)
        _, grad_u = task.posterior.potential_grad(state.position, batch)
        noise = normal_like(key, state.position)
        std = jnp.sqrt(2.0 * (1.0 - momentum) * lr * temperature / n)
        vel = jax.tree.map(lambda v, g, z: momentum * v - (lr / n) * g + std * z, state.velocity, grad_u, noise)
        pos = jax.tree.map(lambda x, v: x + v, state.position, vel)
        return NoisyDEState(pos, vel, state.step + 1)

    return kernel


# --------------------------------------------------------------------------- compiled-function caches

_CHUNKS: dict[tuple, Callable] = {}
_WARM: set[tuple] = set()
_PREDICT: dict[tuple, Callable] = {}
_FULL_BATCH: dict[tuple, Callable] = {}
_STEP_COST: dict[tuple, dict] = {}


def _chunk_fn(cache_key: tuple, task, make_kernel: Callable[[], Callable], schedule: ChainSchedule):
    """The jitted chunk of `schedule.chunk_length` updates, cached per (cache_key, batch size, length)."""
    key = (cache_key, task.spec, schedule.batch_size, schedule.chunk_length)
    if key not in _CHUNKS:
        _CHUNKS[key] = jax.jit(make_chunk(make_kernel(), task.sample_batch, schedule.batch_size,
                                          schedule.chunk_length))
    return key, _CHUNKS[key]


def _warm_up(key: tuple, fn: Callable, state, data, args, device=None) -> None:
    """Compile `fn` (one discarded call) unless it already ran, so timings exclude compilation; with `device`,
    for inputs placed on that device (a jitted function compiles once per device it runs on)."""
    if device is not None:
        key = key + (device,)
        state, args = jax.device_put((state, args), device)
        data = on_device(data, device)
    if key not in _WARM:
        k0 = jax.random.PRNGKey(0) if device is None else jax.device_put(jax.random.PRNGKey(0), device)
        jax.block_until_ready(fn(state, k0, jnp.asarray(0, jnp.int32), data, args))
        _WARM.add(key)


def _predict_fn(task) -> Callable:
    """jit((K-stacked params, x (B, ...)) -> (K, B, C) log-softmax | (K, B, 2) [loc, scale]), cached per spec."""
    if task.spec not in _PREDICT:
        if is_regression(task):
            def predict(params, x):
                return jax.vmap(lambda p: jnp.stack(task.apply(p, x), axis=-1))(params)
        else:
            def predict(params, x):
                return jax.vmap(lambda p: jax.nn.log_softmax(task.logits(p, x)))(params)

        _PREDICT[task.spec] = jax.jit(predict)
    return _PREDICT[task.spec]


def split_data(task, split) -> tuple[jax.Array, jax.Array]:
    """(x, y) of a named split of the task (train / inner_valid / outer_valid / test) or the given tuple."""
    if isinstance(split, str):
        if split not in ("train", "inner_valid", "outer_valid", "test"):
            raise ValueError(f"unknown split {split!r}")
        return getattr(task.splits, split)
    return split


def predict_outputs(task, samples, x, batch: int = 256) -> np.ndarray:
    """(K, n, C) float32 log-probabilities (classification) or (K, n, 2) [loc, scale] (regression) of K stacked
    parameter samples on inputs x, in padded batches."""
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


predict_log_probs = predict_outputs
"""Alias (classification: (K, n, C) log-probabilities)."""


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


def _finalise(task, samples, chain_of_sample: list[int], split, cfg, grad_evals: int, seconds: float,
              hp: dict, num_chains: int = 1, gradient: str = "minibatch") -> MethodResult:
    """Predict on the split, drop non-finite samples, count the chains they belong to as divergent."""
    x, _ = split_data(task, split)
    out = predict_outputs(task, samples, x, cfg.eval_batch)
    ok = _finite_tree(samples) & np.all(np.isfinite(out), axis=(1, 2))
    divergent = len({c for c, good in zip(chain_of_sample, ok) if not good})
    kept = jax.tree.map(lambda a: np.asarray(a)[ok], samples)
    chain_ids = np.asarray(chain_of_sample, dtype=np.int64)[ok]
    reg = is_regression(task)
    return MethodResult(None if reg else out[ok], grad_evals, seconds, divergent, hp, num_requested=len(ok),
                        predictions=out[ok] if reg else None, samples=kept, chain_ids=chain_ids,
                        num_chains=num_chains, draws_per_chain=len(ok) // num_chains, gradient=gradient,
                        batch_size=None if gradient == "full-batch" else cfg.batch_size)


def _args(hp: dict) -> dict:
    return {"lr": jnp.asarray(hp["learning_rate"], jnp.float32)}


def _run_single_chain(task, key, hp, cfg, split, method, cache_key, make_kernel, init_fn, args,
                      final_info: Callable | None = None) -> MethodResult:
    """One chain of cfg.schedule(method); `final_info(final_state) -> dict` adds entries to hp."""
    schedule = cfg.schedule(method)
    init_key, chain_key = _keys(key)
    state = init_fn(task.init_params(init_key))
    ck, fn = _chunk_fn(cache_key, task, make_kernel, schedule)
    _warm_up(ck, fn, state, task.train_data, args)
    t0 = time.perf_counter()
    final, samples = run_chain(fn, state, chain_key, task.train_data, args, schedule)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    if final_info is not None:
        hp = {**hp, **final_info(final)}
    return _finalise(task, samples, [0] * schedule.num_samples, split, cfg, schedule.num_steps, seconds, hp)


def _run_members(task, key, cfg, split, hp, cache_key, make_kernel, init_state: Callable, args) -> MethodResult:
    """K ensemble members of G/K steps each (member m: init fold_in(init_key, m), chain fold_in(chain_key, m));
    the final parameters of each member are one sample."""
    schedule = cfg.schedule("deep_ensemble")
    steps, k = schedule.num_steps, cfg.num_samples
    init_key, chain_key = _keys(key)

    def init(m):
        return init_state(task.init_params(jax.random.fold_in(init_key, m)))

    ck, fn = _chunk_fn(cache_key, task, make_kernel, schedule)
    for m in range(min(k, len(jax.local_devices()))):
        _warm_up(ck, fn, init(0), task.train_data, args, member_device(m))
    t0 = time.perf_counter()
    members = []
    for m in range(k):  # member m on member_device(m); dispatch is asynchronous, so devices overlap
        dev = member_device(m)
        state, member_key, member_args = jax.device_put((init(m), jax.random.fold_in(chain_key, m), args), dev)
        _, sample = run_chain(fn, state, member_key, on_device(task.train_data, dev), member_args, schedule)
        members.append(sample)
    home = jax.local_devices()[0]
    samples = jax.tree.map(lambda *xs: jnp.concatenate([jax.device_put(x, home) for x in xs]), *members)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    return _finalise(task, samples, list(range(k)), split, cfg, steps * k, seconds, hp, num_chains=k)


# --------------------------------------------------------------------------- minibatch methods


def run_sghmc(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One SGHMC chain of G steps; K samples `cfg.sample_thinning` steps apart ending at step G."""
    friction = float(hp.get("friction", cfg.grid.sghmc_frictions[0]))
    hp = {**hp, "friction": friction, "thinning": cfg.sample_thinning}
    init = l2e.sghmc(task.posterior, 1.0, friction).init
    args = {**_args(hp), "friction": jnp.asarray(friction, jnp.float32)}
    return _run_single_chain(task, key, hp, cfg, split, "sghmc", ("sghmc",),
                             lambda: _sghmc_kernel(task), init, args)


def run_csghmc(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One cyclical-SGHMC chain of G steps with M = cfg.cycles cycles; a sample at the end of each of the
    last K cycles (the last step of a cycle is in its sampling phase)."""
    g = cfg.grid
    static = (cfg.num_steps, cfg.cycles, g.csghmc_exploration_ratio, g.csghmc_momentum_decay)
    hp = {**hp, "num_cycles": cfg.cycles, "exploration_ratio": g.csghmc_exploration_ratio,
          "momentum_decay": g.csghmc_momentum_decay}
    init = l2e.cyclical_sghmc(task.posterior, 1.0, *static[:2], static[2], static[3]).init
    return _run_single_chain(task, key, hp, cfg, split, "csghmc", ("csghmc",) + static,
                             lambda: _csghmc_kernel(task, *static), init, _args(hp))


def run_l2e(task, key, hp: dict, cfg, split="test") -> MethodResult:
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


def run_psgld(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One pSGLD chain (RMSprop preconditioner, Γ dropped; BASELINES §4) of G steps, same sample schedule as
    SGHMC; lr in mean-loss units, ρ and λ from the grid."""
    rho, lam = cfg.grid.psgld_rho, cfg.grid.psgld_lam
    hp = {**hp, "rho": rho, "lam": lam, "thinning": cfg.sample_thinning, "temperature": 1.0}
    init = l2e.psgld(task.posterior, 1.0, rho, lam).init
    return _run_single_chain(task, key, hp, cfg, split, "psgld", ("psgld", rho, lam),
                             lambda: _psgld_kernel(task, rho, lam), init, _args(hp))


def _median_distance(x: np.ndarray, max_points: int = 500) -> float:
    """Median pairwise Euclidean distance among the first `max_points` rows of x (flattened): the RBF
    lengthscale of fSGHMC's GP prior (median heuristic; the paper's type-II-ML fit is not reproduced)."""
    z = np.asarray(x[:max_points], np.float64).reshape(min(len(x), max_points), -1)
    d2 = np.sum(z**2, 1)[:, None] + np.sum(z**2, 1)[None, :] - 2.0 * z @ z.T
    iu = np.triu_indices(len(z), 1)
    med = float(np.median(np.sqrt(np.maximum(d2[iu], 0.0)))) if len(z) > 1 else 1.0
    return med if med > 0 else 1.0


def fsghmc_posterior(task, cfg) -> tuple[l2e.FunctionalPosterior, dict]:
    """The functional posterior of fSGHMC on `task` and a record of its settings.

    GP prior (BASELINES §5): RBF kernel, lengthscale = median pairwise training-input distance, variance
    grid.fsghmc_kernel_variance, zero mean.  Regression: a GP on the predicted mean (loc) function; M
    measurement points = M − M//2 training inputs (without replacement) + M//2 uniform points in the bounding box
    of the training inputs.  Classification: one independent GP per class (logit) with the shared RBF kernel
    (one Cholesky per step); M training inputs without replacement.  Points are redrawn every step from the step
    key.  Jitter grid.fsghmc_jitter × mean(diag K).  With grid.fsghmc_weight_prior the task's Gaussian weight
    prior is added (flagged deviation: without it the θ-target is improper, and the regression scale head has
    no prior at all)."""
    g = cfg.grid
    x_train = task.train_data[0]
    n = task.data_size
    m = min(g.fsghmc_measurement_points, n)
    lengthscale = _median_distance(np.asarray(x_train))
    kernel = l2e.rbf_kernel(lengthscale, g.fsghmc_kernel_variance)
    if is_regression(task):
        lo, hi = jnp.min(x_train, axis=0), jnp.max(x_train, axis=0)
        m_u = m // 2

        def sampler(key, batch):
            k1, k2 = jax.random.split(key)
            idx = jax.random.choice(k1, n, (m - m_u,), replace=False)
            u = jax.random.uniform(k2, (m_u, x_train.shape[1]), x_train.dtype, lo, hi)
            return jnp.concatenate([x_train[idx], u])

        apply_fn = lambda p, x: task.apply(p, x)[0]  # noqa: E731
        where = f"{m - m_u} training inputs + {m_u} uniform in the training box; GP on the mean (loc)"
    else:
        def sampler(key, batch):
            return x_train[jax.random.choice(key, n, (m,), replace=False)]

        apply_fn = task.logits
        where = f"{m} training inputs; one GP per class (logit), shared kernel"
    post = l2e.functional_posterior(apply_fn, task.nll, sampler, kernel, n, jitter=g.fsghmc_jitter,
                                    weight_log_prior=task.log_prior if g.fsghmc_weight_prior else None)
    record = {"kernel": "rbf", "lengthscale": lengthscale, "kernel_variance": g.fsghmc_kernel_variance,
              "lengthscale_rule": "median pairwise distance of the training inputs",
              "measurement_points": m, "measurement_points_from": where, "jitter": g.fsghmc_jitter,
              "weight_prior": g.fsghmc_weight_prior}
    return post, record


def _step_cost(task, cfg, posterior, friction: float, lr: float) -> dict:
    """Median seconds of one jitted fSGHMC step and one SGHMC step (same minibatch, same lr, friction)."""
    from evaluate.diagnostics import time_per_step

    key = (task.spec, cfg.batch_size, cfg.grid)
    if key not in _STEP_COST:
        params = task.init_params(jax.random.PRNGKey(0))
        batch = task.sample_batch(jax.random.PRNGKey(1), task.train_data, cfg.batch_size)
        f_alg, s_alg = l2e.fsghmc(posterior, lr, friction), l2e.sghmc(task.posterior, lr, friction)
        k = jax.random.PRNGKey(2)
        t_f = time_per_step(f_alg.step, k, f_alg.init(params), batch, num_repeats=10)
        t_s = time_per_step(s_alg.step, k, s_alg.init(params), batch, num_repeats=10)
        _STEP_COST[key] = {"seconds_per_step": t_f, "sghmc_seconds_per_step": t_s,
                           "seconds_per_step_vs_sghmc": t_f / t_s}
    return _STEP_COST[key]


def run_fsghmc(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """One functional-SGHMC chain (GP prior at measurement points redrawn each step, see `fsghmc_posterior`) of
    G steps, same sample schedule as SGHMC; friction grid.fsghmc_friction.  hyperparameters record the GP settings,
    whether every Cholesky factor was finite, and the cost per step relative to an SGHMC step."""
    friction = float(cfg.grid.fsghmc_friction)
    posterior, record = fsghmc_posterior(task, cfg)
    hp = {**hp, "friction": friction, "thinning": cfg.sample_thinning, "gp_prior": record,
          **_step_cost(task, cfg, posterior, friction, float(hp["learning_rate"]))}
    init = l2e.fsghmc(posterior, 1.0, friction).init
    return _run_single_chain(task, key, hp, cfg, split, "fsghmc", ("fsghmc", friction, cfg.grid),
                             lambda: _fsghmc_kernel(posterior, friction), init, _args(hp),
                             final_info=lambda s: {"cholesky_ok": bool(s.chol_ok)})


def run_deep_ensemble(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """K members, each from its own init and minibatch sequence, trained for G/K steps of SGD with
    momentum and cosine decay on the MAP objective; each member's final parameters are one sample."""
    steps = cfg.schedule("deep_ensemble").num_steps
    momentum = cfg.grid.de_momentum
    hp = {**hp, "optimizer": f"sgd(momentum={momentum}) + cosine decay to 0", "steps_per_member": steps,
          "members": cfg.num_samples}
    opt = _de_optimizer(1.0, steps, momentum)  # the state's structure does not depend on lr
    return _run_members(task, key, cfg, split, hp, ("deep_ensemble", steps, momentum),
                        lambda: _de_kernel(task, steps, momentum), lambda p: DEState(p, opt.init(p)), _args(hp))


def run_noisy_de(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """The "unbiased" deep ensemble (BASELINES §7, parallel SGHMC): the DE pipeline (K members, same inits,
    minibatch keys, G/K steps, momentum and cosine-decayed lr) with the SGHMC noise of T = 1 added to the
    velocity (`_noisy_de_kernel`); the last iterate of each member is one sample."""
    steps = cfg.schedule("deep_ensemble").num_steps
    momentum = cfg.grid.de_momentum
    hp = {**hp, "optimizer": f"SGHMC in SGD-momentum form (momentum={momentum}, T=1) + cosine decay to 0",
          "steps_per_member": steps, "members": cfg.num_samples, "temperature": 1.0}

    def init(p):
        return NoisyDEState(p, jax.tree.map(jnp.zeros_like, p), jnp.zeros((), jnp.int32))

    return _run_members(task, key, cfg, split, hp, ("noisy_de", steps, momentum),
                        lambda: _noisy_de_kernel(task, steps, momentum), init, _args(hp))


# --------------------------------------------------------------------------- full-batch methods


def _chain_major_to_round_robin(samples, num_chains: int, num_draws: int):
    """Leaves (C, S, ...) -> (S·C, ...) in round-robin order (draw s of every chain, then s + 1) and the
    chain id of each (METRICS §5 collection order for several chains)."""
    flat = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1).reshape((num_draws * num_chains,) + a.shape[2:]), samples)
    return flat, [c for _ in range(num_draws) for c in range(num_chains)]


def _num_chains(tree) -> int:
    return int(jax.tree.leaves(tree)[0].shape[0])


def run_mile(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """MILE (BASELINES §6): `l2e.mclmc.mile` from each deep-ensemble member (hp["init_positions"], leaves
    (chains, ...)) with ε₀ = the DE learning rate (hp["step_size0"]); warm-up cfg.mile_steps = (n₁, n₂, n₃), then
    cfg.mile_samples draws per chain cfg.mile_thinning steps apart.  Chains are vmapped in one compiled call
    (compiled ahead of time, so seconds exclude compilation).  grad_evals = full-batch gradients, all chains."""
    init_positions = hp["init_positions"]
    chains = _num_chains(init_positions)
    _, chain_key = _keys(key)
    keys = jax.random.split(chain_key, chains)
    steps, draws, thin = tuple(cfg.mile_steps), cfg.mile_samples, cfg.mile_thinning
    eps0 = jnp.asarray(float(hp["step_size0"]), jnp.float32)
    mesh = population_mesh(chains)  # the chain axis sharded over the devices (plain jit on one device)
    if mesh.size > 1:
        init_positions, keys = shard_population((init_positions, keys), mesh)
        eps0 = replicate(eps0, mesh)
    ck = ("mile", task.spec, steps, draws, thin, chains, mesh)
    if ck not in _FULL_BATCH:
        def one(p, k, e):
            return l2e.mile(task.log_density, p, k, e, num_steps=steps, num_samples=draws, thinning=thin)

        _FULL_BATCH[ck] = jax.jit(jax.vmap(one, in_axes=(0, 0, None))).lower(init_positions, keys, eps0).compile()
    t0 = time.perf_counter()
    samples, info = _FULL_BATCH[ck](init_positions, keys, eps0)
    jax.block_until_ready(samples)
    seconds = time.perf_counter() - t0
    if mesh.size > 1:  # gathered on the default device for prediction
        samples = jax.device_put(samples, jax.local_devices()[0])
    record = {k: v for k, v in hp.items() if k not in ("init_positions",)}
    record.update({"chains": chains, "num_steps": list(steps), "samples_per_chain": draws, "thinning": thin,
                   "L": np.asarray(info.L).tolist(), "step_size": np.asarray(info.step_size).tolist(),
                   "num_nan_warmup": np.asarray(info.num_nan_warmup).tolist(),
                   "num_nan_sampling": np.asarray(info.num_nan_sampling).tolist(),
                   "eevpd_sampling": np.asarray(info.eevpd_sampling).tolist()})
    flat, chain_ids = _chain_major_to_round_robin(samples, chains, draws)
    grads = int(np.sum(np.asarray(info.num_grad_evals)))
    return _finalise(task, flat, chain_ids, split, cfg, grads, seconds, record, num_chains=chains,
                     gradient="full-batch")


def run_nuts_bde(task, key, hp: dict, cfg, split="test") -> MethodResult:
    """NUTS-BDE (Sommer et al. 2024; BASELINES §6/§8): full-batch NUTS (`l2e.nuts.nuts_chains`, Stan window
    adaptation) from each deep-ensemble member (hp["init_positions"]); cfg.nuts_warmup adaptation transitions,
    then cfg.nuts_samples draws per chain cfg.nuts_thinning transitions apart.  grad_evals = leapfrog steps
    (full-batch gradients) of warm-up + sampling, all chains; seconds = the chains' wall time (nuts_chains jits
    per call: the first chain's time includes compilation)."""
    from l2e.nuts import nuts_chains

    init_positions = hp["init_positions"]
    chains = _num_chains(init_positions)
    _, chain_key = _keys(key)
    draws = cfg.nuts_samples
    samples, info = nuts_chains(task.log_density, init_positions, chain_key, cfg.nuts_warmup, draws,
                                cfg.nuts_thinning, max_num_doublings=cfg.nuts_max_doublings)
    record = {k: v for k, v in hp.items() if k not in ("init_positions",)}
    record.update({"chains": chains, "warmup": cfg.nuts_warmup, "samples_per_chain": draws,
                   "thinning": cfg.nuts_thinning, "max_num_doublings": cfg.nuts_max_doublings,
                   "step_size": info.step_size.tolist(),
                   "acceptance_rate": info.acceptance_rate.tolist(),
                   "num_divergent_transitions": info.num_divergent.tolist(),
                   "seconds_include_compilation": True})
    flat, chain_ids = _chain_major_to_round_robin(samples, chains, draws)
    return _finalise(task, flat, chain_ids, split, cfg, int(np.sum(info.num_grad_evals)),
                     float(np.sum(info.seconds)), record, num_chains=chains, gradient="full-batch")


# --------------------------------------------------------------------------- loss barrier


def barrier_entry(task, res: MethodResult, cfg, num_points: int = 21) -> dict | None:
    """METRICS §4 on one individual network (not the BMA) along θ(λ) = (1 − λ)θ_a + λθ_b, λ on `num_points`
    points: test error (classification) or RMSE (regression) and mean test NLL, on the first
    cfg.barrier_examples test examples.  Pair: first and last sample of the first non-divergent chain with ≥ 2
    samples, or (one sample per chain, e.g. ensembles) the first two finite members.  None if no pair exists."""
    if res.samples is None or res.num_finite < 2:
        return None
    ids = np.asarray(res.chain_ids)
    per_chain = {c: np.flatnonzero(ids == c) for c in np.unique(ids)}
    multi = [c for c, idx in per_chain.items() if len(idx) >= 2]
    if multi:
        c = multi[0]
        ia, ib = int(per_chain[c][0]), int(per_chain[c][-1])
        pair = f"first and last sample of chain {c}"
    else:
        (ca, ia_), (cb, ib_) = list(per_chain.items())[:2]
        ia, ib = int(ia_[0]), int(ib_[0])
        pair = f"members {ca} and {cb}"
    lams = np.linspace(0.0, 1.0, num_points)
    t = jnp.asarray(lams, jnp.float32)
    path = jax.tree.map(lambda a: (1 - t).reshape((-1,) + (1,) * (a.ndim - 1)) * a[ia]
                        + t.reshape((-1,) + (1,) * (a.ndim - 1)) * a[ib], res.samples)
    x, y = split_data(task, "test")
    m = min(int(cfg.barrier_examples), int(x.shape[0]))
    out = predict_outputs(task, path, x[:m], cfg.eval_batch).astype(np.float64)
    y = np.asarray(y[:m])
    if is_regression(task):
        loc, scale = out[..., 0], np.clip(out[..., 1], 1e-6, 1e6)
        err = np.sqrt(np.mean((y[None] - loc) ** 2, axis=1))
        nll = np.mean(0.5 * np.log(2 * np.pi) + np.log(scale) + 0.5 * ((y[None] - loc) / scale) ** 2, axis=1)
        err_name = "rmse"
    else:
        yi = y.astype(np.int64)
        err = 1.0 - np.mean(np.argmax(out, -1) == yi[None], axis=1)
        nll = -np.mean(out[:, np.arange(m), yi], axis=1)
        err_name = "test error"

    def barrier(losses):
        b = float(np.max(losses - ((1 - lams) * losses[0] + lams * losses[-1])))
        return b if math.isfinite(b) else None

    clean = lambda a: [float(v) if math.isfinite(v) else None for v in a]  # noqa: E731
    return {"lambdas": lams.tolist(), "error": clean(err), "nll": clean(nll), "error_barrier": barrier(err),
            "nll_barrier": barrier(nll), "pair": pair, "error_metric": err_name, "test_examples": m}


RUNNERS: dict[str, Callable[..., MethodResult]] = {
    "l2e": run_l2e,
    "sghmc": run_sghmc,
    "csghmc": run_csghmc,
    "psgld": run_psgld,
    "fsghmc": run_fsghmc,
    "deep_ensemble": run_deep_ensemble,
    "noisy_de": run_noisy_de,
    "mile": run_mile,
    "nuts_bde": run_nuts_bde,
}


def run_method(method: str, task, key, hp: dict, cfg, split="test") -> MethodResult:
    """Dispatch to run_<method>."""
    return RUNNERS[method](task, key, hp, cfg, split)
