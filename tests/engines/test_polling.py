"""How often a job's status is asked while waiting: at 0, 2, 4 and 8 s, then at a steady pace (submitit's watcher),
in `Engine.wait` (`jobs wait`, `submit --wait`) and the fleet check's rounds. Sleeps are recorded, not slept: the
schedule is the subject, not this machine's clock."""

from __future__ import annotations

from itertools import accumulate, islice
from typing import Iterator

import pytest

from gpuval.engines import base
from gpuval.engines.base import Engine, EngineOptions, Facts, Rendered
from gpuval.engines.polling import poll_delays
from gpuval.engines.spec import JobSpec, JobState, JobStatus


def test_asked_at_0_2_4_8_seconds_then_steadily():
    assert list(islice(poll_delays(10), 6)) == [2, 2, 4, 10, 10, 10]
    assert [0, *accumulate(islice(poll_delays(30), 5))] == [0, 2, 4, 8, 38, 68]
    assert list(islice(poll_delays(0.5), 4)) == [0.5] * 4  # a quick pace asked for is kept from the start


class _Slow(Engine[EngineOptions]):
    """A job that runs for `polls` status calls, then succeeds."""

    name = "slow"
    Options = EngineOptions

    def __init__(self, polls: int) -> None:
        super().__init__()
        self.left = polls

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        return Rendered(self.name, {}, spec)

    def _send(self, rendered: Rendered) -> str:
        return "1"

    def status(self, job_id: str) -> JobStatus:
        self.left -= 1
        state = JobState.RUNNING if self.left >= 0 else JobState.SUCCEEDED
        return JobStatus(job_id=job_id, engine=self.name, state=state)

    def log_lines(self, job_id: str) -> Iterator[str]:
        return iter(())

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        return iter(())

    def cancel(self, job_id: str) -> None:
        pass


def test_wait_backs_off_to_the_engines_pace(monkeypatch: pytest.MonkeyPatch):
    slept: list[float] = []
    monkeypatch.setattr(base.time, "sleep", slept.append)
    assert _Slow(polls=6).wait("1").state is JobState.SUCCEEDED
    assert slept == [2, 2, 4, 10, 10, 10]  # POLL_S 10: a job queued an hour is asked 360 times, not 3,600
    slept.clear()
    _Slow(polls=3).wait("1", poll_s=0.5)
    assert slept == [0.5, 0.5, 0.5]
