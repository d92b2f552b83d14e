"""The L2E authors' released sampler (`meta_params.pickle`, read by `l2e.released.load_released`): the L2E
step with the released code's constants (output scales 1e-3, noise "reference" N(0, 2·C·τ) with τ = 0.001,
friction 0.1) and N the task's; one chain of G updates with the SGHMC sample schedule.

Its learning rate is tuned over a grid like L2E's rather than fixed at the released 0.5: lr = ε²·N is in
mean-loss units whose good value depends on the task (the released 0.5 was chosen on the authors' tasks), every
other method's lr is tuned on the same inner-validation examples, and the grid contains 0.5, so the released
value wins whenever it is the best one.  Path: `--released PATH` (default `default_released_path()`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from evaluate.budget import single_chain_schedule
from evaluate.methods.base import Method, check_grid, lr_grid
from evaluate.methods.l2e import run_l2e
from tasks.data.base import default_path, searched

__all__ = ["L2EReleasedSettings", "METHOD", "RELEASED_DIR", "default_released_path", "load_released_sampler"]

RELEASED_DIR = "l2e_released"
"""The released meta-parameters' folder name under a data root ($L2E_DATA_DIR or ~/.cache/l2e)."""


@dataclasses.dataclass(frozen=True)
class L2EReleasedSettings:
    """lrs: learning rates lr = ε²·N replacing the released 0.5 (which the default grid contains)."""

    lrs: tuple[float, ...] = (0.25, 0.5, 1.0)

    def __post_init__(self):
        check_grid(self, "settings.l2e_released", "lrs")


def default_released_path() -> Path:
    """$L2E_DATA_DIR/l2e_released if it exists, else ~/.cache/l2e/l2e_released (tasks.data.base.default_path)."""
    return default_path(RELEASED_DIR)


def released_file(path=None) -> Path:
    """The pickle itself: `path` (default `default_released_path()`), or its meta_params.pickle if a directory."""
    path = Path(path) if path is not None else default_released_path()
    return path / "meta_params.pickle" if path.is_dir() else path


def load_released_sampler(path=None) -> dict:
    """{"meta_params", "sampler" (the released L2EConfig), "path"}; FileNotFoundError if the file is missing,
    l2e.released.ReleasedFormatError (a ValueError) if it is refused."""
    from l2e.released import load_released

    file = released_file(path)
    if not file.is_file():
        where = file if path is not None else f"neither {searched(RELEASED_DIR)} holds meta_params.pickle"
        raise FileNotFoundError(f"released meta-parameters not found: {where}")
    meta_params, sampler = load_released(file)
    return {"meta_params": meta_params, "sampler": sampler, "path": str(file)}


METHOD = Method("l2e_released", L2EReleasedSettings, run_l2e, grid=lr_grid,
                schedule=lambda cfg, s: single_chain_schedule(cfg), needs_released=True, temperature=0.001,
                batch_chains=True,
                grids=dict(every=dict(lrs=(0.25, 0.5, 1.0)), full=dict(lrs=(0.125, 0.25, 0.5, 1.0)),
                           smoke=dict(lrs=(0.5,))))
