"""L2E: the learned sampler of a meta-training checkpoint, one chain of G updates with the SGHMC sample schedule;
the checkpoint's sampler configuration with its learning_rate replaced by each grid value.  The checkpoint's kind
(l2e.checkpoint.KINDS: the paper-form step, Kinetic-L2E, Mass-L2E) picks the kernel; a kind that freezes
constants before sampling (Mass-L2E's freeze_step) freezes them at the first update of the sampling window.  The
temperature is the checkpoint's T (with the released code's noise mode "reference", N(0, 2·C·τ) without the ε
factor, the record adds the SGHMC-equivalent τ/ε at the chosen lr)."""
from __future__ import annotations

import dataclasses
import math

import l2e
from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.driver import lr_args, run_single_chain

__all__ = ["L2ESettings", "METHOD", "l2e_record", "run_l2e"]


@dataclasses.dataclass(frozen=True)
class L2ESettings:
    """lrs: learning rates lr = ε²·N replacing the checkpoint's."""

    lrs: tuple[float, ...] = (0.25, 0.5, 1.0)

    def __post_init__(self):
        check_grid(self, "settings.l2e", "lrs")


def sampler_module(sampler):
    """The sampler module (init, build_kernel) of a learned sampler's config (l2e.checkpoint.KINDS)."""
    from l2e.checkpoint import KINDS

    for kind in KINDS.values():
        if isinstance(sampler, kind.config):
            return kind.module
    raise TypeError(f"not a learned sampler configuration: {type(sampler).__name__}")


def _kernel(task, sampler):
    step = sampler_module(sampler).build_kernel(task.posterior, sampler)

    def kernel(key, state, batch, args):
        return step(key, state, batch, args["meta"], learning_rate=args["lr"])

    return kernel


def l2e_record(ctx, hp: dict, sampler: l2e.L2EConfig) -> dict:
    """The hyperparameter record of an L2E run: lr, thinning, the sampler configuration, its temperature, the
    checkpoint (hp["checkpoint"] when given) and, for noise "reference", the SGHMC-equivalent temperature."""
    record = {"learning_rate": hp["learning_rate"], "thinning": ctx.cfg.sample_thinning,
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
    meta_params, sampler = hp["meta_params"], hp["sampler"]
    schedule = single_chain_schedule(ctx.cfg)
    if hasattr(sampler, "freeze_step"):  # constants frozen from the first update of the sampling window on
        sampler = dataclasses.replace(sampler, freeze_step=max(1, schedule.num_steps - schedule.num_samples
                                                               * schedule.thinning))
    static = dataclasses.replace(sampler, learning_rate=1.0)  # lr is a traced call argument; the rest is static
    args = {**lr_args(hp), "meta": meta_params}
    return run_single_chain(ctx, key, l2e_record(ctx, hp, sampler), schedule, ("l2e", static),
                            lambda: _kernel(ctx.task, static), sampler_module(sampler).init, args)


METHOD = Method("l2e", L2ESettings, run_l2e, grid=lr_grid, schedule=lambda cfg, s: single_chain_schedule(cfg),
                needs_sampler=True)
