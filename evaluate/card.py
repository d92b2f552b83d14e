"""The sampler card: every minibatch sampler on known targets with minibatch-style gradient noise.

Targets (SAMPLING.md §3): a 10-D isotropic Gaussian (σ = 1), a 100-D anisotropic Gaussian (σ log-spaced
0.1 … 10) and a 2-D two-mode mixture (½N(−m, s²I) + ½N(m, s²I)).  Gradient noise: the sampler sees
∇Ũ(θ) = ∇U(θ) + ξ, ξ ~ N(0, diag(ν²/σ²)) drawn per step (the "minibatch"), i.e. noise of relative size ν in the
units of each coordinate's gradient; ν = 0 gives exact gradients.  The targets are written as a
`l2e.Posterior` with data size N: nll(θ, ξ) = (U(θ) + θ·ξ)/N and a flat prior, so N·∇nll = ∇U + ξ.

Every momentum sampler runs at the same physical step ε and friction C (SGHMC form: lr = ε²N); SGLD at the
Langevin step h = ε·σ_min, pSGLD at lr = ε (its RMSprop preconditioner G ≈ N·σ_min for gradients of scale
1/σ_min makes its step G·lr/N ≈ h); cyclical SGHMC (SGD-with-momentum form) at lr₀ = ε²N, a = Cε, statistics over
its sampling phases only.  Per target and sampler, after burn-in, over all chains:
- mean error / σ: mean over coordinates of |E[θ_i] − μ_i| / σ_i;
- variance ratio Var[θ_i] / σ_i²: median and 5–95 % range over coordinates;
- T_kin = ⟨Σ r·∇_rK⟩ / d from the step's info (momentum samplers; SAMPLING.md §3);
- T_conf = ⟨θ·∇U(θ)⟩ / d with the exact ∇U (equals T for any correct sampler, by integration by parts).
SGHMC is run with several seeds; the range of its median variance ratio is the yardstick band.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from l2e.io import ConfigError
from l2e.types import Posterior


class Target(NamedTuple):
    """A known target: energy U(θ) on a flat vector θ (d,), its exact mean and per-coordinate variance."""

    name: str
    energy: Callable[[jax.Array], jax.Array]
    mean: np.ndarray
    var: np.ndarray
    grad_scale: np.ndarray  # (d,) 1/σ_i: the scale of the gradient of coordinate i (noise units)
    sample: Callable[[jax.Array, int], jax.Array]  # (key, n) -> (n, d) exact draws


def gaussian_target(name: str, sigmas) -> Target:
    sig = np.asarray(sigmas, np.float32)
    s = jnp.asarray(sig)
    return Target(name, lambda x: 0.5 * jnp.sum((x / s) ** 2), np.zeros_like(sig), sig**2, 1.0 / sig,
                  lambda key, n: jax.random.normal(key, (n, sig.size)) * s)


def mixture_target(name: str = "mixture-2d", offset: float = 1.0, scale: float = 0.5) -> Target:
    """½N((−m, 0), s²I) + ½N((m, 0), s²I): mean 0, variance (s² + m², s²)."""
    mu = jnp.asarray([offset, 0.0])

    def energy(x):
        a = -0.5 * jnp.sum(((x - mu) / scale) ** 2)
        b = -0.5 * jnp.sum(((x + mu) / scale) ** 2)
        return -jnp.logaddexp(a, b)

    def sample(key, n):
        k1, k2 = jax.random.split(key)
        sign = jnp.where(jax.random.bernoulli(k1, 0.5, (n, 1)), 1.0, -1.0)
        return sign * mu + scale * jax.random.normal(k2, (n, 2))

    return Target(name, energy, np.zeros(2, np.float32), np.asarray([scale**2 + offset**2, scale**2], np.float32),
                  np.full(2, 1.0 / scale, np.float32), sample)


def default_targets() -> tuple[Target, ...]:
    return (gaussian_target("gaussian-10d", np.ones(10)),
            gaussian_target("gaussian-100d-aniso", np.logspace(-1, 1, 100)),
            mixture_target())


@dataclasses.dataclass(frozen=True)
class CardConfig:
    """step_factor: ε = step_factor·σ_min; friction: C; noise: ν (relative gradient-noise scale);
    num_steps per chain (burn_in of them discarded), num_chains per seed, seeds of SGHMC's band."""

    step_factor: float = 0.1
    friction: float = 1.0
    noise: float = 0.5
    data_size: int = 1000
    num_steps: int = 40_000
    burn_in: int = 8_000
    num_chains: int = 4
    band_seeds: int = 3
    seed: int = 0

    def check(self) -> "CardConfig":
        """self, or ConfigError naming the first bad field (run after all overrides: fields depend on each other)."""
        for name in ("step_factor", "friction", "data_size", "num_steps", "num_chains", "band_seeds"):
            v = getattr(self, name)
            if not (0 < v < math.inf):
                raise ConfigError(f"{name} must be a positive finite number, got {v}")
        if not (0 <= self.noise < math.inf):
            raise ConfigError(f"noise must be a non-negative finite number, got {self.noise}")
        if not 0 <= self.burn_in < self.num_steps:
            raise ConfigError(f"burn_in ({self.burn_in}) must be in [0, num_steps = {self.num_steps})")
        return self


