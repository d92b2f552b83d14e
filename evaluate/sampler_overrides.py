"""A learned method's sampler overrides (`settings.<method>.sampler`, "field=value" of its checkpoint's sampler
configuration) checked against the checkpoint it will run, before anything runs, and recorded as what runs.

`evaluate.methods.l2e.override_sampler` applies them when a chain starts; a method whose checkpoint kind is not known
before loading (`l2e`, run on `--sampler`) could only be checked there, after the other methods had run. Here every
learned method's overrides are applied to its loaded checkpoint's configuration (evaluate.run.load_samplers calls
`check_sampler_overrides`), and refused when they would not run as asked:
- a field the evaluation's sampling-window rule sets (l2e.types.Protocol.window: Mass-L2E's and Transient-L2E's
  freeze_step is the first update of the sampling window) — `freeze_step=10` was accepted and 30 ran;
- a change of the declared sampling window (Protocol.window_fraction) while the evaluation fixes `thinning` (the
  window is then thinning·K, and the declared one is not read).
The overrides are then rewritten as "field=value" of the parsed, checked values, so the report's configuration
records the values that ran."""
from __future__ import annotations

import dataclasses

from base.io import ConfigError
from cli.overrides import parse_overrides
from evaluate.methods.registry import get_method
from l2e import learned

__all__ = ["check_sampler_overrides", "window_fields"]


def window_fields(entry, config) -> tuple[str, ...]:
    """The fields of `config` that `entry`'s sampling-window rule sets (those that differ between the windows
    starting at updates 1 and 2); () for a sampler that freezes nothing.

    Args:
      entry: the kind's l2e.types.LearnedSampler.
      config: an instance of entry.config.
    Returns:
      the field names.
    """
    if entry.window is None:
        return ()
    one, two = entry.sampling_config(config, 1), entry.sampling_config(config, 2)
    return tuple(f.name for f in dataclasses.fields(config) if getattr(one, f.name) != getattr(two, f.name))


def _checked(method: str, base, overrides: tuple[str, ...], thinning: int | None) -> tuple[str, ...]:
    """The overrides of `method` applied to its checkpoint's configuration `base`, as canonical "field=value"."""
    from evaluate.methods.l2e import override_sampler

    where = f"settings.{method}.sampler"
    try:
        ran = override_sampler(base, overrides)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    entry = learned.kind_of_config(ran)
    keys = list(parse_overrides(list(overrides)))
    fixed = [k for k in keys if k in window_fields(entry, base)]
    if fixed:
        raise ConfigError(f"{where}: {fixed[0]} is set by the evaluation ({entry.title}'s window rule: the first update "
                          "of the sampling window, num_steps − num_samples·thinning), so the value given would never "
                          "run; move the window with thinning")
    if thinning is not None and entry.window_fraction(ran) != entry.window_fraction(base):
        raise ConfigError(f"{where}: {', '.join(keys)} changes {entry.title}'s sampling window, which thinning="
                          f"{thinning} fixes (the window is the last num_samples·thinning updates), so it would never "
                          "run; unset thinning (--set thinning=none) to sample the sampler's own window")
    return tuple(f"{k}={getattr(ran, k)}" for k in keys)


def check_sampler_overrides(cfg, samplers: dict):
    """`cfg` with every learned method's `settings.<method>.sampler` checked against the checkpoint it runs and
    rewritten as the parsed values ("field=value", in the order given).

    Args:
      cfg: the EvalConfig.
      samplers: the loaded checkpoints (evaluate.run.load_samplers: "l2e" and each shipped name a method names).
    Returns:
      the EvalConfig.
    Raises:
      ConfigError: one line naming the method and the override (see the module docstring).
    """
    new = {}
    for method in cfg.methods:
        needs = get_method(method).needs_sampler
        settings = getattr(cfg.settings, method)
        overrides = getattr(settings, "sampler", ())
        if not needs or not overrides:
            continue
        loaded = samplers[needs if isinstance(needs, str) else "l2e"]["sampler"]
        canonical = _checked(method, loaded, tuple(overrides), cfg.thinning)
        if canonical != tuple(overrides):
            new[method] = dataclasses.replace(settings, sampler=canonical)
    return dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, **new)) if new else cfg
