"""THE factory of a job diagnosis's records (kind "job"): one per node of the job, stored under the diagnosis's run
id with the job's id in `where.job_id` and in its data.

A node the job's symptoms nominate is WARN (something in the job points at it; no hardware verdict: a job's
symptoms only nominate), a node they do not SKIPPED (nothing judged about its hardware). With `--retest`, the fleet
re-test's verdict and what was done (a drain) go with it; the re-test's own records (kind "fleet") carry that
verdict under the re-test's run id.
"""

from __future__ import annotations

from gpuval.diagnosis.job_diagnosis import JobDiagnosis, job_nodes
from gpuval.results import Result, Status, Where
from gpuval.results.data import JobData

NAME = "job_diagnosis"


def job_records(diag: JobDiagnosis) -> list[Result]:
    """The diagnosis's records, one per node of the job (`job_nodes`: probed, or where the engine placed a rank's
    lines); never one for a host a process only claims, so a job's output cannot fill the results with hosts."""
    suspects = {s.node: s for s in diag.suspects}
    retested = {n.node: n for n in diag.retest.nodes} if diag.retest else {}
    nodes = sorted(job_nodes(diag))
    found = []
    for node in nodes:
        suspect, again = suspects.get(node), retested.get(node)
        ranks = sorted(r for r, n in diag.node_of.items() if n == node)
        data = JobData(job_id=diag.job_id, engine=diag.engine, suspect=suspect is not None, ranks=ranks,
                       why=suspect.why if suspect else [], sources=suspect.sources if suspect else [],
                       gpus=suspect.gpus if suspect else [])
        if again is not None and diag.retest is not None:
            data.retest_run, data.retest_status, data.retest_reason = (diag.retest.run_id, again.status.value,
                                                                       again.reason)
            data.action = again.action
        reason = (f"nominated by job {diag.job_id}: {'; '.join(suspect.why)}" if suspect else
                  f"not nominated by job {diag.job_id}'s diagnosis (a job's symptoms judge no hardware)")
        found.append(Result(
            run_id=diag.run_id, kind="job", name=NAME, started_at=diag.generated_at, finished_at=diag.generated_at,
            where=Where(hostname=node, engine=diag.engine, job_id=diag.job_id, ranks=len(ranks) or None),
            params={"job": diag.job_id}, status=Status.WARN if suspect else Status.SKIPPED, reason=reason[:2000],
            data=data))
    return found