def card_posterior(target: Target, cfg: CardConfig) -> tuple[Posterior, Callable]:
    """(posterior, sample_noise(key) -> ξ (d,)) of `target` with gradient noise ν·grad_scale."""
    n = cfg.data_size
    noise_std = jnp.asarray(cfg.noise * target.grad_scale)

    def nll(params, xi):
        x = params["x"]
        return (target.energy(x) + jnp.dot(x, xi)) / n

    post = Posterior(nll, lambda params: jnp.zeros(()), n)
    return post, lambda key: noise_std * jax.random.normal(key, noise_std.shape)


# name -> (posterior, eps, friction, sigma_min, cfg, num_steps) -> (SamplingAlgorithm, weight(state) -> 0/1)
SamplerBuilder = Callable[..., tuple[l2e.SamplingAlgorithm, Callable]]


def _always(state):
    return jnp.ones(())


def _hand_designed() -> dict[str, SamplerBuilder]:
    def sgld(post, eps, c, smin, steps):
        return l2e.sgld(post, eps * smin * post.data_size), _always

    def psgld(post, eps, c, smin, steps):  # lr such that G·lr/N ≈ h where the gradient is of scale 1/σ_min
        return l2e.psgld(post, eps), _always

    def sghmc(post, eps, c, smin, steps):
        return l2e.sghmc(post, eps**2 * post.data_size, c), _always

    def csghmc(post, eps, c, smin, steps):
        cycles, ratio = 4, 0.5
        alg = l2e.cyclical_sghmc(post, eps**2 * post.data_size, steps, cycles, ratio, momentum_decay=c * eps)
        weight = lambda s: jnp.asarray(  # noqa: E731  (statistics over sampling phases only)
            l2e.cyclical_sghmc.cyclical_schedule(s.step - 1, 1.0, steps, cycles, ratio)[1], jnp.float32)
        return alg, weight

    out = {"sgld": sgld, "psgld": psgld, "sghmc": sghmc, "csghmc": csghmc}
    if hasattr(l2e, "sgnht"):
        def sgnht(post, eps, c, smin, steps):
            return l2e.sgnht(post, eps**2 * post.data_size, c), _always

        out["sgnht"] = sgnht
    return out


def learned_builder(meta_params, config, factory: Callable = l2e.l2e) -> SamplerBuilder:
    """A learned sampler (`factory(posterior, meta_params, config)`: l2e.l2e, l2e.kinetic) at the card's ε and C,
    with the rest of the checkpoint's configuration (output scales, noise mode, temperature); ε may be traced
    (the analytic benchmark's step-size sweep compiles once)."""

    def build(post, eps, c, smin, steps):
        cfg = dataclasses.replace(config, learning_rate=eps**2 * post.data_size, friction=c)
        return factory(post, meta_params, cfg), _always

    return build


class _Sums(NamedTuple):
    weight: jax.Array
    x: jax.Array
    x2: jax.Array
    kinetic: jax.Array
    virial: jax.Array
    finite: jax.Array


def _chain_stats(alg, weight_fn, target: Target, sample_noise, key, x0, cfg: CardConfig):
    """Weighted sums of θ, θ², kinetic term and θ·∇U after burn-in over one chain (lax.scan, vector targets)."""
    grad_u = jax.grad(target.energy)
    d = x0.shape[0]
    zero = jnp.zeros(())
    sums0 = _Sums(zero, jnp.zeros(d), jnp.zeros(d), zero, zero, jnp.ones((), bool))

    def body(carry, t):
        state, sums = carry
        k_noise, k_step = jax.random.split(jax.random.fold_in(key, t))
        state, info = alg.step(k_step, state, sample_noise(k_noise))
        x = state.position["x"]
        w = jnp.where(t >= cfg.burn_in, weight_fn(state), 0.0)
        kin = getattr(info, "kinetic", jnp.zeros(()))
        sums = _Sums(sums.weight + w, sums.x + w * x, sums.x2 + w * x * x, sums.kinetic + w * kin,
                     sums.virial + w * jnp.dot(x, grad_u(x)), sums.finite & jnp.all(jnp.isfinite(x)))
        return (state, sums), None

    (_, sums), _ = jax.lax.scan(body, (alg.init({"x": x0}), sums0), jnp.arange(cfg.num_steps))
    return sums


