"""One node, one verdict: the same records give the same verdict and exit code through every path that judges a
node: health's exit code, --drain (the verdict it acts on and the Slurm decision it takes), validate, burn, the
Prometheus textfile, the exporter (`gpuval exporter --once` over the results file), `submit --wait` / `jobs wait`
(the job's records, worst with the job's own state) and the report's diagnosis.

Before the one node verdict, one ERROR beside passes exited 0 in health, was ERROR in --drain, validate, Prometheus
and the report, and PASS in the fleet; `submit --wait` exited 0 on it (and on nothing judged) while the job
succeeded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuval.checks.suite import SuiteRun
from gpuval.engines.slurm.nodes import SlurmNode
from gpuval.engines.spec import JobState, JobStatus
from gpuval.operate import prometheus
from gpuval.operate.codes import Acted
from gpuval.operate.node_state import decide, verdict_of
from gpuval.report.build import gather, render_markdown
from gpuval.results import Status, save_results
from gpuval.results.store import open_store
from gpuval.results.verdict import exit_code_of
from gpuval.workloads.base import Outcome
from gpuval.workloads.burn.run import BurnRun
from gpuval.workloads.health.run import HealthRun
from gpuval.workloads.validate import verdict as validate_verdict
from tests.conftest import run_gpuval
from tests.helpers.records import records as node_records

P, W, F, E, S = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIPPED
CASES = [  # the records' statuses, THE verdict, its exit code
    ([P, P], P, 0),
    ([P, W, S], W, 0),
    ([P, E], E, 2),  # one check could not run, the rest pass: was exit 0 in health
    ([E, S], E, 2),  # "1 error, 1 skipped": was exit 0 in health
    ([E, F, P], F, 1),  # a failure outranks "could not run"
    ([S, S], S, 2),  # nothing judged: never a pass
]
# on a node gpuval drained earlier
SLURM = {P: Acted.RESUMED, W: Acted.RESUMED, F: Acted.DRAINED, E: Acted.UNCHANGED, S: Acted.UNCHANGED}


def _node_series(text: str) -> Status:
    """The status whose gpuval_node_status series is 1 (exactly one)."""
    found = re.findall(r'gpuval_node_status\{[^}]*status="(\w+)"\} 1\.0', text)
    assert len(found) == 1, text
    return Status(found[0])


@pytest.mark.parametrize("statuses, status, code", CASES)
def test_the_same_records_give_the_same_verdict_everywhere(statuses: list[Status], status: Status, code: int,
                                                           tmp_path: Path) -> None:
    records = node_records(statuses, run="run-one", host="node-a")
    health = HealthRun(SuiteRun(ctx=None, results=[]), records)  # type: ignore[arg-type]
    assert (health.verdict.status, health.exit_code) == (status, code)

    drained, _codes = verdict_of(records)  # what --drain acts on
    assert drained is status
    assert decide(drained, SlurmNode("n1", "IDLE+DRAIN", "gpuval: OLD 20260101T000000Z-01d000"))[0] is SLURM[status]

    textfile = prometheus.write_textfile(records, tmp_path / "node.prom")
    assert _node_series(textfile.read_text()) is status

    log = tmp_path / "r.jsonl"
    save_results(records, log)
    proc = run_gpuval("exporter", "--once", "--results", str(log))
    assert proc.returncode == 0, proc.stderr
    assert _node_series(proc.stdout) is status

    store = open_store(str(tmp_path / "r.db"))
    store.add(records)
    inp = gather(store, "run-one")
    (node,) = inp.diagnosis.nodes
    assert (node.status, exit_code_of(node.status)) == (status, code)
    page = render_markdown(inp)
    assert f"**{status.value.upper()}**" in page and f"| node-a | {status.value} |" in page
    assert "could not run: could not run" not in page

    job = JobStatus(job_id="7", engine="slurm", state=JobState.SUCCEEDED)
    assert Outcome(job, records).exit_code == code  # submit --wait, jobs wait: a job that ran to its end
    failed = Outcome(job.model_copy(update={"state": JobState.FAILED}), records)  # a job that did not
    assert failed.exit_code == (1 if status is F else 2)

    if status is not S:  # validate adds its sweep's record: exact data is one more judged pass
        found = validate_verdict(0, S, records, "no all_reduce baseline", ranks=8)
        assert (found.status, found.exit_code) == ((P if status is P else status), code)


@pytest.mark.parametrize("status", list(Status))
def test_burn_judges_its_one_record_by_the_same_verdict(status: Status) -> None:
    (record,) = node_records([status], run="run-one", host="node-a")
    burn = BurnRun(ctx=None, result=None, record=record)  # type: ignore[arg-type]
    health = HealthRun(SuiteRun(ctx=None, results=[]), [record])  # type: ignore[arg-type]
    assert burn.verdict == health.verdict and burn.verdict.exit_code == exit_code_of(status)
