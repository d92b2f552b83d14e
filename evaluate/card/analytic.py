"""The analytic benchmark of SMILE (docs/evaluation.md, "The analytic benchmark") as part of the sampler card: known 10-D targets under structured
and heavy-tailed gradient noise, a step-size sweep per sampler, seeds.

Targets (d = 10, exact reference moments): an ill-conditioned Gaussian (σ log-spaced 0.1…10, rotated by the
public code's random rotation, numpy seed 1); Neal's funnel (θ ~ N(0, 3²), x_i | θ ~ N(0, e^θ));
Rosenbrock pairs (X ~ N(1, 1), Y | X ~ N(X², 0.1), 5 + 5 coordinates).
Gradient noise: the sampler sees the gradient of log p_B(x) = log target(x) + w(x)·ξᵀx, ξ = 16·A·b fresh each
step.  Gaussian series (b ~ N(0, I), the law of a sum of B = 256 centred unit-variance data rows, drawn directly
rather than from a finite data set of N = 409,600 rows — the finite-population factor 1 − B/N is 0.9994):
isotropic (A = I), anisotropic (A = diag(σ) of the Gaussian target), correlated (A = its Cholesky factor),
position-dependent (correlated, w(x) = exp(−x₂/c), c = 6.5 / 9 / 1.414 per target as the code); non-Gaussian
series (isotropic, b standardised to unit variance): Laplace, Student-t (df 5), lognormal (σ = 1; the public
code reuses df = 5 as σ, a law that is almost surely ≈ 0 with rare enormous draws).  The same A serves all three
targets (as in the public code).  w ≡ 1 off the position-dependent series.
Every chain starts where the public code starts (x = 0; Rosenbrock X = 1, Y = 2) and, as there, every
`thinning`-th state after `burn_in` steps (default 0) is kept, so the error includes the approach to the target.
Metrics per chain (one chain per seed, mean ± standard error over seeds): SMILE's normalised second-moment error
mean_i (Ê[x_i²] − E[x_i²])² / Var[x_i²]; the card's variance ratio (median over coordinates of Var̂/Var),
|mean error|/σ (mean over coordinates), T_kin (momentum samplers' info.kinetic / d) and
T_conf = ⟨x·∇U(x)⟩ / d with the exact ∇U (1 for any correct sampler).  Each sampler sweeps `points` step sizes
log-spaced over its own range (STEP_RANGES, in the units of the card's builders with σ_min = 1: SGLD's Langevin
step h, pSGLD's lr, the momentum samplers' physical ε, SMILE's initial ε); the best point of each (sampler,
target, noise) has the smallest mean SMILE error among points where no seed diverged. An ensemble sampler (a builder
with `ensemble = True`: Policy-L2E, whose state holds every chain) is tuning-free: one point, no step size, and each
lane runs ENSEMBLE_CHAINS chains, each with its own ξ, their sums pooled, at equal gradients: each chain runs
num_steps / ENSEMBLE_CHAINS steps (its burn-in burn_in / ENSEMBLE_CHAINS), so a lane spends what a single-chain lane
does and keeps as many states. A builder with `halves = True` (Policy-L2E's,
Transient-L2E's, precond_fisher's) gets each ξ as two half-batch rows whose mean is ξ (evaluate.card.half_batches),
to estimate its noise from.

Budgets: `AnalyticConfig()` (10,000 steps, 3 seeds, 5 step sizes) is the small default: 331 s wall for the 11
samplers of `python -m evaluate card --analytic` on 2 CPU cores shared with a load average of 5–8 (measured once);
it screens rather than resolves (the slowest Gaussian coordinate needs ~σ_max²/h ≫ 10⁴ Langevin steps).
`LARGE` (200,000 steps, 7 seeds, 15 step sizes: the paper's counts of seeds and step sizes; `--analytic large`)
has 20× the steps and 7× the lanes.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import l2e
import l2e.smile
from evaluate.card.analytic_report import analytic_markdown, plot_analytic
from evaluate.card.run import always
from evaluate.card.targets import batch_noise, builder_noise
from l2e.diagnostics import virial
from base.io import ConfigError
from l2e.types import Posterior

__all__ = ["AnalyticConfig", "LARGE", "NOISES", "STEP_RANGES", "TARGETS", "analytic_markdown", 
           "plot_analytic", "run_analytic", "smile_builders"]

NOISES = ("isotropic", "anisotropic", "correlated", "position", "laplace", "student_t", "lognormal")
_NOISE_KIND = {  # name -> (structure, law): structure 0 I, 1 diag(σ), 2 Cholesky; law 0 Gauss 1 Laplace 2 t 3 logN
    "isotropic": (0, 0), "anisotropic": (1, 0), "correlated": (2, 0), "position": (2, 0),
    "laplace": (0, 1), "student_t": (0, 2), "lognormal": (0, 3)}
STEP_RANGES = {"sgld": (1e-5, 1e-2), "psgld": (1e-4, 1e-1), "sghmc": (1e-4, 3e-2), "csghmc": (1e-4, 3e-2),
               "sgnht": (1e-4, 3e-2), "l2e": (1e-4, 3e-2), "smile": (1e-3, 1.0), "psmile": (1e-3, 1.0),
               "smile-naive": (1e-3, 1.0), "psmile-naive": (1e-3, 1.0)}
"""Per sampler (or name prefix before " (", e.g. "l2e (shipped)"): the step-size sweep's (low, high)."""


