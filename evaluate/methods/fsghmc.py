"""Functional SGHMC (BASELINES §5): SGHMC on the function-space posterior of a GP prior evaluated at measurement
points redrawn every update; one chain of G updates with the SGHMC sample schedule."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, check_positive, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain
from l2e.io import ConfigError

__all__ = ["FSGHMCSettings", "METHOD", "fsghmc_posterior", "run_fsghmc"]


@dataclasses.dataclass(frozen=True)
class FSGHMCSettings:
    """lrs: learning rates (ε²·N); friction: C; measurement_points: M per update; kernel_variance: RBF variance;
    jitter: relative jitter; weight_prior: add the task's weight prior (flagged deviation, see fsghmc_posterior)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    friction: float = 10.0
    measurement_points: int = 40
    kernel_variance: float = 1.0
    jitter: float = 1e-3
    weight_prior: bool = True

    def __post_init__(self):
        check_grid(self, "settings.fsghmc", "lrs")
        check_positive(self, "settings.fsghmc", "friction", "kernel_variance", "jitter")
        if self.measurement_points < 1:
            raise ConfigError(f"settings.fsghmc.measurement_points must be a positive integer, got "
                              f"{self.measurement_points}")


def _median_distance(x: np.ndarray, max_points: int = 500) -> float:
    """Median pairwise Euclidean distance among the first `max_points` rows of x (flattened): the RBF
    lengthscale of fSGHMC's GP prior (median heuristic; the paper's type-II-ML fit is not reproduced)."""
    z = np.asarray(x[:max_points], np.float64).reshape(min(len(x), max_points), -1)
    d2 = np.sum(z**2, 1)[:, None] + np.sum(z**2, 1)[None, :] - 2.0 * z @ z.T
    iu = np.triu_indices(len(z), 1)
    med = float(np.median(np.sqrt(np.maximum(d2[iu], 0.0)))) if len(z) > 1 else 1.0
    return med if med > 0 else 1.0


def _regression_points(task, m: int):
    """A GP on the predicted mean (loc): M − M//2 training inputs (without replacement) + M//2 uniform points in
    the bounding box of the training inputs."""
    x_train, n = task.train_data[0], task.data_size
    lo, hi = jnp.min(x_train, axis=0), jnp.max(x_train, axis=0)
    m_u = m // 2

    def sampler(key, batch):
        k1, k2 = jax.random.split(key)
        idx = jax.random.choice(k1, n, (m - m_u,), replace=False)
        u = jax.random.uniform(k2, (m_u, x_train.shape[1]), x_train.dtype, lo, hi)
        return jnp.concatenate([x_train[idx], u])

    where = f"{m - m_u} training inputs + {m_u} uniform in the training box; GP on the mean (loc)"
    return sampler, (lambda p, x: task.apply(p, x)[0]), where


def _classification_points(task, m: int):
    """One independent GP per class (logit), shared kernel; M training inputs without replacement."""
    x_train, n = task.train_data[0], task.data_size

    def sampler(key, batch):
        return x_train[jax.random.choice(key, n, (m,), replace=False)]

    return sampler, task.logits, f"{m} training inputs; one GP per class (logit), shared kernel"


_FUNCTION_SPACE = {"regression": _regression_points, "classification": _classification_points}
"""task.kind -> (task, M) -> (measurement-point sampler, function whose outputs get the GP prior, description)."""


def fsghmc_posterior(task, s: FSGHMCSettings) -> tuple[l2e.FunctionalPosterior, dict]:
    """The functional posterior of fSGHMC on `task` and a record of its settings.

    GP prior (BASELINES §5): RBF kernel, lengthscale = median pairwise training-input distance, variance
    s.kernel_variance, zero mean, on the outputs and measurement points of `_FUNCTION_SPACE[task.kind]`; points
    are redrawn every update from the update's key.  Jitter s.jitter × mean(diag K).  With s.weight_prior the
    task's Gaussian weight prior is added (flagged deviation: without it the θ-target is improper, and the
    regression scale head has no prior at all)."""
    m = min(s.measurement_points, task.data_size)
    lengthscale = _median_distance(np.asarray(task.train_data[0]))
    kernel = l2e.rbf_kernel(lengthscale, s.kernel_variance)
    sampler, apply_fn, where = _FUNCTION_SPACE[task.kind](task, m)
    post = l2e.functional_posterior(apply_fn, task.nll, sampler, kernel, task.data_size, jitter=s.jitter,
                                    weight_log_prior=task.log_prior if s.weight_prior else None)
    record = {"kernel": "rbf", "lengthscale": lengthscale, "kernel_variance": s.kernel_variance,
              "lengthscale_rule": "median pairwise distance of the training inputs",
              "measurement_points": m, "measurement_points_from": where, "jitter": s.jitter,
              "weight_prior": s.weight_prior}
    return post, record


def _step_cost(ctx, posterior, friction: float, lr: float) -> dict:
    """Median seconds of one jitted fSGHMC step and one SGHMC step (same minibatch, lr, friction)."""
    from evaluate.diagnostics import time_per_step

    task, cfg = ctx.task, ctx.cfg

    def measure():
        params = task.init_params(jax.random.PRNGKey(0))
        batch = task.sample_batch(jax.random.PRNGKey(1), task.train_data, cfg.batch_size)
        f_alg, s_alg = l2e.fsghmc(posterior, lr, friction), l2e.sghmc(task.posterior, lr, friction)
        k = jax.random.PRNGKey(2)
        t_f = time_per_step(f_alg.step, k, f_alg.init(params), batch, num_repeats=10)
        t_s = time_per_step(s_alg.step, k, s_alg.init(params), batch, num_repeats=10)
        return {"seconds_per_step": t_f, "sghmc_seconds_per_step": t_s, "seconds_per_step_vs_sghmc": t_f / t_s}

    return ctx.cache.get(("step_cost", task.spec, cfg.batch_size, ctx.settings), measure)


def _kernel(posterior, friction: float):
    step = l2e.fsghmc.build_kernel(posterior)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["lr"], friction)

    return kernel


def run_fsghmc(ctx, key, hp: dict):
    """One fSGHMC chain; hp: learning_rate.  The record holds the GP settings, whether every Cholesky factor was
    finite, and the cost per update relative to an SGHMC update."""
    s = ctx.settings
    friction = float(s.friction)
    posterior, record = fsghmc_posterior(ctx.task, s)
    hp = {**hp, "friction": friction, "thinning": ctx.cfg.sample_thinning, "gp_prior": record,
          **_step_cost(ctx, posterior, friction, float(hp["learning_rate"]))}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("fsghmc", friction, s),
                            lambda: _kernel(posterior, friction), l2e.fsghmc.init, lr_args(hp),
                            final_info=lambda st: {"cholesky_ok": bool(st.chol_ok)})


METHOD = Method("fsghmc", FSGHMCSettings, run_fsghmc, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg))
