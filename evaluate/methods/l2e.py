"""L2E: the learned sampler of a meta-training checkpoint, one chain of G updates with the SGHMC sample schedule;
the checkpoint's sampler configuration with its learning_rate replaced by each grid value.  The checkpoint's kind
(the learned-sampler registry, l2e.learned.REGISTRY) picks the kernel and its sampling-window rule (e.g. Mass-L2E's
freeze_step) is applied at the first update of the sampling window.  The
temperature is the checkpoint's T (with the released code's noise mode "reference", N(0, 2·C·τ) without the ε
factor, the record adds the SGHMC-equivalent τ/ε at the chosen lr).

The shipped learned samplers with a method of their own (the `shipped` rows of the learned-sampler registry whose
`method` is set) are methods of their own, one entry each of SHIPPED_LEARNED below (`METHOD_TABLE`, registered in
evaluate.methods.registry by its "l2e:*" line): the same runner on that shipped checkpoint, one chain of G updates
with the SGHMC sample schedule, its lr tuned over its kind's grid (`settings.<name>.lrs`; LearnedSampler.lrs):
- l2e_mass — Mass-L2E (l2e.mass), the "mass" checkpoint: SGHMC whose diagonal mass and per-coordinate friction a
  meta-trained MLP sets from burn-in gradient statistics, frozen at the first update of the sampling window
  (correct by construction); lr grid like L2E's.
- l2e_kinetic — Kinetic-L2E (l2e.kinetic), the "kinetic" checkpoint: SGHMC with the learned kinetic energy
  K = ½‖r − μ_φ(θ)‖² (correct by construction); lr grid like L2E's.
- meta_sgmcmc — Meta-SGMCMC (l2e.meta_sgmcmc; Gong, Li & Hernández-Lobato 2019), the "meta-sgmcmc" checkpoint: the
  complete recipe with learned curl Q and diffusion D and the exact Γ correction (correct by construction),
  meta-trained by truncated backprop on the Stein-gradient KL surrogate as the L2E authors re-ran it (scaled:
  checkpoints/meta_sgmcmc/PROVENANCE.md); lr (ε²N, SGHMC's units: Q ≡ 1, D ≡ C is SGHMC) over an SGHMC-like grid.
- precond_l2e — Precond-L2E (the L2E paper's Table 11 ablation), the "precond-l2e" checkpoint: Meta-SGMCMC's
  parameterisation (learned Q, D with the exact Γ, correct by construction) meta-trained the L2E way, antithetic ES
  on the BMA loss (checkpoints/precond_l2e/PROVENANCE.md); lr (ε²N, SGHMC's units) over an SGHMC-like grid.
- small_l2e — Small-L2E (the L2E paper's Table 11 ablation), the "small-l2e" checkpoint: the paper-form L2E step
  meta-trained on a smaller task distribution (one dataset, 4-channel CNNs of depth 1–2:
  checkpoints/small_l2e/PROVENANCE.md); lr over the paper-form L2E's grid (the `l2e` method's)."""
from __future__ import annotations

import dataclasses
import functools
import math

import l2e
from l2e import learned
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain
from base.io import ConfigError

__all__ = ["L2ESettings", "METHOD", "METHOD_TABLE", "SHIPPED_LEARNED", "learned_method", "l2e_record", "lr_settings",
           "override_sampler", "run_l2e", "window_thinning"]


def sampler_module(sampler):
    """The registry entry (l2e.types.LearnedSampler: init, build_kernel) of a learned sampler's config."""
    return learned.kind_of_config(sampler)


def _kernel(task, sampler, phase=None):
    step = sampler_module(sampler).kernel(task.posterior, sampler, phase)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["meta"], learning_rate=args["lr"])

    return kernel


