"""`gpuval health --drain` and `--quick` as a Slurm cluster runs them: the real command line (a subprocess, as
slurmd or an admin starts it) against real Slurm daemons (slurmctld, two slurmd as nodes n1 and n2, munged;
tests/helpers/slurm_session.py), judging recorded A100 machines (no GPU here: the recorded ND96asr_v4 is the most
real stand-in, see tests/operate/support.py). Every node state is read back from slurmctld through scontrol."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.checks.suite import ORDER
from gpuval.workloads.health.last_full import path_for, recall
from gpuval.engines.slurm.nodes import read_node
from gpuval.results import read_results
from tests.conftest import run_gpuval
from tests.helpers.slurm import SlurmCluster
from tests.operate.support import recorded_machine


def _health(machine: Path, node: str, *args: str) -> tuple[int, dict]:
    """`gpuval health --drain --json` on `node`, judging the recorded `machine`: (exit code, the printed object)."""
    proc = run_gpuval("health", "--recorded", str(machine), "--node", node, "--scheduler", "slurm", "--drain",
                      "--json", *args)
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _by_name(out: dict) -> dict[str, dict]:
    return {r["name"]: r for r in out["results"]}


def test_an_admin_drained_node_stays_drained_after_a_passing_run(cluster, tmp_path: Path):
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=admin: replace fan 3 [ticket 42]")
    code, out = _health(recorded_machine(tmp_path, "good"), "n1")
    assert code == 0 and out["node_action"]["verdict"] == "pass" and out["node_action"]["action"] == "unchanged"
    assert "drained by someone else" in out["node_action"]["detail"]
    node = read_node("n1")
    assert node.drained and node.reason == "admin: replace fan 3 [ticket 42]"
    # What a person sees: the action under the tally, the admin's brackets printed as written.
    proc = run_gpuval("health", "--recorded", str(tmp_path / "good.yaml"), "--node", "n1", "--drain")
    assert proc.returncode == 0, proc.stderr
    assert ("slurm node n1: unchanged (drained by someone else ('admin: replace fan 3 [ticket 42]'): not resumed)"
            in proc.stdout)


def test_a_failing_machine_drains_its_node_with_the_gpuval_reason_and_a_later_pass_resumes_it(cluster, tmp_path):
    code, out = _health(recorded_machine(tmp_path, "bad", ecc_errors=4), "n2")
    run_id = out["results"][0]["run_id"]
    assert code == 1 and out["node_action"]["action"] == "drained"
    node = read_node("n2")
    assert node.drained and node.reason == f"gpuval: ECC_ERRORS {run_id}"
    assert not read_node("n1").drained  # only the named node
    listing = subprocess.run(["sinfo", "-R", "-h", "-o", "%N|%E"], capture_output=True, text=True, check=True)
    assert f"n2|gpuval: ECC_ERRORS {run_id}" in listing.stdout  # what the admin's sinfo -R shows

    code, out = _health(recorded_machine(tmp_path, "good"), "n2")
    assert code == 0 and out["node_action"]["action"] == "resumed"
    assert not read_node("n2").drained and read_node("n2").reason == ""


def test_error_leaves_the_node_alone(cluster, tmp_path: Path):
    """A check that could not run (no kernel log: the Xid check errors, everything else passes) is no verdict on
    the hardware: gpuval's own drain stays, a node in service stays in service."""
    code, out = _health(recorded_machine(tmp_path, "bad", ecc_errors=1), "n1")
    reason = read_node("n1").reason
    assert code == 1 and reason.startswith("gpuval: ECC_ERRORS")
    blind = recorded_machine(tmp_path, "blind", kernel_log=False)
    for node in ("n1", "n2"):
        code, out = _health(blind, node)
        assert _by_name(out)["xid"]["status"] == "error"
        assert (out["node_action"]["verdict"], out["node_action"]["action"]) == ("error", "unchanged")
        assert "could not run" in out["node_action"]["detail"]
    assert read_node("n1").reason == reason and not read_node("n2").drained


