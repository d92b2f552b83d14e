"""The learned-sampler registry: one table, name -> `l2e.types.LearnedSampler`.

Every learned sampler is one module of this package that declares `LEARNED = LearnedSampler(...)` (its config
dataclass, `init` / `build_kernel` / factory, meta-parameter initialisation with the "equals SGHMC" start, the
meta-model's features and output width, the sampling-window rule, its evaluation lr grid and shipped checkpoints).
Checkpoints (l2e.checkpoint), meta-training (its config groups, φ₀, the estimators' kernels), the evaluation
(learned methods, checkpoint selection, the sampler card) and the benches read this table and nothing else.

Adding a learned sampler: write `l2e/<name>.py` with its `LEARNED`, and add "<name>" to `MODULES` below (one line).
"""
from __future__ import annotations

import importlib
from typing import Any


from l2e.meta_model import check_stack
from l2e.types import LearnedSampler, PyTree, Shipped

__all__ = ["DEFAULT_SHIPPED", "MODULES", "REGISTRY", "check_meta_params", "check_stack", "get", "kind_of_config", "shipped"]

MODULES = (  # one line per learned sampler (its module l2e.<name>), in the order tables and evaluation methods list them
    "mass",
    "kinetic",
    "meta_sgmcmc",
    "l2e",
    "step_scale",
    "transient",
)

REGISTRY: dict[str, LearnedSampler] = {
    m.LEARNED.name: m.LEARNED for m in (importlib.import_module(f"l2e.{name}") for name in MODULES)}
"""name (the checkpoint's `sampler_kind`) -> LearnedSampler."""

DEFAULT_SHIPPED = "transient"
"""The shipped checkpoint `l2e.load_sampler()` loads when given no name (also reachable as "default"): Transient-L2E,
the shipped sampler that is tuning-free — no learning rate to be wrong for a new model or data size. Mass-L2E at its
checkpoint's learning rate, the default before, ran at T_kin 80–85 on a logistic regression of N = 20,000 and
diverged on every power-plant run (docs/decisions.md, "Transient-L2E is the drop-in default")."""


def get(name: str) -> LearnedSampler:
    """A learned sampler's registry entry.

    Args:
      name: a key of REGISTRY.
    Returns:
      REGISTRY[name].
    Raises:
      ValueError: naming the known kinds.
    """
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"unknown learned sampler {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name]


def kind_of_config(config: Any) -> LearnedSampler:
    """The registry entry whose config class `config` is an instance of.

    Args:
      config: a learned sampler's configuration.
    Returns:
      its LearnedSampler.
    Raises:
      TypeError: not a learned sampler configuration.
    """
    for entry in REGISTRY.values():
        if isinstance(config, entry.config):
            return entry
    raise TypeError(f"not a learned sampler configuration: {type(config).__name__}")


def shipped() -> dict[str, tuple[LearnedSampler, Shipped]]:
    """Every shipped checkpoint, in registry order.

    Returns:
      {name: (its kind's LearnedSampler, its Shipped row)}.
    """
    return {s.name: (entry, s) for entry in REGISTRY.values() for s in entry.shipped}


def check_meta_params(entry: LearnedSampler, tree: Any, where: str) -> PyTree:
    """Validate a restored meta-parameter tree against `entry`'s meta-model (one Dense stack features → … →
    outputs, or one per head).

    Args:
      entry: the kind's LearnedSampler.
      tree: the restored tree.
      where: the name in the error message.
    Returns:
      the tree with float32 numpy leaves.
    Raises:
      ValueError: one line naming `where`.
    """
    if entry.check is not None:
        return entry.check(tree, where)
    heads = entry.heads
    if heads is None:
        return check_stack(tree, where, entry.inputs, entry.outputs)
    names = sorted(tree) if isinstance(tree, dict) else None
    if names != sorted(heads):
        raise ValueError(f"{where}: not a {entry.title} meta-parameter tree (expected heads "
                         f"{', '.join(sorted(heads))}; got {', '.join(map(str, names)) if names else 'none'})")
    return {h: check_stack(tree[h], f"{where} (head {h!r})", n, entry.outputs) for h, n in heads.items()}