def window_thinning(cfg, sampler) -> int | None:
    """The thinning of a sampler that declares its sampling window (l2e.types.Protocol.window_fraction, e.g.
    Transient-L2E's meta-selected one) when the evaluation fixes none (cfg.thinning unset): max(1,
    ⌊window_fraction·G⌋ // K), its K states over the chain's last window_fraction; None (the protocol's default, the
    last half) otherwise."""
    fraction = sampler_module(sampler).window_fraction(sampler)
    if fraction is None or cfg.thinning:
        return None
    return max(1, int(fraction * cfg.num_steps) // cfg.num_samples)


def l2e_record(ctx, hp: dict, sampler: l2e.L2EConfig, thinning: int | None = None) -> dict:
    """The hyperparameter record of an L2E run: lr, thinning (default the protocol's), the sampler configuration,
    its temperature, the checkpoint (hp["checkpoint"] when given) and, for noise "reference", the SGHMC-equivalent
    temperature."""
    record = {"learning_rate": hp["learning_rate"], "thinning": thinning or ctx.cfg.sample_thinning,
              "sampler": {k: v for k, v in dataclasses.asdict(sampler).items() if k != "learning_rate"},
              "temperature": float(sampler.temperature)}
    if "checkpoint" in hp:
        record["checkpoint"] = hp["checkpoint"]
    if getattr(sampler, "noise", None) == "reference":
        eps = math.sqrt(float(hp["learning_rate"]) / ctx.task.data_size)
        record["noise_equivalent_temperature"] = float(sampler.temperature) / eps
        record["temperature_note"] = ("noise N(0, 2·C·τ) without the ε factor (released code): the SGHMC noise "
                                      "N(0, 2·C·ε·T) at T = τ/ε (noise_equivalent_temperature)")
    return record


def run_l2e(ctx, key, hp: dict):
    """One L2E chain; hp: learning_rate, "meta_params" and "sampler" (the checkpoint's L2EConfig)."""
    meta_params, sampler = hp["meta_params"], override_sampler(hp["sampler"], getattr(ctx.settings, "sampler", ()))
    schedule = single_chain_schedule(ctx.cfg, window_thinning(ctx.cfg, sampler))
    # the kind's sampling-window rule (what freezes when) at the first update of the sampling window
    sampler = sampler_module(sampler).sampling_config(sampler, schedule.num_steps - schedule.num_samples
                                                      * schedule.thinning)
    # lr is a traced call argument, the rest static (a tuning-free sampler, Protocol.tuning_free, has no learning
    # rate in its config: its kernel's learning_rate is a dimensionless multiplier)
    entry = sampler_module(sampler)
    static = sampler if entry.tuning_free else dataclasses.replace(sampler, learning_rate=1.0)
    args = {**lr_args(hp), "meta": meta_params}
    phase_of = None if entry.phase_of is None else functools.partial(entry.phase_of, static)
    return run_single_chain(ctx, key, l2e_record(ctx, hp, sampler, schedule.thinning), schedule, ("l2e", static),
                            functools.partial(_kernel, ctx.task, static), entry.init, args, phase_of=phase_of)


def override_sampler(sampler, overrides: tuple[str, ...]):
    """The checkpoint's sampler configuration with "field=value" overrides (a learned method's settings.sampler, e.g.
    Transient-L2E's ablations burn_in=warm, constants=rmsprop), typed as the field; ConfigError (one line) for an
    unknown field, a bad value or the learning rate (the method's `lrs`)."""
    from cli.overrides import apply_overrides

    bad = [o for o in overrides if "=" not in o or o.split("=", 1)[0].strip() == "learning_rate"]
    if bad:
        raise ConfigError(f"{bad[0]!r} is not field=value of the sampler configuration (its learning rate is the "
                          "method's lrs)")
    return apply_overrides(sampler, list(overrides), prefix="") if overrides else sampler


def lr_settings(method: str, class_name: str, lrs: tuple[float, ...], config: type | None = None) -> type:
    """The settings of a learned-sampler method: frozen dataclass `class_name` (module evaluate.methods.l2e) with
    the fields `lrs` (default `lrs`), refused by check_grid as the group settings.<method>, and `sampler`
    ("field=value" overrides of the checkpoint's sampler configuration, checked against `config` when the method's
    kind is known)."""

    def __post_init__(self):
        check_grid(self, f"settings.{method}", "lrs")
        if config is not None and self.sampler:
            try:
                override_sampler(config(), self.sampler)
            except ConfigError as e:
                raise ConfigError(f"settings.{method}.sampler: {e}") from None

    return dataclasses.make_dataclass(
        class_name, [("lrs", tuple[float, ...], dataclasses.field(default=lrs)),
                     ("sampler", tuple[str, ...], dataclasses.field(default=()))], frozen=True,
        namespace={"__doc__": "lrs: learning rates lr = ε²·N replacing the checkpoint's; sampler: field=value "
                              "overrides of the checkpoint's sampler configuration (e.g. an ablation).",
                   "__module__": __name__, "__qualname__": class_name, "__post_init__": __post_init__})


def _schedule(cfg, settings):
    return single_chain_schedule(cfg)


_E4 = (0.003, 0.01, 0.03, 0.1)
GRIDS = {  # Method.grids of the learned methods, by method name (a method not listed: its defaults everywhere)
    "l2e": dict(every=dict(lrs=(0.25, 0.5, 1.0)), full=dict(lrs=(0.125, 0.25, 0.5, 1.0)), smoke=dict(lrs=(0.5,))),
    "l2e_mass": dict(every=dict(lrs=_E4), smoke=dict(lrs=(0.03,))),
    "l2e_kinetic": dict(every=dict(lrs=_E4), smoke=dict(lrs=(0.03,))),
    "meta_sgmcmc": dict(every=dict(lrs=_E4), smoke=dict(lrs=(0.03,))),
    "precond_l2e": dict(every=dict(lrs=_E4), smoke=dict(lrs=(0.03,))),
    "small_l2e": dict(every=dict(lrs=(0.25, 0.5, 1.0)), full=dict(lrs=(0.125, 0.25, 0.5, 1.0)),
                      smoke=dict(lrs=(0.5,))),
    "l2e_transient": dict(smoke=dict(lrs=(1.0,))),
}
AUDITED = ("l2e", "l2e_mass", "l2e_transient")
"""The learned methods bench.defaults_audit runs (Method.audit): the default preset's and the tuning-free one."""


def learned_method(name: str, settings_class: str, sampler: bool | str, lrs: tuple[float, ...],
                   kinetic_check: bool = False, config: type | None = None) -> Method:
    """Method `name` running `run_l2e` on the learned sampler `sampler` (Method.needs_sampler: True, the
    evaluation's `--sampler`; a string, that shipped checkpoint), settings `settings_class` (lr_settings) with the
    default lr grid `lrs`; kinetic_check: Method.kinetic_check (a correct sampler: every kind but the paper form);
    config: the sampler kind's configuration class, when known (settings.sampler is checked against it)."""
    return Method(name, lr_settings(name, settings_class, lrs, config), run_l2e, grid=lr_grid, schedule=_schedule,
                  needs_sampler=sampler, kinetic_check=kinetic_check, grids=GRIDS.get(name, {}),
                  audit=name in AUDITED, batch_chains=True)


METHOD = learned_method("l2e", "L2ESettings", True, (0.25, 0.5, 1.0))
L2ESettings = METHOD.settings

def settings_class_name(method: str) -> str:
    """The settings class of a learned method: "l2e_mass" -> "L2EMassSettings", "meta_sgmcmc" -> "MetaSGMCMCSettings"."""
    words = {"l2e": "L2E", "sgmcmc": "SGMCMC"}
    return "".join(words.get(w, w.capitalize()) for w in method.split("_")) + "Settings"


SHIPPED_LEARNED = tuple((s.method, settings_class_name(s.method), s.name, entry.lrs, entry.samples, entry.config)
                        for entry in learned.REGISTRY.values() for s in entry.shipped if s.method)
"""(method, settings class, shipped checkpoint, default lr grid, kinetic check: LearnedSampler.samples, the kind's
configuration class) of every shipped learned sampler with a method of its own, from the learned-sampler registry
(l2e.learned) in its order: a new row there is a new method here."""

METHOD_TABLE: dict[str, Method] = {row[0]: learned_method(*row) for row in SHIPPED_LEARNED}
"""The methods of SHIPPED_LEARNED by name (registry entries "l2e:<name>")."""

globals().update({m.settings.__name__: m.settings for m in METHOD_TABLE.values()})  # L2EMassSettings, … (pickle)