def test_quick_after_a_full_fail_keeps_the_node_drained_until_a_full_pass(cluster, tmp_path: Path):
    """The rule of workloads/health/last_full: a slow GEMM is seen only by a full run; a run of some checks (--check) that
    pass lifts nothing; the quick check that follows reads only (its own checks all pass) but folds in the kept
    full FAIL, so the drain stays, with the full run's codes and run id. Stale, the full FAIL is reported, not judged, and still holds gpuval's drain; a later full
    pass lifts it."""
    slow = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    code, full = _health(slow, "n1")
    full_run = full["results"][0]["run_id"]
    assert code == 1 and _by_name(full)["h2d_d2h_bandwidth"]["status"] == "fail"
    assert read_node("n1").reason == f"gpuval: H2D_D2H_SLOW {full_run}"
    kept, _ = recall("n1")
    assert kept is not None and (kept.verdict.value, kept.fault_codes, kept.run_id) == ("fail", ["H2D_D2H_SLOW"], full_run)

    code, part = _health(slow, "n1", "--check", "ecc")  # a pass of some checks only lifts nothing either
    assert code == 0 and (part["node_action"]["verdict"], part["node_action"]["action"]) == ("pass", "unchanged")
    assert "only some checks ran" in part["node_action"]["detail"]
    assert recall("n1")[0] == kept  # and it does not replace the kept full result

    code, quick = _health(slow, "n1", "--quick")
    checks = _by_name(quick)
    assert "h2d_d2h_bandwidth" not in checks and all(r["status"] in ("pass", "skipped") for n, r in checks.items() if n != "last_full")
    assert code == 1 and checks["last_full"]["status"] == "fail"
    assert checks["last_full"]["data"]["fault_code"] == "H2D_D2H_SLOW"
    assert quick["node_action"]["action"] == "unchanged"  # already drained for the full run's codes, by its run
    assert read_node("n1").drained and read_node("n1").reason == f"gpuval: H2D_D2H_SLOW {full_run}"

    stale = json.loads(path_for("n1").read_text())
    stale["finished_at"] = (datetime.now(timezone.utc) - timedelta(days=8)).isoformat()
    path_for("n1").write_text(json.dumps(stale))
    code, quick = _health(slow, "n1", "--quick")
    assert code == 0 and _by_name(quick)["last_full"]["status"] == "skipped"
    assert "reported, not judged" in _by_name(quick)["last_full"]["reason"]
    action = quick["node_action"]
    assert (action["verdict"], action["action"]) == ("pass", "unchanged")
    assert "only a full check that passes lifts its drain" in action["detail"]
    assert read_node("n1").reason == f"gpuval: H2D_D2H_SLOW {full_run}"

    code, out = _health(recorded_machine(tmp_path, "good"), "n1")
    assert code == 0 and out["node_action"]["action"] == "resumed" and not read_node("n1").drained
    code, quick = _health(slow, "n1", "--quick")
    assert code == 0 and _by_name(quick)["last_full"]["status"] == "pass"
    assert quick["node_action"]["action"] == "unchanged" and not read_node("n1").drained


def test_a_node_action_that_fails_exits_2_in_one_line_and_keeps_the_records(cluster, tmp_path: Path):
    results = tmp_path / "r.jsonl"
    proc = run_gpuval("health", "--recorded", str(recorded_machine(tmp_path, "good")), "--node", "n9",
                      "--scheduler", "slurm", "--drain", "--results", str(results))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: node n9: scontrol show node: ") and proc.stderr.count("\n") == 1
    assert len(read_results(results)) == len(ORDER)  # every check's record, saved before the action was tried


def test_a_scheduled_full_check_drains_the_failing_node_only(cluster, tmp_path: Path):
    """`gpuval submit health --on slurm -- --drain`, as docs/operate.md's cron line runs it: an exclusive job, one
    `gpuval health --drain` per node, each acting on itself (SLURMD_NODENAME) with gpuval's reason. The job's
    interpreter (`--opt python=`) is a wrapper that makes each node judge its own recorded machine: n1 has
    uncorrectable ECC errors, n2 is healthy. Both keep their full result for --quick."""
    machines = tmp_path / "machines"
    machines.mkdir()
    shutil.copy(recorded_machine(tmp_path, "bad", ecc_errors=2), machines / "n1.yaml")
    shutil.copy(recorded_machine(tmp_path, "good"), machines / "n2.yaml")
    python = tmp_path / "python-as-node"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@" --recorded "{machines}/$SLURMD_NODENAME.yaml" '
                      '--node "$SLURMD_NODENAME"\n')  # the recording stands for this node: kept as its full result
    python.chmod(0o755)
    workdir = tmp_path / "jobs"
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "2", "--wait", "--json",
                      "--opt", f"python={python}", "--opt", f"workdir={workdir}", "--", "--drain", timeout=180)
    assert proc.returncode == 1, proc.stderr + proc.stdout[-6000:]  # a node failed its checks
    out = json.loads(proc.stdout)
    failed = {r["where"]["hostname"] for r in out["results"] if r["status"] == "fail"}
    assert failed == {"n1"}  # each record names the node that printed it (srun's label), not the host's name
    run_id = out["results"][0]["run_id"]
    assert read_node("n1").drained and read_node("n1").reason == f"gpuval: ECC_ERRORS {run_id}"
    assert not read_node("n2").drained
    script = (workdir / "job.sbatch").read_text()
    assert "#SBATCH --exclusive\n" in script and "--cpu-bind=none" in script and "health --results /dev/stdout --drain" in script
    assert recall("n1")[0].verdict.value == "fail" and recall("n2")[0].verdict.value == "pass"  # type: ignore[union-attr]


