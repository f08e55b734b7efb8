"""How often a job's status is asked while waiting for it: soon at first, then at a steady pace (submitit's
InfoWatcher): at 0, 2, 4 and 8 s after the wait began, then every `steady_s`. A short job is seen ending within
seconds; a job that queues for minutes (a 4,096-node round) is not asked about every 2 s. No wait is longer than
`steady_s`: a caller that asks for a quick pace (a local job, a test) gets it from the start.

One helper for `Engine.wait` (`gpuval jobs wait`, `submit --wait`) and the fleet check's rounds."""

from __future__ import annotations

from typing import Iterator

FIRST_WAITS_S = (2.0, 2.0, 4.0)  # status asked at 0, 2, 4 and 8 s


def poll_delays(steady_s: float) -> Iterator[float]:
    """The seconds to sleep before each next status call: 2, 2, 4, then `steady_s` for ever (each at most
    `steady_s`)."""
    for wait in FIRST_WAITS_S:
        yield min(wait, steady_s)
    while True:
        yield steady_s
