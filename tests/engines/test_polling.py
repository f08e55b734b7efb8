"""How often a job's status is asked while waiting: at 0, 2, 4 and 8 s, then at a steady pace (submitit's watcher),
in `Engine.wait` (`jobs wait`, `submit --wait`) and the fleet check's rounds; and when a queued job the scheduler
says cannot start is given up (Slurm's reasons, read from squeue's state_reason). Sleeps are recorded, not slept:
the schedule is the subject, not this machine's clock. The same on a real Slurm: tests/engines/test_slurm.py."""

from __future__ import annotations

from itertools import accumulate, islice
from typing import Iterator

import pytest

from gpuval.engines import base
from gpuval.engines.base import Engine, EngineOptions, Facts, Rendered
from gpuval.engines.polling import BlockedWatch, poll_delays
from gpuval.engines.slurm.status import status_of
from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EngineError


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


def _queued(blocked: str = "") -> JobStatus:
    return JobStatus(job_id="1", engine="slow", state=JobState.PENDING, blocked=blocked)


def test_a_queued_job_that_cannot_start_is_given_up_after_three_looks_in_a_row():
    """The scheduler's reason must hold for three looks in a row (a named node back from a reboot clears it at
    once): a clear look in between starts the count again."""
    watch = BlockedWatch()
    why = "PartitionNodeLimit: it asks for more or fewer nodes than its partition allows"
    assert [watch.stuck(s) for s in (_queued(why), _queued(why), _queued(), _queued(why), _queued(why))] == [""] * 5
    assert watch.stuck(_queued(why)) == why


class _Blocked(_Slow):
    """A job the scheduler keeps queued and says cannot start."""

    def status(self, job_id: str) -> JobStatus:
        return _queued("PartitionTimeLimit: its time limit is past its partition's")


def test_wait_says_at_once_that_a_job_cannot_start_and_leaves_it_queued(monkeypatch: pytest.MonkeyPatch):
    """`jobs wait` and `submit --wait` end on the third look, not at their timeout, with one line saying why and
    what to do; the job is the user's to cancel, so it is not cancelled."""
    slept: list[float] = []
    monkeypatch.setattr(base.time, "sleep", slept.append)
    cancelled: list[str] = []
    engine = _Blocked(polls=0)
    monkeypatch.setattr(engine, "cancel", cancelled.append)
    with pytest.raises(EngineError, match=r"job 7 cannot start: PartitionTimeLimit: its time limit is past its "
                                          r"partition's\. It is still queued: cancel it \(gpuval jobs cancel 7 --on "
                                          r"slow\)"):
        engine.wait("7", timeout_s=3600)
    assert slept == [2, 2] and cancelled == []


@pytest.mark.parametrize("reason, blocked", [
    ("PartitionNodeLimit", True), ("PartitionTimeLimit", True), ("BadConstraints", True),
    ("Resources", False), ("Priority", False), ("ReqNodeNotAvail, UnavailableNodes:n3", False), ("None", False),
])
def test_slurm_names_a_queued_jobs_reason_and_blocks_only_on_those_that_never_clear(reason, blocked):
    status = status_of("5", "PENDING", "squeue", None, reason)
    assert bool(status.blocked) is blocked
    assert status.detail == ("" if reason == "None" else status.blocked or f"reason {reason}")
    assert not status_of("5", "RUNNING", "squeue", None, "PartitionNodeLimit").blocked  # it started after all
