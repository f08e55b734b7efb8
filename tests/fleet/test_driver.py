"""The fleet check's driver: for real on this machine (`gpuval fleet check --on local`: the node test's health suite
and in-node gloo all_reduce, read back from the local job's output), in the background, and, with a scripted
engine (an Engine subclass answering from a table, the one stand-in here: the real engines run in
test_run_slurm.py and test_run_kubernetes.py), every way a round's jobs can go wrong: the engine refuses them,
they stay queued, they hang."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from pydantic import Field

from gpuval.engines.base import Engine, EngineOptions, Facts, Rendered
from gpuval.engines.nodes import Census, NodeClient, SlurmNode
from gpuval.engines.slurm.labels import labelled
from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EXIT_CANNOT_RUN, EngineError
from gpuval.node.host import hostname
from gpuval.operate.codes import Acted
from gpuval.fleet.plan import FleetConfig, new_fleet, plan_next
from gpuval.fleet.run import driver as fleet_driver
from gpuval.fleet.plan.expect import message_sizes
from gpuval.fleet.run.job import JobSettings
from gpuval.fleet.run.lines import line
from gpuval.fleet.run.worker_request import RankTestRequest
from gpuval.fleet.run.driver import FleetRun
from gpuval.engines.site import Site
from tests.conftest import run_gpuval

RUN = "20260101T000000Z-d1a101"  # a run id of gpuval's shape: a node test's request takes no other


def test_a_check_of_this_machine_for_real(tmp_path: Path):
    """One node: its health suite and a real in-node all_reduce over two gloo ranks, through the local engine; its
    network cannot be judged without a partner, so the verdict is SKIPPED (never PASS), exit 2 (not judged)."""
    env = {"GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    proc = run_gpuval("fleet", "check", "--on", "local", "--nodes", "1", "--wait", "--json", "--size", "64K",
                      "--iters", "2", "--warmup", "1", "--samples", "4,4,4", "--poll", "0.5", "--timeout", "240",
                      env=env, timeout=280)
    assert proc.returncode == 2, proc.stderr[-2000:]  # not judged: exit 2 (results.verdict.exit_code_of)
    out = json.loads(proc.stdout)
    [node] = out["nodes"]
    assert node["host"] == hostname() and node["status"] == "skipped" and "no partner" in node["reason"]
    [suite] = node["evidence"]
    assert suite["kind"] == "node" and len(suite["figures"]) == 1 and suite["figures"]["all_reduce"] > 0
    assert out["rounds"] == 1 and out["round_log"][0]["tests"] == {"suite": 1}
    log = next((tmp_path / "jobs" / "local").glob("*/output.log")).read_text()
    assert log.count('"event":"health"') >= 10 and '"event":"samples"' in log


def test_without_wait_the_check_runs_in_the_background(tmp_path: Path):
    env = {"GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    proc = run_gpuval("fleet", "check", "--on", "local", "--nodes", "1", "--json", "--size", "64K", "--iters", "2",
                      "--samples", "2,2,2", "--poll", "0.5", "--timeout", "240", env=env)
    assert proc.returncode == 0, proc.stderr
    started = json.loads(proc.stdout)
    log = Path(started["log"])
    deadline = time.monotonic() + 240  # the check's one job may take --timeout 240 s; pytest stops the test at 300
    while time.monotonic() < deadline and '"round_log"' not in (log.read_text() if log.exists() else ""):
        time.sleep(1)
    done = json.loads(log.read_text()[log.read_text().index("{"):])
    assert done["run_id"] == started["run_id"] and done["nodes"][0]["status"] == "skipped"


class _Options(EngineOptions):
    nodes: list[str] = Field(default_factory=list)


class ScriptedEngine(Engine[_Options]):
    """Jobs that end as `behave(spec)` says: ("ok"|"pending"|"running"|"refuse"|"lost": its status cannot be
    read), their output as the workers print it for a healthy fleet, each line labelled with its task (one per
    node) as srun --label does."""

    name = "scripted"
    Options = _Options

    def __init__(self, behave: Callable[[JobSpec, list[str]], str]) -> None:
        super().__init__()
        self.behave, self.jobs, self.cancelled = behave, {}, []

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        return Rendered(self.name, {"job": " ".join(spec.command)}, spec, job_name=spec.name)

    def _send(self, rendered: Rendered) -> str:
        nodes = self.options_for(rendered.spec).nodes
        what = self.behave(rendered.spec, nodes)
        if what == "refuse":
            raise EngineError("quota exceeded")
        job_id = str(len(self.jobs) + 1)
        self.jobs[job_id] = (rendered.spec, nodes, what)
        return job_id

    def status(self, job_id: str) -> JobStatus:
        if self.jobs[job_id][2] == "lost":
            raise EngineError("squeue did not answer in 30 s")
        state = {"ok": JobState.SUCCEEDED, "pending": JobState.PENDING, "running": JobState.RUNNING}
        return JobStatus(job_id=job_id, engine=self.name, state=state[self.jobs[job_id][2]])

    def log_lines(self, job_id: str) -> Iterator[str]:
        spec, nodes, what = self.jobs[job_id]
        if what in ("pending", "lost"):
            return  # it never started, or nothing of it is known: no output at all
        argv = spec.command
        index = int(argv[argv.index("--round") + 1])
        samples = int(argv[argv.index("--samples") + 1])
        figures = [100.0 + (k % 3) for k in range(samples)]
        task_of = {n: task for task, n in enumerate(sorted(nodes))}  # Slurm numbers tasks in its host list order
        if "node-test" in argv:
            for n in nodes:
                task = task_of[n]
                yield f"{task}: " + line("start", round=index, node=n) + "\n"
                if what == "ok":
                    yield f"{task}: " + line("suite", round=index, node=n, status="pass", reason="ok") + "\n"
                    yield f"{task}: " + line("samples", round=index, node=n, collective="all_reduce",
                                             busbw=figures) + "\n"
            return
        test = argv[argv.index("--test") + 1]
        for n in nodes:
            yield f"{task_of[n]}: " + line("start", round=index, test=test, node=n, rank=0) + "\n"
        if what == "ok":
            for coll in RankTestRequest.parse(argv[argv.index("rank-test") + 1:]).collectives:
                yield f"{task_of[nodes[0]]}: " + line("samples", round=index, test=test, node=nodes[0],
                                                      collective=coll, busbw=figures, hosts=nodes) + "\n"

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        """Its lines with their nodes as the Slurm engine reads srun's labels (engines/slurm/labels.py)."""
        return labelled(self.log_lines(job_id), sorted(self.jobs[job_id][1]))

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


