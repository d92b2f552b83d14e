"""Policy-L2E (l2e.policy): M parallel chains whose shared mass, step and friction are adapted from the chains' pooled
statistics at a few points of the burn-in, then frozen (docs/samplers.md, Policy-L2E).

Tuning-free: no grid. The budget G minibatch gradients is split by the method itself (Method.chain_allocation is False):
the adaptation points' Hessian-vector products first (`l2e.policy.adaptation_gradients`), the rest as S = ⌊(G −
those)/M⌋ updates of each of the M chains (with control_variate: the anchor's passes first too, and every update after
phase 0 two gradients; `l2e.policy.split_budget`); K/M draws per chain, evenly over the last window_fraction of its
updates, the freeze where they start (as Transient-L2E's window rule). Settings: chains M; the SHARED fields (phases,
mass_rule, gather_fraction, base_step, base_kappa, base_damping, power_iterations, curvature — "warm", as the shipped φ
was trained — max_step_gain, control_variate, relative_step, restart_lagging, track_noise, track_step, track_every,
burn_chains — M_b chains through the burn-in, grown to M at the freeze, l2e.policy.grow): l2e.policy.PolicyConfig's,
passed to it unchanged by the evaluation and the card alike (the card, which holds no data set, runs control_variate
off, and its M chains throughout); meta_params: "rule" (the hand-designed rule, φ unused) or the path of a saved φ
(l2e.policy.save_meta_params; the learned policy), "shipped" the shipped one. Two methods: `policy` (the rule) and
`policy_learned` (the shipped φ)."""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from base.io import ConfigError
from evaluate.methods.base import Method
from evaluate.methods.chunks import chain_keys, host_info, phase_chunks, run_chunks
from evaluate.methods.control_variates import FULL_CHUNK
from evaluate.methods.outputs import finalise
from l2e import policy as P
from l2e.chains import ChainSchedule
from l2e.control_variates import full_gradient_cost
from l2e.types import tree_size

__all__ = ["METHOD_TABLE", "PolicyLearnedSettings", "PolicySettings", "SHARED", "card_builder", "policy_schedule",
           "run_policy", "sampler_config"]


SHARED = ("phases", "gather_fraction", "mass_rule", "window_fraction", "base_step", "base_kappa", "base_damping",
          "power_iterations", "curvature", "max_step_gain", "control_variate", "relative_step", "restart_lagging",
          "track_noise", "track_step", "track_every", "burn_chains")
"""The settings that are l2e.policy.PolicyConfig's fields, passed to it unchanged (`sampler_config`): one source for
their meaning, range and (but curvature) default."""
_DEFAULT = P.PolicyConfig()


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """chains: M; SHARED (phases, gather_fraction, mass_rule, window_fraction, base_step, base_kappa, base_damping,
    power_iterations, curvature, max_step_gain, control_variate, relative_step, restart_lagging, track_noise,
    track_step, track_every, burn_chains): PolicyConfig's, with its defaults but curvature "warm" (as the shipped φ
    was trained); meta_params: "rule" or the path of a saved φ (module docstring)."""

    chains: int = 10
    phases: int = _DEFAULT.phases
    gather_fraction: float = _DEFAULT.gather_fraction
    mass_rule: str = _DEFAULT.mass_rule
    window_fraction: float = _DEFAULT.window_fraction
    meta_params: str = "rule"
    base_step: float = _DEFAULT.base_step
    base_kappa: float = _DEFAULT.base_kappa
    base_damping: float = _DEFAULT.base_damping
    power_iterations: int = _DEFAULT.power_iterations
    curvature: str = "warm"
    max_step_gain: float = _DEFAULT.max_step_gain
    control_variate: bool = _DEFAULT.control_variate
    relative_step: bool = _DEFAULT.relative_step
    restart_lagging: bool = _DEFAULT.restart_lagging
    track_noise: bool = _DEFAULT.track_noise
    track_step: bool = _DEFAULT.track_step
    track_every: int = _DEFAULT.track_every
    burn_chains: int = _DEFAULT.burn_chains

    def __post_init__(self):
        if not isinstance(self.chains, int) or self.chains < 2:
            raise ConfigError(f"settings.policy.chains must be an integer >= 2, got {self.chains!r}")
        try:
            sampler_config(self, 100 * self.phases)
        except ValueError as e:
            raise ConfigError(f"settings.policy: {e}") from None


