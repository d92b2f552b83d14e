"""Meta-training of a learned sampler (any kind of the learned-sampler registry l2e.learned: `sampler_kind`) by an
outer gradient estimator — antithetic, truncated, persistent or noise-reuse ES, or truncated backprop
(`python -m meta_train`; docs/meta_training.md).

Submodules: config (MetaTrainConfig, ESConfig, ObjectiveConfig), presets (the named configurations), estimators (the
estimator table and one module per estimator, behind one interface), objectives (the meta-objective table), es (the
fitness of an ES population over whole inner chains: programs, meta-losses), outer (the pure outer step through the
estimator table), run_dir (the run directory: config, log, plot, checkpoints, resume, lock), train (the loop),
reference (NUTS references for the fidelity objective), faults (fault injection for tests), distributed (multi-host
start-up). Names are imported lazily so that `python -m meta_train --distributed` can call
`jax.distributed.initialize()` before anything touches JAX.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "PRESETS": "meta_train.presets", "ConfigError": "meta_train.config", "ESConfig": "meta_train.config",
    "MetaTrainConfig": "meta_train.config", "ObjectiveConfig": "meta_train.config", "apply_overrides": "meta_train.config",
    "RunDirError": "meta_train.run_dir", "meta_train": "meta_train.train",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'meta_train' has no attribute {name!r}")