@dataclasses.dataclass(frozen=True)
class AnalyticConfig:
    """num_steps per chain (burn_in of them discarded, then every thinning-th kept); seeds: chains (one per seed);
    points: step sizes per sampler; noise_scale: 16 = √B; friction: C of the momentum samplers; data_size: N of
    the card posterior (a unit convention); student_df (an integer) / lognormal_sigma: the non-Gaussian laws."""

    num_steps: int = 10_000
    burn_in: int = 0
    thinning: int = 10
    seeds: int = 3
    points: int = 5
    noise_scale: float = 16.0
    friction: float = 1.0
    data_size: int = 1000
    student_df: int = 5
    lognormal_sigma: float = 1.0
    targets: tuple[str, ...] = ("gaussian", "funnel", "rosenbrock")
    noises: tuple[str, ...] = NOISES
    seed: int = 0

    def check(self) -> "AnalyticConfig":
        """self, or ConfigError naming the first bad field."""
        for name in ("num_steps", "thinning", "seeds", "points", "noise_scale", "friction", "data_size"):
            if not 0 < getattr(self, name) < math.inf:
                raise ConfigError(f"{name} must be a positive finite number, got {getattr(self, name)}")
        if not 0 <= self.burn_in < self.num_steps or self.num_steps - self.burn_in < self.thinning:
            raise ConfigError(f"burn_in ({self.burn_in}) must leave at least thinning ({self.thinning}) of "
                              f"num_steps ({self.num_steps})")
        if not (isinstance(self.student_df, int) and self.student_df > 2 and 0 < self.lognormal_sigma < 5.5):
            raise ConfigError("student_df must be an integer > 2 and lognormal_sigma in (0, 5.5)")
        for field, known in (("targets", TARGETS), ("noises", NOISES)):
            values = getattr(self, field)
            if not values or any(v not in known for v in values) or len(set(values)) != len(values):
                raise ConfigError(f"{field} must be distinct names from {', '.join(known)}, got {values}")
        from cli import limits

        for name, limit in (("num_steps", limits.MAX_STEPS), ("seeds", limits.MAX_SAMPLES),
                            ("points", limits.MAX_GRID)):
            limits.at_most(name, getattr(self, name), limit)
        return self


LARGE = AnalyticConfig(num_steps=200_000, seeds=7, points=15)


class AnalyticTarget(NamedTuple):
    """A 10-D target: energy U, exact mean / variance / E[x²] / Var[x²] per coordinate, exact sampler."""

    name: str
    energy: Callable[[jax.Array], jax.Array]
    mean: np.ndarray
    var: np.ndarray
    m2: np.ndarray
    m2_var: np.ndarray
    sample: Callable[[jax.Array, int], jax.Array]
    spatial_scale: float
    start: np.ndarray  # (d,) where every chain starts (the public code's: 0, Rosenbrock (1, …, 1, 2, …, 2))


