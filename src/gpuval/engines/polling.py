"""How often a job's status is asked while waiting for it: soon at first, then at a steady pace (submitit's
InfoWatcher): at 0, 2, 4 and 8 s after the wait began, then every `steady_s`. A short job is seen ending within
seconds; a job that queues for minutes (a 4,096-node round) is not asked about every 2 s. No wait is longer than
`steady_s`: a caller that asks for a quick pace (a local job, a test) gets it from the start.

One helper for `Engine.wait` (`gpuval jobs wait`, `submit --wait`) and the fleet check's rounds; with it the one
rule for a queued job the scheduler says cannot start (`BlockedWatch`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from gpuval.engines.spec import JobStatus

FIRST_WAITS_S = (2.0, 2.0, 4.0)  # status asked at 0, 2, 4 and 8 s
# Looks in a row at which the scheduler says a queued job cannot start before it is given up: at least 4 s from the
# first by the waits above, so a reason that clears at once (a named node back from a reboot) gives nothing up.
BLOCKED_LOOKS = 3


@dataclass
class BlockedWatch:
    """One job's looks in a row with a `blocked` status (a partition's limit, a constraint no node has)."""

    looks: int = 0

    def stuck(self, status: JobStatus) -> str:
        """The scheduler's reason once it has held for BLOCKED_LOOKS looks in a row, else ''."""
        self.looks = self.looks + 1 if status.blocked else 0
        return status.blocked if self.looks >= BLOCKED_LOOKS else ""


def poll_delays(steady_s: float) -> Iterator[float]:
    """The seconds to sleep before each next status call: 2, 2, 4, then `steady_s` for ever (each at most
    `steady_s`)."""
    for wait in FIRST_WAITS_S:
        yield min(wait, steady_s)
    while True:
        yield steady_s
