"""Fault injection for the reliability tests: $L2E_FAULT="<point>:<n>" makes the process SIGKILL itself at
that point of meta-training (no cleanup, no flushing, like `kill -9`); "<point>:<n>:pause" makes it sleep
there instead (up to PAUSE_SECONDS), so a test can deliver SIGTERM / SIGINT at a known point. Unset: no fault."""
from __future__ import annotations

import os
import signal
import time
from typing import NamedTuple

FAULT_ENV = "L2E_FAULT"
FAULT_POINTS = {
    "before_iteration": "start of outer iteration n (0-based), before any work",
    "mid_inner": "inside the inner chains of iteration n, after their first chunk",
    "mid_log": "half-way through writing the log row of iteration n (a torn last line)",
    "after_log": "after the log row of iteration n, before its checkpoint",
    "mid_checkpoint": "while checkpoint n is half-written (es_state staged, meta_params and meta not yet)",
    "after_checkpoint": "right after checkpoint n is committed, before the plot",
}


PAUSE_SECONDS = 600.0


class FaultPlan(NamedTuple):
    """Kill the process (or, with pause, let it sleep) at `point` of iteration / checkpoint `n`."""

    point: str
    n: int
    pause: bool = False

    def armed(self, point: str, n: int) -> bool:
        return (self.point, self.n) == (point, n)

    def hit(self, point: str, n: int) -> None:
        """SIGKILL this process (or sleep, for a test's signal) if the plan names (point, n)."""
        if self.armed(point, n):
            if self.pause:
                time.sleep(PAUSE_SECONDS)
                return
            os.kill(os.getpid(), signal.SIGKILL)


class NoFault:
    """The plan when $L2E_FAULT is unset: never armed."""

    def armed(self, point: str, n: int) -> bool:
        return False

    def hit(self, point: str, n: int) -> None:
        pass


def fault_plan(environ=os.environ) -> FaultPlan | NoFault:
    """The plan in $L2E_FAULT; RuntimeError if it does not parse."""
    spec = environ.get(FAULT_ENV, "").strip()
    if not spec:
        return NoFault()
    point, _, rest = spec.partition(":")
    n, _, action = rest.partition(":")
    if point not in FAULT_POINTS or not n.strip().lstrip("-").isdigit() or action not in ("", "pause"):
        raise RuntimeError(f"bad {FAULT_ENV}={spec!r}: expected <point>:<n>[:pause] with point in "
                           f"{', '.join(FAULT_POINTS)}")
    return FaultPlan(point, int(n), action == "pause")