def _gaussian_cov(d: int = 10, cond: float = 100.0, rotation_seed: int = 1):
    """(σ (d,), Σ (d, d)) of the public code's ill-conditioned Gaussian."""
    sig = np.logspace(-0.5 * np.log10(cond), 0.5 * np.log10(cond), d)
    q, _ = np.linalg.qr(np.random.default_rng(rotation_seed).standard_normal((d, d)))
    return sig, q @ np.diag(sig**2) @ q.T


def gaussian_target() -> AnalyticTarget:
    _, cov = _gaussian_cov()
    prec, chol = jnp.asarray(np.linalg.inv(cov), jnp.float32), jnp.asarray(np.linalg.cholesky(cov), jnp.float32)
    v = np.diag(cov).astype(np.float32)
    return AnalyticTarget("gaussian", lambda x: 0.5 * x @ prec @ x, np.zeros(10, np.float32), v, v, 2 * v**2,
                          lambda key, n: jax.random.normal(key, (n, 10)) @ chol.T, 6.5,
                          np.zeros(10, np.float32))


def funnel_target() -> AnalyticTarget:
    def energy(x):
        th = x[0]
        return th**2 / 18.0 + 4.5 * th + 0.5 * jnp.exp(-th) * jnp.sum(x[1:] ** 2)

    def sample(key, n):
        z = jax.random.normal(key, (n, 10))
        th = 3.0 * z[:, :1]
        return jnp.concatenate([th, jnp.exp(th / 2) * z[:, 1:]], axis=1)

    v = np.array([9.0] + [math.exp(4.5)] * 9, np.float32)
    m2_var = np.array([162.0] + [3 * math.exp(18.0) - math.exp(9.0)] * 9, np.float32)
    return AnalyticTarget("funnel", energy, np.zeros(10, np.float32), v, v, m2_var, sample, 9.0,
                          np.zeros(10, np.float32))


def rosenbrock_target() -> AnalyticTarget:
    """E X² = 2, Var X² = 6; E Y² = E X⁴ + 0.1 = 10.1, Var Y² = E X⁸ + 0.6 E X⁴ + 0.03 − 10.1² = 668.02."""

    def energy(x):
        a, b = x[:5], x[5:]
        return 0.5 * jnp.sum((a - 1.0) ** 2 + (a**2 - b) ** 2 / 0.1)

    def sample(key, n):
        z = jax.random.normal(key, (n, 10))
        a = 1.0 + z[:, :5]
        return jnp.concatenate([a, a**2 + math.sqrt(0.1) * z[:, 5:]], axis=1)

    rep = lambda u, w: np.array([u] * 5 + [w] * 5, np.float32)  # noqa: E731
    return AnalyticTarget("rosenbrock", energy, rep(1.0, 2.0), rep(1.0, 6.1), rep(2.0, 10.1),
                          rep(6.0, 764.0 + 6.0 + 0.03 - 10.1**2), sample, 1.414, rep(1.0, 2.0))


TARGETS = {"gaussian": gaussian_target, "funnel": funnel_target, "rosenbrock": rosenbrock_target}


def _structures() -> np.ndarray:
    sig, cov = _gaussian_cov()
    return np.stack([np.eye(10), np.diag(sig), np.linalg.cholesky(cov)]).astype(np.float32)


def _base_noise(key, law, cfg: AnalyticConfig) -> jax.Array:
    """A unit-variance (10,) draw of law 0 Gauss, 1 Laplace, 2 Student-t, 3 lognormal (centred), from normal and
    uniform draws only (Student-t as z / sqrt(χ²_df / df) with df normals: no rejection sampler per step)."""
    k1, k2 = jax.random.split(key)
    df, s = cfg.student_df, cfg.lognormal_sigma
    z = jax.random.normal(k1, (2 + df, 10))
    u = jax.random.uniform(k2, (10,), minval=-0.5, maxval=0.5)
    laplace = -jnp.sign(u) * jnp.log1p(-2.0 * jnp.abs(u)) / math.sqrt(2.0)
    student = z[1] / jnp.sqrt(jnp.mean(z[2:] ** 2, axis=0)) / math.sqrt(df / (df - 2.0))
    lognormal = (jnp.exp(s * z[0]) - math.exp(s * s / 2)) / math.sqrt(math.expm1(s * s) * math.exp(s * s))
    return jnp.stack([z[0], laplace, student, lognormal])[law]


