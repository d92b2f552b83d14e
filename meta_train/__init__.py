"""Meta-training of a learned sampler (the paper-form L2E or Kinetic-L2E: `sampler_kind`) with antithetic evolution
strategies (`python -m meta_train`).

Submodules: config (MetaTrainConfig, ESConfig), presets (the named configurations), es (the fitness of an ES
population: inner chains and meta-loss), outer (the pure outer step: ask, fitness shaping, tell, log row),
run_dir (the run directory: config, log, plot, checkpoints, resume, lock), train (the loop), faults (fault
injection for tests), distributed (multi-host start-up).  Names are imported lazily so that
`python -m meta_train --distributed` can call `jax.distributed.initialize()` before anything touches JAX.
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
