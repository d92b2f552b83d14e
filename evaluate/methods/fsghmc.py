"""Functional SGHMC (docs/samplers.md, Functional SGLD / SGHMC): SGHMC (position first, `l2e.fsghmc`) on the function-space posterior of a GP
prior evaluated at measurement points; one chain of G updates with the SGHMC sample schedule.

The GP prior as docs/samplers.md, Functional SGLD / SGHMC specifies it:
- kernel: RBF, hyperparameters fitted by type-II maximum likelihood on training data, then frozen (`fit_gp`):
  regression — a GP regression of the standardised targets (lengthscale, variance, noise variance; zero mean);
  classification — the Dirichlet-based GP of Milios et al. (2018): labels become per-class targets
  ỹ_c = log α_c − σ̃_c²/2 with α_c = 1[y = c] + α_ε (α_ε = 0.01), σ̃_c² = log(1/α_c + 1), fitted as a
  heteroscedastic GP regression (fixed noise σ̃_c²) with one RBF shared by the classes and a constant mean per
  class; the prior on logit c is then GP(m_c, k).  Fit: Adam (lr 0.05) for `kernel_fit_steps` full-batch steps on a
  fixed random subset of at most `kernel_fit_points` training points (numpy default_rng(0)), in float64.
  kernel_fit_steps = 0 is the spec's "fixed GP" ablation: median-distance lengthscale, variance kernel_variance,
  zero mean.
- measurement points (`measurement_points` = 0, the paper's rule): regression with 1-D inputs — 40 training inputs
  drawn with replacement + 40 uniform in the training inputs' box, per update; other regression — all training
  inputs if N < 1000 (fixed: the kernel matrix is inverted once), else 1000 random training inputs per update;
  classification — 40 random training inputs per update.  measurement_points = M > 0 overrides: M per update
  (regression: M − M//2 training inputs + M//2 uniform in the box; classification: M training inputs).
- jitter: `jitter` × mean diag K, escalated ×10 while the Cholesky factor is not finite (l2e.fsgmcmc).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, check_positive, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain
from base.io import ConfigError

__all__ = ["DIRICHLET_ALPHA", "FSGHMCSettings", "METHOD", "fit_gp", "fsghmc_posterior", "run_fsghmc"]

DIRICHLET_ALPHA = 0.01
FIT_LR = 0.05


@dataclasses.dataclass(frozen=True)
class FSGHMCSettings:
    """lrs: learning rates (ε²·N); friction: C; measurement_points: 0 = the paper's rule per task, M > 0 = M per
    update (see the module docstring); kernel_fit_steps / kernel_fit_points: type-II ML fit of the GP (0 steps: the
    fixed GP, median-distance lengthscale and variance kernel_variance); jitter: initial relative jitter;
    weight_prior: add the task's weight prior (flagged deviation, see fsghmc_posterior)."""

    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    friction: float = 10.0
    measurement_points: int = 0
    kernel_fit_steps: int = 100
    kernel_fit_points: int = 500
    kernel_variance: float = 1.0
    jitter: float = 1e-6
    weight_prior: bool = True

    def __post_init__(self):
        check_grid(self, "settings.fsghmc", "lrs")
        check_positive(self, "settings.fsghmc", "friction", "kernel_variance", "jitter")
        for name, low in (("measurement_points", 0), ("kernel_fit_steps", 0), ("kernel_fit_points", 2)):
            if getattr(self, name) < low:
                raise ConfigError(f"settings.fsghmc.{name} must be an integer ≥ {low}, got {getattr(self, name)}")


def _median_distance(x: np.ndarray, max_points: int = 500) -> float:
    """Median pairwise Euclidean distance among the first `max_points` rows of x (flattened)."""
    z = np.asarray(x[:max_points], np.float64).reshape(min(len(x), max_points), -1)
    d2 = np.sum(z**2, 1)[:, None] + np.sum(z**2, 1)[None, :] - 2.0 * z @ z.T
    iu = np.triu_indices(len(z), 1)
    med = float(np.median(np.sqrt(np.maximum(d2[iu], 0.0)))) if len(z) > 1 else 1.0
    return med if med > 0 else 1.0