def _posterior(target: AnalyticTarget, cfg: AnalyticConfig, spatial) -> Posterior:
    """nll(params, ξ) = (U(x) − w(x)·ξᵀx)/N, flat prior, so −N·∇nll = ∇log p_B."""

    def nll(params, xi):
        x = params["x"]
        w = jnp.exp(-spatial * x[2] / target.spatial_scale)
        return (target.energy(x) - w * jnp.dot(batch_noise(xi, x), x)) / cfg.data_size

    return Posterior(nll, lambda params: jnp.zeros(()), cfg.data_size)


def smile_builders() -> dict:
    """The card's builder signature (post, eps, c, smin, steps) -> (alg, weight) for SMILE, pSMILE and their
    naive (fixed-step) forms; eps is SMILE's (initial) ε."""

    def make(pre: bool, tuner: bool):
        return lambda post, eps, c, smin, steps: (l2e.smile.smile(post, eps, tuner, pre), always)

    return {"smile": make(False, True), "psmile": make(True, True), "smile-naive": make(False, False),
            "psmile-naive": make(True, False)}


def step_grid(name: str, points: int) -> np.ndarray:
    lo, hi = STEP_RANGES.get(name, STEP_RANGES.get(name.split(" (")[0], STEP_RANGES["sghmc"]))
    return np.logspace(np.log10(lo), np.log10(hi), points)


ENSEMBLE_CHAINS = 4
"""Chains per lane of an ensemble sampler (`ensemble = True`: one state holds them all, l2e.policy), as on the card;
each chain draws its own noise, and the lane's sums pool them."""


def _lane_steps(cfg: AnalyticConfig, chains: int | None) -> tuple[int, int]:
    """(steps, burn-in) of each chain of a lane: cfg's for a single chain; an ensemble's `chains` share them (equal
    gradients). ConfigError where that leaves fewer than `thinning` steps after the burn-in."""
    if chains is None:
        return cfg.num_steps, cfg.burn_in
    steps, burn_in = cfg.num_steps // chains, cfg.burn_in // chains
    if steps - burn_in < cfg.thinning:
        raise ConfigError(f"num_steps ({cfg.num_steps}) shared by an ensemble's {chains} chains leaves fewer than "
                          f"thinning ({cfg.thinning}) steps each")
    return steps, burn_in


def _lane(builder, target: AnalyticTarget, cfg: AnalyticConfig, a, law, spatial, eps, key, x0):
    """One lane (a chain, or an ensemble's ENSEMBLE_CHAINS chains pooled): weighted sums (w, Σx, Σx², Σ kinetic,
    Σ x·∇U), all-finite flag, final ε (NaN if none)."""
    chains = ENSEMBLE_CHAINS if getattr(builder, "ensemble", False) else None
    steps, burn_in = _lane_steps(cfg, chains)
    alg, weight = builder(_posterior(target, cfg, spatial), eps, cfg.friction, 1.0, steps)
    grad_u = jax.grad(target.energy)
    noise = builder_noise(builder, lambda k: cfg.noise_scale * a @ _base_noise(k, law, cfg))

    def body(carry, t):
        state, sums = carry
        k_noise, k_step = jax.random.split(jax.random.fold_in(key, t))
        xi = noise(k_noise) if chains is None else jax.vmap(noise)(jax.random.split(k_noise, chains))
        state, info = alg.step(k_step, state, xi)
        x = state.position["x"].reshape(-1, 10)
        keep = (t >= burn_in) & ((t + 1 - burn_in) % cfg.thinning == 0)
        w = jnp.where(keep, weight(state), 0.0)
        kin = jnp.sum(getattr(info, "kinetic", jnp.zeros(())))
        new = (sums[0] + w * x.shape[0], sums[1] + w * jnp.sum(x, 0), sums[2] + w * jnp.sum(x * x, 0),
               sums[3] + w * kin, sums[4] + w * jnp.sum(jax.vmap(lambda v: virial(v, grad_u))(x)),
               sums[5] & jnp.all(jnp.isfinite(x)))
        return (state, new), None

    zero, zd = jnp.zeros(()), jnp.zeros(10)
    start = x0 if chains is None else jnp.broadcast_to(x0, (chains, 10))
    init = (alg.init({"x": start}), (zero, zd, zd, zero, zero, jnp.ones((), bool)))
    (state, sums), _ = jax.lax.scan(body, init, jnp.arange(steps))
    return sums, jnp.asarray(getattr(state, "step_size", jnp.nan), jnp.float32)


