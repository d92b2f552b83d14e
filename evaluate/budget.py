"""Budgets: the equal-budget chain schedules of the minibatch methods and the gradient accounting of a run.

Minibatch methods share G = cfg.num_steps minibatch gradient evaluations of B = cfg.batch_size examples:
  * a single chain keeps K = cfg.num_samples states `thinning` updates apart, the last after update G
    (`single_chain_schedule`; default thinning cfg.sample_thinning);
  * an ensemble runs K members of G/K updates each and keeps every member's last state (`member_schedule`).
Full-batch methods (every gradient over all N training examples) have their own budgets.
epochs = example-gradients / N makes the two kinds comparable.
"""
from __future__ import annotations

from l2e.chains import ChainSchedule

__all__ = ["budget_note", "epochs", "example_grads", "gradient_label", "member_schedule", "single_chain_schedule"]


def single_chain_schedule(cfg, thinning: int | None = None) -> ChainSchedule:
    """One chain of G updates keeping K states `thinning` (default cfg.sample_thinning) updates apart."""
    thin = cfg.sample_thinning if thinning is None else thinning
    return ChainSchedule(cfg.num_steps, cfg.num_samples, thin, cfg.batch_size, cfg.chunk)


def member_schedule(cfg) -> ChainSchedule:
    """One ensemble member: G/K updates, its last state kept."""
    steps = cfg.num_steps // cfg.num_samples
    return ChainSchedule(steps, 1, steps, cfg.batch_size, cfg.chunk)


def example_grads(res, data_size: int) -> int:
    """Per-example gradients of a MethodResult: grad_evals × N (full batch) or × B (minibatch)."""
    per = data_size if res.gradient == "full-batch" else res.batch_size
    return int(res.grad_evals) * int(per)


def epochs(res, data_size: int) -> float:
    """Per-example gradients of a MethodResult / N."""
    return example_grads(res, data_size) / data_size


def gradient_label(res, data_size: int) -> str:
    """"full-batch (N=…)" or "minibatch (B=…)"."""
    return f"full-batch (N={data_size})" if res.gradient == "full-batch" else f"minibatch (B={res.batch_size})"


def budget_note(shared: list[str], own: list[str]) -> str:
    """The report's budget sentence for the registered minibatch (`shared`) and full-batch (`own`) methods."""
    return (f"minibatch methods ({', '.join(shared)}) share the budget of G = num_steps minibatch gradient "
            f"evaluations; {' and '.join(own)} use full-batch gradients and their own budgets (settings.<method>), "
            "after a deep-ensemble warm start whose cost is recorded in hyperparameters.warm_start; 'epochs' = "
            "example-gradients / N makes the budgets comparable")