def run_sampler(name: str, builder: SamplerBuilder, target: Target, cfg: CardConfig, seed: int) -> dict:
    """One sampler on one target: cfg.num_chains chains from exact draws, pooled statistics (see module doc)."""
    post, sample_noise = card_posterior(target, cfg)
    smin = float(1.0 / np.max(target.grad_scale))  # σ_min
    eps = cfg.step_factor * smin
    alg, weight = builder(post, eps, cfg.friction, smin, cfg.num_steps)
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), seed)
    x0 = target.sample(jax.random.fold_in(key, 1), cfg.num_chains)
    keys = jax.random.split(jax.random.fold_in(key, 2), cfg.num_chains)
    run = jax.jit(jax.vmap(lambda k, x: _chain_stats(alg, weight, target, sample_noise, k, x, cfg)))
    s = jax.tree.map(np.asarray, run(keys, x0))
    ok = s.finite & (s.weight > 0)
    if not ok.any():
        return {"sampler": name, "target": target.name, "seed": seed, "diverged_chains": int(cfg.num_chains)}
    w = s.weight[ok].sum()
    mean = s.x[ok].sum(0) / w
    var = s.x2[ok].sum(0) / w - mean**2
    ratio = var / target.var
    d = target.mean.size
    k0 = jax.random.PRNGKey(0)
    info = jax.eval_shape(alg.step, k0, alg.init({"x": x0[0]}), sample_noise(k0))[1]
    momentum = "kinetic" in info._fields
    return {"sampler": name, "target": target.name, "seed": seed, "step_size": eps, "friction": cfg.friction,
            "diverged_chains": int((~s.finite).sum()),
            "mean_error": float(np.mean(np.abs(mean - target.mean) / np.sqrt(target.var))),
            "var_ratio_median": float(np.median(ratio)), "var_ratio_q05": float(np.quantile(ratio, 0.05)),
            "var_ratio_q95": float(np.quantile(ratio, 0.95)),
            "t_kin": float(s.kinetic[ok].sum() / w / d) if momentum else None,
            "t_conf": float(s.virial[ok].sum() / w / d)}


def sampler_card(samplers: dict[str, SamplerBuilder], cfg: CardConfig = CardConfig(),
                 targets: tuple[Target, ...] | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """{"config", "rows": one per (target, sampler) (seed 0), "band": {target: [lo, hi]} of SGHMC's median
    variance ratio over cfg.band_seeds seeds}."""
    cfg.check()
    rows, band = [], {}
    for target in targets or default_targets():
        for name, builder in samplers.items():
            if progress:
                progress(f"{target.name} {name}")
            rows.append(run_sampler(name, builder, target, cfg, 0))
        sg = [run_sampler("sghmc", _hand_designed()["sghmc"], target, cfg, s)["var_ratio_median"]
              for s in range(cfg.band_seeds)]
        band[target.name] = [float(min(sg)), float(max(sg))]
    return {"config": dataclasses.asdict(cfg), "rows": rows, "band": band}


def _f(v, spec=".3f"):
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def card_markdown(card: dict) -> str:
    lines = ["| target | sampler | mean err / σ | var ratio (median, 5–95 %) | T_kin | T_conf | diverged |",
             "|---|---|---|---|---|---|---|"]
    for r in card["rows"]:
        if "mean_error" not in r:
            lines.append(f"| {r['target']} | {r['sampler']} | — | — | — | — | {r['diverged_chains']} |")
            continue
        lines.append(f"| {r['target']} | {r['sampler']} | {_f(r['mean_error'])} | {_f(r['var_ratio_median'])} "
                     f"({_f(r['var_ratio_q05'], '.2f')}–{_f(r['var_ratio_q95'], '.2f')}) | {_f(r['t_kin'])} | "
                     f"{_f(r['t_conf'])} | {r['diverged_chains']} |")
    lines.append("")
    lines += [f"SGHMC band (median variance ratio over {card['config']['band_seeds']} seeds), {t}: "
              f"{lo:.3f}–{hi:.3f}" for t, (lo, hi) in card["band"].items()]
    return "\n".join(lines) + "\n"


def plot_card(card: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(card["band"])
    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 3.6), squeeze=False)
    for ax, t in zip(axes[0], targets):
        rows = [r for r in card["rows"] if r["target"] == t and "var_ratio_median" in r]
        names = [r["sampler"] for r in rows]
        med = np.array([r["var_ratio_median"] for r in rows])
        err = np.array([[m - r["var_ratio_q05"], r["var_ratio_q95"] - m] for m, r in zip(med, rows)]).T
        lo, hi = card["band"][t]
        ax.axhspan(lo, hi, color="tab:green", alpha=0.25, label="SGHMC band")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.errorbar(range(len(rows)), med, yerr=err, fmt="o", capsize=3)
        ax.set_xticks(range(len(rows)), names, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_title(t)
        ax.set_ylabel("variance ratio (sample / true)")
    axes[0][0].legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