def sampler_config(s: PolicySettings, freeze: int, noise_halves: bool = True) -> P.PolicyConfig:
    """The sampler's PolicyConfig for settings `s` (every SHARED field), the window starting at update `freeze`; the
    anchor's pass in chunks of the control-variate rivals' FULL_CHUNK examples."""
    return P.PolicyConfig(freeze_step=freeze, noise_halves=noise_halves,
                          policy="rule" if s.meta_params == "rule" else "learned", anchor_chunk=FULL_CHUNK,
                          **{name: getattr(s, name) for name in SHARED})


def policy_schedule(cfg, s: PolicySettings, anchor_pass: int = 1) -> tuple[ChainSchedule, int]:
    """(each chain's ChainSchedule, freeze_step) at G = cfg.num_steps, K = cfg.num_samples (l2e.policy.split_budget);
    anchor_pass: with control_variate, ⌈N/B⌉ (1, the least, where the task is not known yet: the method's check;
    l2e.policy.anchored turns the anchors off where their passes would take more than ANCHOR_SHARE of G)."""
    try:
        steps, draws, thinning, freeze = P.split_budget(
            P.anchored(sampler_config(s, 100 * s.phases), cfg.num_steps, anchor_pass, cfg.num_samples, s.chains),
            cfg.num_steps,
            cfg.num_samples, s.chains, anchor_pass)
    except ValueError as e:
        raise ConfigError(f"settings.policy: {e}") from None
    schedule, k = ChainSchedule(steps, draws, thinning, cfg.batch_size, cfg.chunk), s.track_every
    # with track_every k, chunks of a multiple of k updates where one divides the draws' steps: the tracked phases
    # then run l2e.policy.chunk_kernels' periodic kernels, no branch (split_budget aligns the draws for it)
    if schedule.chunk_length % k:
        fits = [c for c in range(k, cfg.chunk + 1, k)
                if ChainSchedule(steps, draws, thinning, cfg.batch_size, c).chunk_length == c]
        schedule = ChainSchedule(steps, draws, thinning, cfg.batch_size, fits[-1]) if fits else schedule
    return schedule, freeze


def _meta_params(s: PolicySettings):
    if s.meta_params == "rule":
        return P.init_meta_params(jax.random.PRNGKey(0))
    try:
        return P.load_meta_params(s.meta_params)
    except (OSError, ValueError) as e:
        raise ConfigError(f"settings.policy.meta_params: {str(e).splitlines()[0]}") from None


def _segment(ctx, s, config, phi, state, key, schedule: ChainSchedule, offset: int, tag: tuple):
    """(ChainResult, infos, seconds) of the schedule's updates of the state's chains, the first of them update
    `offset` of the run: one kernel per phase (l2e.policy.chunk_phase; None, the general kernel, for a chunk holding
    an adaptation point), each chunk donating the state (its θ-sized per-chain trees are then not copied at every
    call); update t of the segment draws from fold_in(key, t)."""
    task, chains = ctx.task, jax.tree.leaves(state.position)[0].shape[0]
    args = (phi, task.train_data)  # the data a traced argument (the anchor's pass), not a compiled-in constant

    def kernel(phase):  # a tuple: a tracked phase's kernels per offset (l2e.policy.chunk_kernels)
        return tuple(lambda key_, st, b, a, k=k: k(key_, st, b, a[0], data=a[1])
                     for k in P.chunk_kernels(task.posterior, config, phase, schedule.chunk_length))

    chunk_at = phase_chunks(ctx, ("policy", s, config.freeze_step) + tag, kernel, schedule,
                            lambda start, length: P.chunk_phase(config, offset + start, length), state,
                            task.train_data, args, sample_batch=P.per_chain_batches(task.sample_batch, chains),
                            donate=True)
    t0 = time.perf_counter()
    chain, kept = run_chunks(chunk_at(0), state, key, task.train_data, args, schedule, chunk_at,
                             position_fn=lambda st: jax.tree.map(jnp.copy, st.position))
    jax.block_until_ready(chain.samples)
    return chain, kept, time.perf_counter() - t0