def _rbf(x1, x2, lengthscale, variance):
    d2 = jnp.sum(x1**2, -1)[:, None] + jnp.sum(x2**2, -1)[None, :] - 2.0 * x1 @ x2.T
    return variance * jnp.exp(-0.5 * jnp.maximum(d2, 0.0) / lengthscale**2)


def _neg_log_marginal(p, x, targets, noise):
    """Σ_c −log N(targets_c | m_c, K + diag(noise_c)); targets / noise (n, C), p: log_ls, log_var, mean (C,) and,
    if noise is None, log_noise (one learned homoscedastic noise variance)."""
    kmat = _rbf(x, x, jnp.exp(p["log_ls"]), jnp.exp(p["log_var"]))
    noise = jnp.broadcast_to(jnp.exp(p["log_noise"]), targets.shape) if noise is None else noise

    def one(t, s):
        chol = jnp.linalg.cholesky(kmat + jnp.diag(s + 1e-8))
        alpha = jax.scipy.linalg.cho_solve((chol, True), t)
        return 0.5 * t @ alpha + jnp.sum(jnp.log(jnp.diagonal(chol))) + 0.5 * t.shape[0] * jnp.log(2 * jnp.pi)

    return jnp.sum(jax.vmap(one, in_axes=(1, 1))(targets - p["mean"], noise))


def _adam(loss, p0: dict, data: tuple, steps: int):
    """(parameters, final loss) after `steps` full-batch Adam steps (lr FIT_LR) of loss(p, *data), float64, in one
    jitted scan (data passed as arguments, not folded into the program as constants)."""
    def run(p, *data):
        def step(carry, t):
            p, m, v = carry
            g = jax.grad(loss)(p, *data)
            m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
            v = jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
            p = jax.tree.map(lambda x, a, b: x - FIT_LR * (a / (1 - 0.9**t)) / (jnp.sqrt(b / (1 - 0.999**t)) + 1e-8),
                             p, m, v)
            return (p, m, v), None

        zeros = jax.tree.map(jnp.zeros_like, p)
        (p, _, _), _ = jax.lax.scan(step, (p, zeros, zeros), jnp.arange(1.0, steps + 1))
        return p, loss(p, *data)

    p, value = jax.jit(run)(p0, *data)
    return p, float(value)


def _train_and_box(task, m_train: int, m_box: int, replace: bool):
    """sampler(key, batch) -> m_train random training inputs (with or without replacement) + m_box uniform in the
    training inputs' box."""
    x_train, n = task.train_data[0], task.data_size
    lo, hi = jnp.min(x_train, axis=0), jnp.max(x_train, axis=0)

    def sampler(key, batch):
        k1, k2 = jax.random.split(key)
        idx = jax.random.choice(k1, n, (m_train,), replace=replace)
        u = jax.random.uniform(k2, (m_box,) + x_train.shape[1:], x_train.dtype, lo, hi)
        return jnp.concatenate([x_train[idx], u])

    return sampler


