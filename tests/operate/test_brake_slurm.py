"""The drain brake against the session's real Slurm cluster (tests/helpers/slurm_session.py: nine fake nodes, so the
default cap, 5% of them, is 2): real `gpuval health --drain` processes, many at once as a HealthCheckProgram wave
starts them, each acting alone on its own node and counting gpuval's drains in slurmctld; every node state is read
back through sinfo. Before the brake, a wave of eight nodes judging one bad recording drained all eight."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuval.engines.slurm.nodes import SlurmNodes, read_node
from gpuval.operate.brake import Brake, parse_cap
from gpuval.operate.node_state import apply
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.operate.support import recorded_machine

WAVE = ["n1", "n2", "f1", "f2", "f3", "f4", "f5", "f6"]  # n3 keeps the time-limit job's minute to itself
RUNS = [f"20261128T12000{i}Z-0d8d8{i}" for i in range(4)]  # run ids of gpuval's shape


def _health(machine: Path, node: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = run_gpuval("health", "--recorded", str(machine), "--node", node, "--scheduler", "slurm", "--drain",
                      "--json", *args, env=env, timeout=280)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _gpuval_drained(cluster) -> dict[str, str]:
    """node -> reason, of every node drained with a gpuval reason, as sinfo lists them."""
    return {name: reason for name, reason in cluster.drained().items() if reason.startswith("gpuval:")}


def test_a_wave_of_eight_failing_nodes_at_once_drains_at_most_the_cap(cluster, tmp_path: Path):
    """Eight `health --drain` processes at once, every node judging a recording with ECC errors (as a bad
    baseline or driver would fail every node): at most 2 stay drained, every run exits 1, and every node left in
    service says why in its action and in a `drain_brake` record."""
    bad = recorded_machine(tmp_path, "bad", ecc_errors=4)
    with ThreadPoolExecutor(len(WAVE)) as pool:
        done = dict(zip(WAVE, pool.map(lambda node: _health(bad, node), WAVE)))
    drained = _gpuval_drained(cluster)
    assert 1 <= len(drained) <= 2, drained
    for node, (code, out) in done.items():
        action = out["node_action"]
        assert code == 1 and action["verdict"] == "fail", (node, action)
        records = {r["name"]: r for r in out["results"]}
        if node in drained:
            assert action["action"] == "drained" and "drain_brake" not in records
            continue
        assert action["action"] == "not drained" and "the drain brake" in action["detail"], (node, action)
        brake = records["drain_brake"]
        assert brake["status"] == "error" and brake["data"]["fault_code"] == "DRAIN_BRAKE"
        assert brake["data"]["details"]["limit"] == 2 and brake["data"]["details"]["cluster_nodes"] == 9
        assert "ECC_ERRORS on" in brake["reason"] and "to proceed:" in brake["reason"]
        assert records["ecc"]["status"] == "fail"  # what it measured stands
        assert not read_node(node).drained


def test_only_gpuvals_drains_count_and_a_node_it_holds_fails_again_freely(cluster, tmp_path: Path):
    """NHC's and an admin's drains are theirs: not counted. gpuval holds f1; with a cap of 2 (the site's
    GPUVAL_MAX_DRAIN) one more node is drained, the next is not, and f1 failing again is drained again (its codes
    then a slow host copy: no new drain."""
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=NHC: GPU 3 fell off the bus")
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=admin: replace fan 3")
    site = {"GPUVAL_MAX_DRAIN": "2"}
    bad = recorded_machine(tmp_path, "bad", ecc_errors=4)
    assert _health(bad, "f1", env=site)[1]["node_action"]["action"] == "drained"
    assert _health(bad, "f2", env=site)[1]["node_action"]["action"] == "drained"
    code, out = _health(bad, "f4", env=site)
    assert code == 1 and out["node_action"]["action"] == "not drained"
    assert out["node_action"]["detail"] == "the drain brake: gpuval holds 2 nodes drained, its cap is 2 (GPUVAL_MAX_DRAIN)"
    shown = run_gpuval("health", "--recorded", str(bad), "--node", "f4", "--drain", env=site)
    assert shown.returncode == 1 and "slurm node f4: not drained (the drain brake: gpuval holds 2" in shown.stdout
    assert ("drain brake: ECC_ERRORS on 2 of the 2 nodes gpuval holds: when many nodes fail at once, suspect the "
            "baseline, the software or a shared part, not the nodes; to proceed:") in shown.stdout
    slow = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    code, out = _health(slow, "f1", env=site)
    assert code == 1 and out["node_action"]["action"] == "drained", out["node_action"]
    assert set(_gpuval_drained(cluster)) == {"f1", "f2"} and "H2D_D2H_SLOW" in _gpuval_drained(cluster)["f1"]
    assert read_node("n1").reason == "NHC: GPU 3 fell off the bus" and read_node("n2").drained


def test_a_cap_of_0_reports_and_drains_nothing_and_a_bad_cap_is_refused(cluster, tmp_path: Path):
    bad = recorded_machine(tmp_path, "bad", ecc_errors=4)
    code, out = _health(bad, "n1", "--max-drain", "0")
    assert code == 1 and out["node_action"]["action"] == "not drained" and not _gpuval_drained(cluster)
    assert "report only, drain nothing" in {r["name"]: r for r in out["results"]}["drain_brake"]["reason"]
    shown = run_gpuval("health", "--recorded", str(bad), "--node", "n1", "--drain", "--max-drain", "0")
    assert shown.returncode == 1 and "slurm node n1: not drained (the drain brake: a cap of 0" in shown.stdout
    for args, message in ((["--drain", "--max-drain", "lots"], "error: --max-drain 'lots': give a number of nodes"),
                          (["--max-drain", "2"], "error: --max-drain caps --drain: give both, or neither")):
        refused = run_gpuval("health", "--recorded", str(bad), "--node", "n1", *args)
        assert refused.returncode == 2 and refused.stderr.strip() == refused.stderr.strip().splitlines()[0]
        assert refused.stderr.startswith(message), refused.stderr
    site = run_gpuval("health", "--recorded", str(bad), "--node", "n1", "--drain", env={"GPUVAL_MAX_DRAIN": "lots"})
    assert site.returncode == 2 and site.stderr.startswith("error: GPUVAL_MAX_DRAIN 'lots': give a number of nodes")


def test_a_drain_another_run_rewrites_mid_wave_still_holds_the_cap(cluster):
    """The red team's reproducer (reliability-4 D8): three health-drain actors with a cap of 2 all count before any
    drains (a synchronized HealthCheckInterval wave), each drains its node; 1.2 s later a fleet check's actor
    convicts n1 again (FLEET_SLOW, its own run: the reason, and with it Slurm's reason time, is rewritten); every
    actor counts again and gives back what the cap has no room for. Real node_state.apply, brake.Brake and
    SlurmNodes. Before: n1's drain moved to the end of the order and its first actor could no longer give it back,
    so n1, n2 and n3 all stayed. Now the fleet's actor, whose rewrite moved n1's mark, holds it under its own brake
    and gives it back: two stay."""
    wave = {"n1": RUNS[0], "n2": RUNS[1], "f1": RUNS[2]}
    client = SlurmNodes(settle_s=1.0)
    brakes = {node: Brake(client, parse_cap("2", "--max-drain"), run) for node, run in wave.items()}
    assert all(brakes[node].gate(node)() == "" for node in wave)  # every actor counted before any drained
    actions = {node: apply(Status.FAIL, node, run, ["ECC_ERRORS"], client, admit=brakes[node].gate(node))
               for node, run in wave.items()}
    time.sleep(1.2)
    fleet = Brake(client, parse_cap("2", "--max-drain"), RUNS[3])
    again = apply(Status.FAIL, "n1", RUNS[3], ["FLEET_SLOW"], client, admit=fleet.gate("n1"))
    assert again.action.value == "drained" and read_node("n1").reason == f"gpuval: ECC_ERRORS FLEET_SLOW {RUNS[3]}"
    with ThreadPoolExecutor(4) as pool:
        settled = list(pool.map(lambda pair: pair[0].settle([pair[1]]),
                                [*((brakes[n], actions[n]) for n in wave), (fleet, again)]))
    assert set(_gpuval_drained(cluster)) == {"n2", "f1"}, (_gpuval_drained(cluster), settled)
    assert settled[0]["n1"].action.value == "drained"  # its first actor's: changed since, not its own to lift
    assert settled[3]["n1"].action.value == "not drained" and "given back" in settled[3]["n1"].detail