def run_policy(ctx, key, hp: dict):
    """M chains of S updates from M prior draws (module docstring; with burn_chains M_b < M, M_b chains until the
    freeze, then grown to M: l2e.policy.grow); grad_evals: l2e.policy.run_gradients (the chains' updates + the
    adaptation points'; with control_variate, the anchor's passes and the second gradient of every update after
    phase 0)."""
    s, task = ctx.settings, ctx.task
    anchor_pass = full_gradient_cost(int(jax.tree.leaves(task.train_data)[0].shape[0]), ctx.cfg.batch_size)
    schedule, freeze = policy_schedule(ctx.cfg, s, anchor_pass)
    config = P.anchored(sampler_config(s, freeze, noise_halves=schedule.batch_size % 2 == 0), ctx.cfg.num_steps,
                        anchor_pass, ctx.cfg.num_samples, s.chains)  # the anchors only where the budget affords them
    phi = _meta_params(s)
    init_key, key_chain = chain_keys(key)
    m_b = P.burn_chains(config, s.chains)
    state = P.init(jax.vmap(task.init_params)(jax.random.split(init_key, m_b)))
    state = jax.tree.map(jnp.copy, state)  # a buffer per field (init shares its zeros): the chunks donate them
    d = tree_size(jax.tree.map(lambda x: x[0], state.position))
    seconds, offset = 0.0, 0
    if m_b < s.chains:  # the burn-in's chains until the freeze, then grown (l2e.policy.grow)
        burn = ChainSchedule(freeze, 1, 1, schedule.batch_size, ctx.cfg.chunk)
        chain, _, seconds = _segment(ctx, s, config, phi, state, jax.random.fold_in(key_chain, 1), burn, 0, ("burn",))
        state, offset = jax.tree.map(jnp.copy, P.grow(chain.state, s.chains)), freeze
        schedule = ChainSchedule(schedule.num_steps - freeze, schedule.num_samples, schedule.thinning,
                                 schedule.batch_size, ctx.cfg.chunk)
    chain, kept, run_seconds = _segment(ctx, s, config, phi, state, key_chain, schedule, offset, ())
    seconds += run_seconds
    info = host_info(kept)
    sampling = np.asarray(info.sampling, bool)
    t_kin = [float(np.mean(np.asarray(info.t_kin)[sampling[:, c], c])) if sampling[:, c].any() else None
             for c in range(s.chains)]
    draws = schedule.num_samples
    flat = jax.tree.map(lambda x: x.reshape((draws * s.chains,) + x.shape[2:]), chain.samples)
    chain_ids = [c for _ in range(draws) for c in range(s.chains)]
    record = {**hp, "chains": s.chains, "steps_per_chain": offset + schedule.num_steps, "freeze_step": freeze,
              "thinning": schedule.thinning, "phases": s.phases, "mass_rule": s.mass_rule,
              "meta_params": s.meta_params, "temperature": config.temperature, "eps": float(chain.state.eps),
              "noise_halves": config.noise_halves, "num_params": d, "control_variate": config.control_variate,
              "burn_chains": m_b}
    grads = P.run_gradients(config, offset + schedule.num_steps, s.chains, anchor_pass)
    return finalise(ctx, flat, chain_ids, grads, seconds, record, num_chains=s.chains, t_kin=t_kin)


@dataclasses.dataclass(frozen=True)
class PolicyLearnedSettings(PolicySettings):
    """PolicySettings with the shipped φ (checkpoints/policy/phi.npz)."""

    meta_params: str = "shipped"


def card_builder(settings):
    """The sampler card's builder (evaluate.card) for `settings` (PolicySettings, the class — its defaults — or an
    instance; every SHARED field and meta_params are read, `sampler_config`): the card's chains as one ensemble
    (`ensemble = True`), tuning-free (the card's ε and C unused), its minibatch noise estimated from two half-batches
    (`halves = True`: the card gives each chain evaluate.card.half_batches' rows, whose mean is the card's noise),
    the freeze at a fifth of the chain; only the window's states count."""
    s = settings() if isinstance(settings, type) else settings

    def build(post, eps, c, smin, steps):
        freeze = max(2 * s.phases, steps // 5)
        with jax.ensure_compile_time_eval():  # φ concrete even when built inside a trace (the analytic benchmark)
            phi = None if s.meta_params == "rule" else P.load_meta_params(s.meta_params)
            # the card's targets hold no data set: a control_variate setting runs without its anchor there
            alg = P.policy(post, phi, dataclasses.replace(sampler_config(s, freeze), control_variate=False))
        return alg, lambda state: (state.step > freeze).astype(jnp.float32)

    build.ensemble = build.halves = True
    return build


def _method(name: str, settings: type) -> Method:
    return Method(name, settings, run_policy, chain_allocation=False, kinetic_check=True,
                  check=lambda cfg, s: policy_schedule(cfg, s) and None,
                  grids=dict(smoke=dict(chains=2, phases=2, power_iterations=1)), card=card_builder(settings))


METHOD_TABLE = {"policy": _method("policy", PolicySettings),
                "policy_learned": _method("policy_learned", PolicyLearnedSettings)}
"""policy: the hand-designed rule (φ unused); policy_learned: the shipped learned policy."""