class _DirichletGP:
    """Classification: the Dirichlet-based GP (Milios et al. 2018) on every logit, fixed heteroscedastic noise and a
    constant mean per class; measurement points: random training inputs."""

    note = "; Dirichlet-based GP targets (alpha_eps 0.01)"

    @staticmethod
    def outputs(task) -> int:
        return task.num_classes

    @staticmethod
    def problem(x, y: np.ndarray, lengthscale: float, outputs: int):
        """(initial parameters, data, loss) of the type-II ML fit (called with 64-bit jax enabled)."""
        alpha = np.eye(outputs)[y.astype(int)] + DIRICHLET_ALPHA
        noise = jnp.asarray(np.log(1.0 / alpha + 1.0))
        targets = jnp.asarray(np.log(alpha)) - 0.5 * noise
        p0 = {"log_ls": jnp.log(lengthscale), "log_var": jnp.log(jnp.var(targets)), "mean": targets.mean(0)}
        return p0, (x, targets, noise), _neg_log_marginal

    @staticmethod
    def fitted(p) -> tuple[list, dict]:
        """(the prior mean per output, further fitted values) of the fitted parameters."""
        return np.asarray(p["mean"]).tolist(), {}

    @staticmethod
    def function(task, fit: dict):
        """(params, x) -> the function values under the GP prior (logits (B, C)), and the prior mean or None."""
        mean = jnp.asarray(fit["mean"], jnp.float32)
        prior_mean = None if not np.any(fit["mean"]) else (lambda x: jnp.broadcast_to(mean, (x.shape[0], mean.size)))
        return task.logits, prior_mean

    @staticmethod
    def points(task, m_setting: int):
        m = min(m_setting or 40, task.data_size)
        return _train_and_box(task, m, 0, False), None, f"{m} random training inputs per update"


class _RegressionGP:
    """Regression: a zero-mean GP regression of the standardised targets with a learned noise variance on the
    predicted mean; measurement points: the 1-D / UCI rules (module doc)."""

    note = ""

    @staticmethod
    def outputs(task) -> int:
        return 1

    @staticmethod
    def problem(x, y: np.ndarray, lengthscale: float, outputs: int):
        targets = jnp.asarray(y, jnp.float64)[:, None]
        p0 = {"log_ls": jnp.log(lengthscale), "log_var": jnp.log(jnp.var(targets)),
              "log_noise": jnp.log(0.1 * jnp.var(targets))}
        loss = lambda p, x, t: _neg_log_marginal({**p, "mean": jnp.zeros(1)}, x, t, None)  # noqa: E731
        return p0, (x, targets), loss

    @staticmethod
    def fitted(p) -> tuple[list, dict]:
        return [0.0], {"noise_variance": float(jnp.exp(p["log_noise"]))}

    @staticmethod
    def function(task, fit: dict):
        return (lambda p, x: task.apply(p, x)[0]), None

    @staticmethod
    def points(task, m_setting: int):
        x_train, n = task.train_data[0], task.data_size
        if m_setting:
            m = min(m_setting, n)
            return (_train_and_box(task, m - m // 2, m // 2, False), None,
                    f"{m - m // 2} training inputs + {m // 2} uniform in the training box per update")
        if task.input_shape == (1,):
            return (_train_and_box(task, 40, 40, True), None,
                    "40 training inputs (with replacement) + 40 uniform in the training box per update (1-D rule)")
        if n < 1000:
            return (lambda key, batch: x_train), x_train, f"all {n} training inputs, fixed (UCI rule, N < 1000)"
        return _train_and_box(task, 1000, 0, False), None, "1000 random training inputs per update (UCI rule, N ≥ 1000)"


_GP_PRIORS = {"classification": _DirichletGP, "regression": _RegressionGP}
"""fSGHMC's GP prior by the task's likelihood kind: what it is on, how it is fitted, where it is measured."""


def fit_gp(task, s: FSGHMCSettings) -> dict:
    """The GP prior's hyperparameters (see the module docstring): {"lengthscale", "variance", "mean" (list, one per
    output), "noise_variance" (regression fit) , "nlml", "fit"}."""
    gp = _GP_PRIORS[task.kind]
    x_all, y_all = (np.asarray(a) for a in task.train_data)
    lengthscale = _median_distance(x_all)
    outputs = gp.outputs(task)
    if s.kernel_fit_steps == 0:
        return {"lengthscale": lengthscale, "variance": s.kernel_variance, "mean": [0.0] * outputs,
                "fit": "none (fixed GP: median-distance lengthscale, variance kernel_variance, zero mean)"}
    n = min(s.kernel_fit_points, len(x_all))
    idx = np.sort(np.random.default_rng(0).permutation(len(x_all))[:n])
    with jax.enable_x64(True):
        x = jnp.asarray(x_all[idx].reshape(n, -1), jnp.float64)
        p0, data, loss = gp.problem(x, y_all[idx], lengthscale, outputs)
        p, nlml = _adam(loss, jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), p0), data, s.kernel_fit_steps)
        mean, extra = gp.fitted(p)
        fit = {"lengthscale": float(jnp.exp(p["log_ls"])), "variance": float(jnp.exp(p["log_var"])),
               "mean": mean, "nlml": nlml,
               "fit": f"type-II ML: Adam lr {FIT_LR}, {s.kernel_fit_steps} full-batch steps on {n} training points, "
                      "float64" + gp.note, **extra}
    return fit