def _sweep(builder, target: AnalyticTarget, cfg: AnalyticConfig, steps: np.ndarray):
    """Every (noise, step, seed) lane of one sampler on one target -> numpy sums with leading axes (noise, step,
    seed).  Step sizes are traced (one compilation) unless the builder needs them concrete (then one per step)."""
    nn, ns, nk = len(cfg.noises), len(steps), cfg.seeds
    kinds = np.array([_NOISE_KIND[n] for n in cfg.noises])
    a = _structures()[kinds[:, 0]]
    spatial = np.array([n == "position" for n in cfg.noises], np.float32)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(cfg.seed), s))(jnp.arange(nk))
    x0 = np.broadcast_to(target.start, (nk, 10))
    lane_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2))(keys)
    grid = lambda v, axis: np.broadcast_to(  # noqa: E731  (value per noise / step / seed -> (nn, ns, nk, ...))
        np.expand_dims(np.asarray(v), [i for i in range(3) if i != axis]),
        (nn, ns, nk) + np.asarray(v).shape[1:]).reshape((nn * ns * nk,) + np.asarray(v).shape[1:])
    base = (grid(a, 0), grid(kinds[:, 1], 0), grid(spatial, 0))
    seeds = (grid(lane_keys, 2), grid(x0, 2))

    def run(eps_lanes, lanes):
        fn = jax.vmap(lambda aa, law, sp, e, k, x: _lane(builder, target, cfg, aa, law, sp, e, k, x))
        return jax.jit(fn)(*lanes[:3], eps_lanes, *lanes[3:])

    try:
        out = run(grid(steps.astype(np.float32), 1), base + seeds)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
        parts = []
        for e in steps:  # a builder that needs a concrete step size (a user builder calling float(ε))
            sel = lambda v: v.reshape((nn, ns, nk) + v.shape[1:])[:, 0].reshape((nn * nk,) + v.shape[1:])  # noqa
            fn = jax.jit(jax.vmap(lambda aa, law, sp, k, x, e=float(e): _lane(builder, target, cfg, aa, law, sp,
                                                                              e, k, x)))
            parts.append(fn(*[sel(np.asarray(v)) for v in base + seeds]))
        out = jax.tree.map(lambda *xs: np.stack([np.asarray(x).reshape((nn, nk) + x.shape[1:]) for x in xs], 1),
                           *parts)
        return out
    return jax.tree.map(lambda x: np.asarray(x).reshape((nn, ns, nk) + x.shape[1:]), out)


def _lane_metrics(sums, target: AnalyticTarget, momentum: bool):
    """Metrics of every lane (arrays with the lanes' leading axes); non-finite lanes give NaN."""
    w, sx, sx2, kin, vir, finite = sums
    ok = finite & (w > 0)
    wd = np.where(ok, w, 1.0)[..., None]
    mean, m2 = sx / wd, sx2 / wd
    var = m2 - mean**2
    bad = lambda v: np.where(ok, v, np.nan)  # noqa: E731
    return {"metric": bad(np.mean((m2 - target.m2) ** 2 / target.m2_var, axis=-1)),
            "var_ratio": bad(np.median(var / target.var, axis=-1)),
            "mean_error": bad(np.mean(np.abs(mean - target.mean) / np.sqrt(target.var), axis=-1)),
            "t_kin": bad(kin / wd[..., 0] / 10) if momentum else None,
            "t_conf": bad(vir / wd[..., 0] / 10), "finite": ok}


