"""Resource limits of the command lines, checked before anything is allocated or computed, so that no input can hang
a run or exhaust its memory (the task layer bounds models and data: tasks.limits; base.io bounds the JSON files read).
`HELP` states them for every CLI's --help."""
from __future__ import annotations

from typing import Any

from base.io import MAX_FILE_BYTES, MAX_JSON_DEPTH, ConfigError

__all__ = ["HELP", "MAX_BATCH", "MAX_CHAINS", "MAX_EXAMPLES", "MAX_GRID", "MAX_OUTER", "MAX_POPULATION",
           "MAX_META_LAYERS", "MAX_META_WIDTH", "MAX_SAMPLES", "MAX_SAMPLE_BYTES", "MAX_SECONDS", "MAX_STEPS", "at_most"]

MAX_STEPS = 10**8
"""Updates (gradient evaluations) of one chain or run: num_steps, warm-up, thinning, chunks."""
MAX_SAMPLES = 10**5
"""Kept samples of one run (num_samples, NUTS draws per chain)."""
MAX_OUTER = 10**7
"""Outer iterations of meta-training (num_outer, checkpoint_every)."""
MAX_CHAINS = 1024
"""Chains of one run (EvalConfig.chains, NUTS --chains)."""
MAX_BATCH = 10**6
"""Minibatch and evaluation batch sizes."""
MAX_EXAMPLES = 10**8
"""Example counts of a configuration (tuning / barrier / meta-loss examples)."""
MAX_POPULATION = 10**5
"""ES population size of meta-training."""
MAX_GRID = 10**4
"""Points of one tuning grid."""
MAX_SECONDS = 10**7
"""Wall seconds of one timed run (budget_seconds): about 115 days."""
MAX_META_WIDTH = 2**16
"""Units of one hidden layer of a learned sampler's meta-model (meta_train's `hidden`)."""
MAX_META_LAYERS = 64
"""Hidden layers of a learned sampler's meta-model."""
MAX_SAMPLE_BYTES = 8 * 2**30
"""Kept samples of one run in memory (num_samples float32 copies of the parameters): 8 GiB."""

HELP = (f"limits (checked before anything runs): at most {MAX_STEPS:.0e} updates per run, {MAX_SAMPLES:.0e} kept "
        f"samples, {MAX_CHAINS} chains, batches of {MAX_BATCH:.0e}, {MAX_OUTER:.0e} outer iterations, an ES "
        f"population of {MAX_POPULATION:.0e}, a meta-model of {MAX_META_LAYERS} hidden layers of {MAX_META_WIDTH} units, "
        f"{MAX_SAMPLE_BYTES // 2**30} GiB of kept samples; JSON / text inputs at most {MAX_FILE_BYTES // 2**20} MiB and "
        f"{MAX_JSON_DEPTH} levels deep")


def at_most(name: str, value: Any, limit: int | float, error: type[Exception] = ConfigError) -> None:
    """Refuse a number above its resource limit (non-numbers pass: the caller's own checks report them).

    Args:
      name: the field or flag, for the message.
      value: the value.
      limit: the largest value accepted.
      error: the exception type raised.
    Returns:
      None.
    Raises:
      error: value > limit.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        raise error(f"{name} must be at most {limit:g} (a resource limit), got {value:g}")