class _HealthCheckCluster(SlurmCluster):
    """The cluster with slurm.conf's HealthCheckProgram lines, as docs/operate.md gives them."""

    program: Path

    def _write_conf(self) -> None:
        super()._write_conf()
        with self.conf.open("a") as conf:
            conf.write(f"HealthCheckProgram={self.program}\nHealthCheckInterval=2\nHealthCheckNodeState=ANY\n")


def _wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_slurmd_runs_quick_as_its_health_check_and_acts_on_the_kept_full_result(tmp_path: Path, monkeypatch):
    """slurmd runs docs/operate.md's wrapper as its HealthCheckProgram (root, SLURMD_NODENAME only, no PATH):
    `gpuval health --quick --drain`, each node judging its recorded machine. A full check of n1 that finds a slow
    GEMM runs without --drain (an account with no Slurm operator rights); slurmd's next quick check on n1 reads
    the kept FAIL and drains n1 with the full run's codes and run id; n2 stays in service. A later full pass
    (again without --drain) is kept, and the next quick check lifts gpuval's drain."""
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-hc-"))  # munged must reach its socket: not under tmp_path
    state = root / "state"
    slow = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    good = recorded_machine(tmp_path, "good")
    program = root / "gpuval-healthcheck"
    cluster = _HealthCheckCluster(root, nodes=2)
    # The documented wrapper, plus what this private test cluster needs: its own slurm.conf (a real node reads
    # /etc/slurm/slurm.conf), the state directory, and IMDS on a closed local port.
    program.write_text(
        "#!/bin/sh\n"
        "export PATH=/usr/local/bin:/usr/bin:/bin\n"
        f"export SLURM_CONF={cluster.conf} GPUVAL_STATE_DIR={state} GPUVAL_IMDS_ENDPOINT=http://127.0.0.1:9/x\n"
        f'timeout 50 {sys.executable} -m gpuval health --quick --drain --recorded {good} '
        f'>>"{root}/health-$SLURMD_NODENAME.log" 2>&1\n'
        "exit 0\n")
    program.chmod(0o755)
    cluster.program = program
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(state))
    try:
        with cluster:
            _wait_for(lambda: "healthy, in service" in _log(root, "n1"), "a first quick check on n1")
            full = run_gpuval("health", "--recorded", str(slow), "--node", "n1", "--json")
            records = json.loads(full.stdout)
            assert full.returncode == 1 and isinstance(records, list)  # no --drain: kept, no node action
            full_run = records[0]["run_id"]
            _wait_for(lambda: read_node("n1").drained, "slurmd's quick check to drain n1")
            assert read_node("n1").reason == f"gpuval: H2D_D2H_SLOW {full_run}"
            drained_line = f"slurm node n1: drained (failed checks: reason 'gpuval: H2D_D2H_SLOW {full_run}')"
            # printed once the drain brake has counted again after the drain: a moment after the drain itself
            _wait_for(lambda: drained_line in _log(root, "n1"), "the quick check's drain line")
            assert not read_node("n2").drained
            passed = run_gpuval("health", "--recorded", str(good), "--node", "n1")
            assert passed.returncode == 0, passed.stderr
            _wait_for(lambda: not read_node("n1").drained, "slurmd's quick check to resume n1")
            # the check prints what it did once it has done it: its line may follow the resume by a moment
            _wait_for(lambda: "healthy again; gpuval's drain" in _log(root, "n1"), "the quick check's resume line")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _log(root: Path, node: str) -> str:
    path = root / f"health-{node}.log"
    return path.read_text() if path.exists() else ""
