"""The objective config group `objective.*` (ObjectiveConfig, re-exported by meta_train.config): the kind, the
sampling window, the reference, and the settings the objectives own (meta_train.objectives.Objective.fields) or
share (the T_kin penalty, the budgets of the shared meta-loss). Here, beside the objectives, so that the chains'
code (meta_train.es) can build one without importing the run configuration."""
from __future__ import annotations

import dataclasses

from base.io import ConfigError
from meta_train import objectives
from meta_train.objectives.protocol import check_weight



@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """The meta-objective over an inner chain's samples (docs/meta_training.md § Objectives; meta_train.objectives).

    kind: "bma" — NLL of the K samples' Bayesian model average (paper eq. 7); "ce" — mean of the samples'
    individual NLLs (the paper's cross-entropy ablation, eq. 12); "ksd" — kernel Stein discrepancy of the samples
    against the model's score; "stein_kl" — Meta-SGMCMC's Stein-gradient KL surrogate over one chain's K samples
    (in-chain form), gradient-only (a pathwise es.estimator: "backprop"); "stein_kl_cross" — the same surrogate in
    the cross-chain form: `chains` parallel chains per outer iteration (independent θ₀ and keys, vmapped), the
    surrogate over the chains' states at each of the K sample times, averaged over them; gradient-only;
    "fidelity" — total variation between the K samples' BMA predictive and a NUTS reference's predictive on the
    reference's test points (the task's test split), mean over test points: classification tasks only, every task of
    the
    distribution needs a reference in `reference` (checked before anything runs; meta_loss_examples is not used).
    The meta-loss batch of bma / ce / ksd / stein_kl(_cross) is meta_loss_examples examples of the outer-validation
    split; the inner chains train on the train split, which holds neither validation nor test examples.
    burn_in: 0 — the samples are where `inner` puts them (the last one after the final update, `inner.thinning`
    apart); B > 0 — the K samples are spread evenly over the window after burn-in, (B, num_steps]: thinning
    (num_steps − B) // K, the last after the final update (`inner.thinning` is then not used).
    log_temperature: log each member's kinetic temperature T_kin = ⟨Σ r·∇_rK⟩ / d over the sampling window (the
    K·thinning updates ending at the last sample) in the log row ("t_kin"); runs a program that keeps the
    per-step infos (antithetic ES; the truncated ES estimators measure T_kin per segment when temperature_weight
    is on).
    reference: for "fidelity", a reference directory as `python -m evaluate reference` writes it (reference.json +
    one subdirectory per task with metadata.json and probs.txt; meta_train.reference), e.g. "results/references".
    chains: for "stein_kl_cross", the number C ≥ 2 of parallel chains (Meta-SGMCMC uses 20).
    dispersion_weight: for "fidelity", w ≥ 0 of the penalty on the samples' predictive-variance ratio to the
    reference draws' outside [0.8, 1.25] (meta_train.objectives.fidelity; needs the references' draw_probs.npz).
    A setting an objective owns (meta_train.objectives.Objective.fields) is refused with another kind.
    temperature_weight: w_T ≥ 0: each member's meta-loss gains w_T·log(1 + |T_kin − T|/T) (needs log_temperature;
    ≈ linear near T, and logarithmic so that chains that blow up still rank below the divergence cap): the
    objective's host-side penalty (meta_train.objectives.protocol), so not with the pathwise estimator.
    budgets: inner chain lengths the meta-loss is averaged over (() : inner.num_steps alone): each outer iteration
    runs every member once per budget b — the same keys for all members — with burn_in scaled to
    round(burn_in·b / inner.num_steps), so the sampler is trained along the budget curve, not at one point
    (meta_train.meta_loss; full-chain estimators: a truncated one refuses it, naming why).
    """

    kind: str = "bma"
    burn_in: int = 0
    log_temperature: bool = False
    reference: str | None = None
    chains: int = 4
    dispersion_weight: float = 0.0
    temperature_weight: float = 0.0
    budgets: tuple[int, ...] = ()

    def __post_init__(self):
        if self.kind not in objectives.OBJECTIVES:  # the live table (an objective registered at run time counts)
            raise ConfigError(f"objective.kind must be one of {tuple(objectives.OBJECTIVES)}, got {self.kind!r}")
        if self.burn_in < 0:
            raise ConfigError(f"objective.burn_in must be ≥ 0, got {self.burn_in}")
        if isinstance(self.chains, bool) or not isinstance(self.chains, int) or self.chains < 2:
            raise ConfigError(f"objective.chains must be an integer ≥ 2, got {self.chains!r}")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in sorted({n for o in objectives.OBJECTIVES.values() for n in o.fields}):
            if getattr(self, name) != defaults[name] and self.kind not in objectives.owners(name):
                raise ConfigError(f"objective.{name} needs objective.kind {' or '.join(objectives.owners(name))}, "
                                  f"got {self.kind!r}")
        entry = objectives.get(self.kind)
        if entry.check is not None:
            entry.check(self)
        check_weight(self, "temperature_weight")
        if self.temperature_weight and not self.log_temperature:
            raise ConfigError("objective.temperature_weight needs objective.log_temperature=true")
        if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in self.budgets):
            raise ConfigError(f"objective.budgets must be positive integers, got {self.budgets!r}")


__all__ = ["ObjectiveConfig"]
