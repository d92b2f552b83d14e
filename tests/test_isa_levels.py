"""The float-sensitive tests pass at more than one of XLA's CPU instruction levels (issue 36, item 7).

XLA:CPU compiles for the widest vector instructions of the host, and float32 results change with them; numpy's
OpenBLAS likewise picks its float64 kernels for the CPU. A test that compares floats across processes, devices or
stored files with a tolerance fitted to one machine fails on the next one. `test_float_sensitive_tests_pass_at_two_
instruction_levels` runs FLOAT_SENSITIVE in a subprocess at the host's own level and again at SSE4_2 with OpenBLAS's
Prescott kernels (the level every x86-64 machine has), and asserts both pass. Skipped off x86-64.

Inventory (float comparisons across processes, devices or stored files; what each compares; how it is kept true):

- test_golden.py::test_smoke_meta_training_matches_golden — φ and fitnesses of a smoke meta-training against
  tests/golden/meta_train_smoke.json (stored file, recorded at commit 483545b), to 2e-4 / 5e-5: the pinned level
  gave the same bits on earlier machines but 6.7e-5 / 1.5e-5 off on an AMD EPYC without AVX-512 (run-time-dispatched
  kernels ignore it; test_golden.py's docstring). Unpinned, φ moved
  by 5.8e-5 SSE4_2 / AVX vs AVX-512 and 9.4e-7 AVX2 vs AVX-512 here (4.5e-4 on another AMD EPYC). Fix: the run is a
  subprocess at a pinned level (conftest.PINNED_XLA_FLAGS: --xla_cpu_max_isa=SSE4_2, Eigen single-threaded) and the
  golden is re-recorded from 483545b at that level; 483545b and the current code give the same bits there, and
  1 vs 2 cores gave the same bits.
- test_golden.py::test_smoke_evaluation_matches_golden — the smoke evaluation's metrics to 1e-6 against
  tests/golden/evaluate_smoke.json. Unpinned: 3.6e-7 SSE4_2 vs AVX-512 (at 483545b), a 2.8x margin. Fix: pinned as
  above, golden re-recorded from 483545b at the pinned level.
- test_paper_scale.py::test_meta_training_independent_of_device_count[vmap] — φ on 1 vs 4 forced host devices
  (two processes; a vmapped batch vs one member per device: different programs). 1-vs-4 max |Δφ|: 6.1e-7 (AVX-512),
  6.2e-6 (AVX2), 3.1e-6 (AVX), 3.1e-6 (SSE4_2); 3.08e-6 on the EPYC without AVX-512, where atol 2e-6 failed. Fix:
  VMAP_DEVICE_TOL = 2e-5, from the spread across levels.
- test_paper_scale.py::test_meta_training_independent_of_device_count[sequential] — the same single-member programs
  on 1 and 4 devices, bit for bit (two processes, same level: "same program, same numbers"; kept).
- test_paper_scale.py::test_evaluation_chains_independent_of_device_count — DE / NUTS bit for bit (same programs,
  round robin), MILE within MILE_ROUNDING_TOL = 5e-3 (derived from MILE's measured sensitivity; 1-vs-4 spreads
  1.5e-7 to 2.4e-6 across levels and machines); kept.
- test_paper_scale.py::test_two_process_distributed_run_matches_single_process — 2 processes x 2 devices vs 1
  process, φ within 2e-6 (6.4e-7 measured on one machine; not re-measured across levels here: a candidate for the
  same treatment as VMAP_DEVICE_TOL, slow, not in FLOAT_SENSITIVE).
- test_curve.py::test_merge_with_reference_rereads_a_run_against_the_recomputed_floors — the energy floors stored in
  results/curve_power_plant_long_merged vs recomputed from results/references (float64, numpy / OpenBLAS). Off by
  7.8e-7 relative on this machine (Zen kernels) against the stored SkylakeX numbers; 1.05e-6 at most over OpenBLAS's
  kernels. Fix: ENERGY_FLOOR_RTOL = 1e-5; the to_floor re-read is compared within the process, exactly (kept).
- Within one process (not in the list): vmap vs loop, resume vs uninterrupted (test_reliability, test_fuzz: the same
  machine and level in both processes), shipped checkpoints' structure (test_published, test_transient: no stored
  outputs compared), test_hmc_reference's %.18e round trip (exact by construction).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, is_x86_64, xla_flags_with

FLOAT_SENSITIVE = (
    "tests/test_golden.py::test_smoke_meta_training_matches_golden",
    "tests/test_paper_scale.py::test_meta_training_independent_of_device_count[vmap]",
    "tests/test_curve.py::test_merge_with_reference_rereads_a_run_against_the_recomputed_floors",
)
"""The float comparisons across processes, devices or stored files that are cheap enough to run twice (module
docstring); the smoke evaluation's golden and the distributed run are left to the plain suite (minutes each)."""

LEVELS = {
    "host": {"isa": None, "openblas": None},
    "SSE4_2": {"isa": "SSE4_2", "openblas": "Prescott"},
}
"""The levels: the host's own (no cap: whatever $XLA_FLAGS / $OPENBLAS_CORETYPE say, less any instruction cap) and
XLA's SSE4_2 with OpenBLAS's Prescott kernels."""


def _env(isa: str | None, openblas: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags_with(*([f"--xla_cpu_max_isa={isa}"] if isa else []), drop=("--xla_cpu_max_isa",))
    env.pop("OPENBLAS_CORETYPE", None)
    if openblas:
        env["OPENBLAS_CORETYPE"] = openblas
    return env


@pytest.mark.slow
@pytest.mark.parametrize("level", list(LEVELS))
def test_float_sensitive_tests_pass_at_two_instruction_levels(level):
    if not is_x86_64():
        pytest.skip("XLA's --xla_cpu_max_isa levels named here are x86-64's; this machine is not x86-64")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *FLOAT_SENSITIVE], cwd=ROOT, env=_env(**LEVELS[level]), capture_output=True, text=True,
                          timeout=900)
    print(f"{level}: {time.perf_counter() - t0:.0f} s")
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"at level {level}:\n{tail}"
    assert f"{len(FLOAT_SENSITIVE)} passed" in proc.stdout, tail
