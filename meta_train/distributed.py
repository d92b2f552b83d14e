"""Multi-host start-up: `jax.distributed.initialize()` from environment variables (imports only jax).

Must run before anything initialises a JAX backend — importing `l2e`, `tasks` or blackjax does — so
`python -m meta_train --distributed` calls it first thing.  Every process runs the same command with the same
config and seed; the ES population is then sharded over all hosts' devices (l2e.devices.population_mesh) and
only process 0 writes the run directory (meta_train.run_dir.is_writer).
"""
from __future__ import annotations

import os

import jax

__all__ = ["distributed_arguments", "initialize_distributed"]


def distributed_arguments() -> dict:
    """Keyword arguments of `jax.distributed.initialize` from $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES and
    $JAX_PROCESS_ID (those set; none set: JAX auto-detects the cluster — Cloud TPU, SLURM, Open MPI, …)."""
    kw = {}
    if addr := os.environ.get("JAX_COORDINATOR_ADDRESS"):
        kw["coordinator_address"] = addr
    if n := os.environ.get("JAX_NUM_PROCESSES"):
        kw["num_processes"] = int(n)
    if pid := os.environ.get("JAX_PROCESS_ID"):
        kw["process_id"] = int(pid)
    return kw


def initialize_distributed() -> None:
    """Join the multi-host job once (idempotent)."""
    if getattr(initialize_distributed, "_done", False):
        return
    jax.distributed.initialize(**distributed_arguments())
    initialize_distributed._done = True
