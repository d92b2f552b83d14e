"""Preconditioned SGHMC (l2e.precond_sghmc): one chain of G updates whose diagonal mass is adapted over the second half
of the burn-in and frozen at the first update of the sampling window; the SGHMC sample schedule; tuned over learning
rate × friction in SGHMC's units, the lr grid reaching 10× SGHMC's (M⁻¹ ≤ 1: the preconditioner only slows coordinates
down, so it pays off at larger lr). Two methods, one per rule (METHOD_TABLE, registered by the line
"precond_sghmc:*"): `precond_rmsprop` (Izmailov et al. 2021's RMSprop diagonal) and `precond_fisher` (the
Fisher-divergence diagonal σ = (Var θ / Var ∇U)^{1/4} of Seyboldt et al. 2026 / nutpie, the minibatch noise
variance subtracted, estimated from two half-batches: an even batch size)."""
from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp

import l2e.precond_sghmc
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, always, check_grid, check_in
from evaluate.methods.driver import lr_args, run_single_chain
from l2e.chains import adaptation_start, freeze_phase
from base.io import ConfigError

__all__ = ["METHOD_TABLE", "PrecondFisherSettings", "PrecondRMSpropSettings", "run_precond"]


def _settings(name: str, doc: str) -> type:
    def __post_init__(self):
        check_grid(self, f"settings.{name}", "lrs", "frictions")
        check_in(self, f"settings.{name}", "adapt_fraction", 0.0, 1.0)
        if self.adapt_fraction == 0.0:
            raise ConfigError(f"settings.{name}.adapt_fraction must be in (0, 1], got 0")

    fields = [("lrs", tuple[float, ...], dataclasses.field(default=(0.01, 0.03, 0.1, 0.3, 1.0))),
              ("frictions", tuple[float, ...], dataclasses.field(default=(3.0, 10.0, 30.0))),
              ("adapt_fraction", float, dataclasses.field(default=0.5))]
    cls_name = "".join(w.capitalize() for w in name.split("_")).replace("Rmsprop", "RMSprop") + "Settings"
    return dataclasses.make_dataclass(cls_name, fields, frozen=True, namespace={
        "__doc__": doc, "__module__": __name__, "__qualname__": cls_name, "__post_init__": __post_init__})


PrecondRMSpropSettings = _settings("precond_rmsprop", "lrs, frictions: the grid (SGHMC's units); adapt_fraction: the "
                                   "last fraction of the burn-in over which the RMSprop statistic is gathered.")
PrecondFisherSettings = _settings("precond_fisher", "lrs, frictions: the grid (SGHMC's units); adapt_fraction: the "
                                  "last fraction of the burn-in over which Var θ and Var ∇U are gathered.")


def _grid(s) -> list[dict]:
    return [{"learning_rate": lr, "friction": c} for lr in s.lrs for c in s.frictions]


def _window_start(schedule) -> int:
    return max(1, schedule.num_steps - schedule.num_samples * schedule.thinning)


def _kernel(task, rule: str, adapt_fraction: float, phase: str | None = None):
    """The chunk kernel; the freeze step is the call argument args["freeze"] (traced: one compiled chunk per phase
    serves every budget)."""
    def kernel(key, state, batch, args):
        step = l2e.precond_sghmc.build_kernel(task.posterior, rule, args["freeze"], adapt_fraction, phase=phase)
        return step(key, state, batch, args["lr"], args["friction"])

    return kernel


def _check(cfg, s):
    if cfg.batch_size % 2:
        raise ConfigError(f"the Fisher-divergence preconditioner splits each minibatch in two halves: batch_size "
                          f"must be even, got {cfg.batch_size}")


def _runner(rule: str):
    def run(ctx, key, hp: dict):
        """One preconditioned-SGHMC chain; hp: learning_rate, friction (default: the first of the grid)."""
        schedule = single_chain_schedule(ctx.cfg)
        freeze, frac = _window_start(schedule), float(ctx.settings.adapt_fraction)
        friction = float(hp.get("friction", ctx.settings.frictions[0]))
        hp = {**hp, "friction": friction, "thinning": ctx.cfg.sample_thinning, "temperature": 1.0,
              "preconditioner": rule, "freeze_step": freeze, "adapt_fraction": frac}
        args = {**lr_args(hp), "friction": jnp.asarray(friction, jnp.float32), "freeze": jnp.asarray(freeze, jnp.int32)}
        return run_single_chain(ctx, key, hp, schedule, ("precond_sghmc", rule, frac),
                                functools.partial(_kernel, ctx.task, rule, frac), l2e.precond_sghmc.init,
                                args, phase_of=functools.partial(freeze_phase, freeze,
                                                                 adapt_start=adaptation_start(freeze, frac)))

    return run


def run_precond(ctx, key, hp: dict, rule: str = "fisher"):
    """One preconditioned-SGHMC chain of rule `rule` ("rmsprop" or "fisher")."""
    return _runner(rule)(ctx, key, hp)


def _card(kind: str):
    """The card's builder: the mass adapted over the first fifth, then frozen; "fisher" estimates the minibatch noise
    from two half-batches as in the evaluation (`halves = True`: the card gives it two half-batch rows per noise draw,
    evaluate.card.half_batches)."""
    def build(post, eps, c, smin, steps):
        return l2e.precond_sghmc(post, eps**2 * post.data_size, c, preconditioner=kind, freeze_step=steps // 5), always
    build.halves = kind == "fisher"
    return build


def _step_cost(kind: str, phases: tuple[str, ...]):
    """bench.step_cost's rows: the burn-in kernel, then the adaptation window's and the window's ("(adapt)",
    "(window)") where asked, as the evaluation runs them."""
    def rows(post, fpost):
        name = f"precond_{kind}"
        out = {name: l2e.precond_sghmc(post, 0.05, 15.0, preconditioner=kind, freeze_step=10**9, phase="burn_in")}
        if "adapt" in phases:
            out[f"{name} (adapt)"] = l2e.precond_sghmc(post, 0.05, 15.0, preconditioner=kind, freeze_step=10**9,
                                                       phase="adapt")
        if "window" in phases:
            out[f"{name} (window)"] = l2e.precond_sghmc(post, 0.05, 15.0, preconditioner=kind, freeze_step=1,
                                                        phase="window")
        return out
    return rows


_FULL = dict(lrs=(0.03, 0.1, 0.3, 1.0), frictions=(10.0,))
_SMOKE = dict(lrs=(0.03,), frictions=(10.0,))
METHOD_TABLE = {
    "precond_rmsprop": Method("precond_rmsprop", PrecondRMSpropSettings, _runner("rmsprop"), grid=_grid,
                              schedule=lambda cfg, s: single_chain_schedule(cfg), kinetic_check=True, audit=True,
                              batch_chains=True, grids=dict(full=_FULL, smoke=_SMOKE), card=_card("rmsprop"),
                              step_cost=_step_cost("rmsprop", ())),
    "precond_fisher": Method("precond_fisher", PrecondFisherSettings, _runner("fisher"), grid=_grid,
                             schedule=lambda cfg, s: single_chain_schedule(cfg), check=_check, kinetic_check=True,
                             audit=True, batch_chains=True, grids=dict(full=_FULL, smoke=_SMOKE), card=_card("fisher"),
                             step_cost=_step_cost("fisher", ("adapt", "window"))),
}
