"""After a job ends: read its output with its workload's reader, as Result records."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.engines import records
from gpuval.engines.spec import JobStatus
from gpuval.results import Result, Status
from gpuval.workloads.registry import ResultContext, get_workload


@dataclass
class Outcome:
    """A finished job: its last status and what its output measured."""

    status: JobStatus
    results: list[Result] = field(default_factory=list)
    note: str = ""

    @property
    def failed_check(self) -> bool:
        """Some record failed its check (exit 1)."""
        return any(r.status is Status.FAIL for r in self.results)


def collect(engine, job_id: str, status: JobStatus) -> Outcome:
    """Read the finished job's output into Result records; a job gpuval did not submit has none to read."""
    record = records.load(engine.name, job_id)
    if record is None or not record.spec.workload:
        return Outcome(status, note="gpuval did not submit this job: no workload to read its output with")
    workload = get_workload(record.spec.workload)
    ctx = ResultContext(spec=record.spec, engine=engine.name, job_id=job_id, run_id=record.run_id or job_id,
                        started=record.submitted_at)
    found = workload.results(engine.logs(job_id), ctx)
    note = "" if found else f"the job's output holds no {workload.name} results"
    return Outcome(status, found, note)