def _summarise(name: str, target: AnalyticTarget, cfg: AnalyticConfig, steps, sums, final_eps, momentum: bool):
    """Rows (one per noise × step: mean and s.e. over seeds of each metric) and the best row per noise."""
    m = _lane_metrics(sums, target, momentum)
    rows, best = [], []
    se = lambda v: float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0  # noqa: E731
    for i, noise in enumerate(cfg.noises):
        pts = []
        for j, eps in enumerate(steps):
            ok = m["finite"][i, j]
            row = {"sampler": name, "target": target.name, "noise": noise,
                   "step_size": float(eps) if math.isfinite(eps) else None,
                   "diverged": int((~ok).sum()), "seeds": int(cfg.seeds)}
            for key in ("metric", "var_ratio", "mean_error", "t_kin", "t_conf"):
                v = None if m[key] is None else m[key][i, j][ok]
                row[key] = None if v is None or not len(v) else float(np.mean(v))
                row[key + "_se"] = None if v is None or not len(v) else se(v)
            fe = final_eps[i, j][ok]
            row["final_step_size"] = float(np.mean(fe)) if len(fe) and np.all(np.isfinite(fe)) else None
            pts.append(row)
        rows += pts
        good = [r for r in pts if r["diverged"] == 0 and r["metric"] is not None and math.isfinite(r["metric"])]
        best.append(min(good, key=lambda r: r["metric"]) if good else {**pts[0], "metric": None, "best": "none"})
    return rows, best


def run_analytic(cfg: AnalyticConfig, samplers: dict, progress: Callable[[str], None] | None = None) -> dict:
    """{"config", "step_sizes": {sampler: grid}, "rows": every (sampler, target, noise, step), "best": the best
    step per (sampler, target, noise), "skipped": {} (kept for reports that list skipped samplers)}; samplers: name
    -> card builder (evaluate.card.SamplerBuilder). An ensemble builder (`ensemble = True`, l2e.policy: tuning-free)
    runs once per lane, ENSEMBLE_CHAINS chains pooled at equal gradients (`_lane_steps`), with no step grid (its
    step_size None)."""
    cfg.check()
    if any(getattr(b, "ensemble", False) for b in samplers.values()):
        _lane_steps(cfg, ENSEMBLE_CHAINS)  # refused before anything runs
    rows, best, grids = [], [], {}
    for tname in cfg.targets:
        target = TARGETS[tname]()
        for name, builder in samplers.items():
            if progress:
                progress(f"{tname} {name}")
            ensemble = getattr(builder, "ensemble", False)
            shape = (ENSEMBLE_CHAINS,) * ensemble + (10,)
            batch = (ENSEMBLE_CHAINS,) * ensemble + (2,) * getattr(builder, "halves", False) + (10,)  # a noise draw
            steps = np.array([np.nan]) if ensemble else step_grid(name, cfg.points)  # tuning-free: one point
            grids[name] = [] if ensemble else steps.tolist()
            sums, final_eps = _sweep(builder, target, cfg, steps)
            probe, _ = builder(_posterior(target, cfg, 0.0), 0.01, cfg.friction, 1.0,
                               _lane_steps(cfg, ENSEMBLE_CHAINS if ensemble else None)[0])
            info = jax.eval_shape(probe.step, jax.random.PRNGKey(0), probe.init({"x": jnp.zeros(shape)}),
                                  jnp.zeros(batch))
            r, b = _summarise(name, target, cfg, steps, sums, final_eps, "kinetic" in info[1]._fields)
            rows += r
            best += b
    return {"config": dataclasses.asdict(cfg), "step_sizes": grids, "rows": rows, "best": best, "skipped": {}}