def fsghmc_posterior(task, s: FSGHMCSettings, fit: dict | None = None) -> tuple[l2e.FunctionalPosterior, dict]:
    """The functional posterior of fSGHMC on `task` and a record of its settings (`fit`: a `fit_gp` result, computed
    here if None).  The GP is on the regression mean (loc) or on every logit; with s.weight_prior the task's Gaussian
    weight prior is added (flagged deviation: without it the θ-target is improper, and the regression scale head has
    no prior at all)."""
    gp = _GP_PRIORS[task.kind]
    fit = fit_gp(task, s) if fit is None else fit
    kernel = l2e.fsghmc.rbf_kernel(fit["lengthscale"], fit["variance"])
    sampler, fixed, where = gp.points(task, s.measurement_points)
    apply_fn, prior_mean = gp.function(task, fit)
    post = l2e.fsghmc.functional_posterior(apply_fn, task.nll, sampler, kernel, task.data_size, prior_mean=prior_mean,
                                           jitter=s.jitter,
                                           weight_log_prior=task.log_prior if s.weight_prior else None,
                                           fixed_points=fixed)
    record = {"kernel": "rbf", **fit, "measurement_points_from": where, "jitter": s.jitter,
              "jitter_rule": "× mean diag K, ×10 while the Cholesky factor is not finite", "weight_prior": s.weight_prior}
    if fixed is not None:
        record["fixed_points_jitter"] = float(post.fixed.jitter)
    return post, record


def _step_cost(ctx, posterior, friction: float, lr: float) -> dict:
    """Median seconds of one jitted fSGHMC step and one SGHMC step (same minibatch, lr, friction)."""
    from l2e.diagnostics import time_per_step

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
    """One fSGHMC chain; hp: learning_rate.  The record holds the GP settings and fit, whether every Cholesky factor
    was finite, the largest jitter used, and the cost per update relative to an SGHMC update."""
    s = ctx.settings
    friction = float(s.friction)
    posterior, record = ctx.cache.get(("fsghmc_posterior", ctx.task.spec, s), lambda: fsghmc_posterior(ctx.task, s))
    hp = {**hp, "friction": friction, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0, "gp_prior": record,
          **_step_cost(ctx, posterior, friction, float(hp["learning_rate"]))}
    return run_single_chain(ctx, key, hp, single_chain_schedule(ctx.cfg), ("fsghmc", friction, s),
                            lambda: _kernel(posterior, friction), l2e.fsghmc.init, lr_args(hp),
                            final_info=lambda st: {"cholesky_ok": bool(st.chol_ok), "max_jitter": float(st.jitter)})


METHOD = Method("fsghmc", FSGHMCSettings, run_fsghmc, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg),
                grids=dict(every=dict(lrs=(0.003, 0.01, 0.03, 0.1)), smoke=dict(lrs=(0.03,), measurement_points=8)),
                step_cost=lambda post, fpost: {"fsghmc": l2e.fsghmc(fpost, 0.05, 15.0)})
