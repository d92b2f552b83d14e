"""Meta-training of the L2E sampler with antithetic evolution strategies (`python -m meta_train`)."""
from meta_train.config import PRESETS, ConfigError, ESConfig, MetaTrainConfig, apply_overrides
from meta_train.train import RunDirError, meta_train

__all__ = ["PRESETS", "ConfigError", "ESConfig", "MetaTrainConfig", "RunDirError", "apply_overrides", "meta_train"]