class _Site(Site):
    def pin(self, nodes: tuple[str, ...], together: bool) -> dict[str, Any]:
        return {"nodes": list(nodes)}


def _check(behave: Callable[[JobSpec, list[str]], str], **run: Any):
    engine = ScriptedEngine(behave)
    settings = JobSettings(run_id=RUN, sizes=message_sizes(None), timeout_s=0.2)
    fleet = FleetRun(_Site(engine), settings, FleetConfig(seed=1), poll_s=0.01, **run)
    return engine, fleet.check(["a", "b", "c", "d", "e", "f"])


@pytest.fixture(autouse=True)
def _private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setattr(fleet_driver, "HANG_GRACE_S", 0.0)


def test_refused_jobs_could_not_run_and_judge_nobody():
    engine, outcome = _check(lambda spec, nodes: "refuse" if "rank-test" in spec.command else "ok")
    assert {v.status.value for v in outcome.verdicts.nodes.values()} == {"error"}
    assert all("could not run 3 times in a row" in v.reason and "quota exceeded" in v.reason
               for v in outcome.verdicts.nodes.values())
    assert outcome.exit_code == EXIT_CANNOT_RUN and not outcome.failed


def test_a_job_that_stays_queued_is_cancelled_and_could_not_run():
    engine, outcome = _check(lambda spec, nodes: "pending" if "c" in nodes and "rank-test" in spec.command
                             else "ok", queue_timeout_s=0.05)
    c = outcome.verdicts.nodes["c"]
    assert c.status.value == "error" and "still pending after 0 s in the queue" in c.reason
    assert engine.cancelled  # what queued too long was cancelled
    assert all(v.status.value == "pass" for n, v in outcome.verdicts.nodes.items() if n != "c")


def test_a_job_that_hangs_is_cancelled_and_is_evidence_against_its_nodes():
    engine, outcome = _check(lambda spec, nodes: "running" if "d" in nodes and "rank-test" in spec.command
                             else "ok")
    d = outcome.verdicts.nodes["d"]
    assert d.status.value == "fail" and d.reason.startswith("broken: crashed with 2 known-good partners")
    assert "hung: still running after 0 s, cancelled" in d.reason
    assert outcome.failed == ["d"] and outcome.exclude == "d"
    assert all(v.status.value == "pass" for n, v in outcome.verdicts.nodes.items() if n != "d")


def test_a_job_the_engine_stops_answering_about_is_given_up_and_judges_nobody(monkeypatch):
    monkeypatch.setattr(fleet_driver, "MAX_UNANSWERED", 3)
    engine, outcome = _check(lambda spec, nodes: "lost" if "e" in nodes and "rank-test" in spec.command else "ok")
    e = outcome.verdicts.nodes["e"]
    assert e.status.value == "error" and "stopped answering" in e.reason and engine.cancelled
    assert all(v.status.value == "pass" for n, v in outcome.verdicts.nodes.items() if n != "e")


def test_a_rounds_jobs_are_polled_in_one_call_per_poll():
    """The fleet asks the engine about all of a round's waiting jobs at once (Engine.statuses: Slurm one squeue,
    Kubernetes one list), never job by job (a 4,096-node screening round was ~2,000 squeue calls per poll)."""
    polls: list[list[str]] = []

    class Polled(ScriptedEngine):
        def statuses(self, job_ids):
            polls.append(list(job_ids))
            return {job_id: self.status(job_id) for job_id in job_ids}

    engine = Polled(lambda spec, nodes: "ok")
    fleet = FleetRun(_Site(engine), JobSettings(run_id=RUN, sizes=message_sizes(None), timeout_s=0.2),
                     FleetConfig(seed=1), poll_s=0.01)
    fleet.check(["a", "b", "c", "d", "e", "f"])
    assert len(polls) >= 2 and max(len(p) for p in polls) == 3  # a screening round: three pairs, one call
    assert sorted(job for poll in polls for job in poll) == sorted(engine.jobs)  # each job asked about once


def test_a_rounds_jobs_are_polled_at_0_2_4_8_seconds_then_every_poll(monkeypatch):
    """A round whose jobs run for six polls: its status is asked at 0, 2, 4 and 8 s, then every --poll seconds
    (10), not every 2 s (engines.polling); sleeps recorded, not slept."""
    slept: list[float] = []

    class Running(ScriptedEngine):
        polls = 0

        def statuses(self, job_ids):
            self.polls += 1
            if self.polls <= 6:
                return {j: JobStatus(job_id=j, engine=self.name, state=JobState.RUNNING) for j in job_ids}
            return {j: self.status(j) for j in job_ids}

    monkeypatch.setattr(fleet_driver.time, "sleep", slept.append)
    engine = Running(lambda spec, nodes: "ok")
    fleet = FleetRun(_Site(engine), JobSettings(run_id=RUN, sizes=message_sizes(None), timeout_s=600),
                     FleetConfig(seed=1))
    fleet.run_round(plan_next(new_fleet(["a", "b"], FleetConfig(seed=1))))  # round 0: one job, two node tests
    assert slept == [2, 2, 4, 10, 10, 10]


class _Drains(NodeClient):
    """A node client that keeps what it was asked (the real ones: tests/operate, tests/fleet/test_run_*)."""

    scheduler = "scripted"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def edit(self, node: str, policy: Any) -> None:
        edit = policy.slurm(SlurmNode(node, "IDLE", ""))
        self.events.append(f"{edit.action} {node}")

    def census(self, owner: Any) -> Census:
        self.events.append("census")
        return Census(6)


def test_a_check_drains_before_it_stores_and_a_full_disk_stops_neither(monkeypatch):
    """Every write of the check fails (a full disk, as --results /dev/full): the rounds go on, the failed node is
    drained, and only then are the verdicts written; what could not be written is a note. It stopped at the first
    round's write, exit 2, nothing drained."""
    events: list[str] = []

    def full(records, path=None):
        events.append("store")
        raise OSError(28, "No space left on device", "/dev/full")

    class Drained(ScriptedEngine):
        def node_client(self) -> NodeClient:
            return _Drains(events)

    monkeypatch.setattr(fleet_driver, "save_results", full)
    engine = Drained(lambda spec, nodes: "running" if "d" in nodes and "rank-test" in spec.command else "ok")
    fleet = FleetRun(_Site(engine), JobSettings(run_id="20260101T000000Z-d1a100", sizes=message_sizes(None), timeout_s=0.2),
                     FleetConfig(seed=1), poll_s=0.01, results_path=Path("/dev/full"))
    outcome = fleet.conclude(fleet.check(["a", "b", "c", "d", "e", "f"]), drain=True)
    assert outcome.failed == ["d"] and [a.action for a in outcome.actions] == [Acted.DRAINED]
    # counted before the drain and after it (the drain brake), then stored
    assert events[-4:] == ["census", "drain d", "census", "store"] and events.count("store") >= 3
    assert any(n.endswith("records not stored (/dev/full: No space left on device)") for n in outcome.verdicts.notes)
