"""The evidence bundle a drain leaves (operate/evidence.py): on the node, keyed by the run id the drain reason
names, bounded, and a recording in node/recorded.py's form that `gpuval health --recorded BUNDLE` judges to the
same verdict on the same checks. Real `health --drain` runs against the session's real Slurm
(tests/operate/conftest.py); the capture of a live machine on this one (no GPU: the recording says so)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuval.engines.slurm.nodes import read_node
from gpuval.node.capture import capture
from gpuval.node.recorded import RecordedMachine
from gpuval.node.sysfs import LinuxMachine
from tests.conftest import run_gpuval
from tests.operate.support import recorded_machine


def _statuses(out: dict) -> dict[str, str]:
    rows = out["results"] if isinstance(out, dict) else out
    return {r["name"]: r["status"] for r in rows}


def test_a_drain_leaves_a_bundle_that_replays_to_the_same_verdict(cluster, tmp_path: Path):
    try:
        proc = run_gpuval("health", "--recorded", str(recorded_machine(tmp_path, "bad", ecc_errors=3)), "--node",
                          "n1", "--scheduler", "slurm", "--drain", "--json")
        assert proc.returncode == 1, proc.stderr
        out = json.loads(proc.stdout)
        run_id = out["results"][0]["run_id"]
        bundle = Path(out["evidence"])
        assert bundle == tmp_path / "state" / "evidence" / "n1" / f"{run_id}.yaml"
        assert read_node("n1").reason == f"gpuval: ECC_ERRORS {run_id}"  # the reason names the bundle's run
        data = yaml.safe_load(bundle.read_text())
        evidence = data["evidence"]
        assert (evidence["node"], evidence["run_id"], evidence["action"]) == ("n1", run_id, "drained")
        assert [r["name"] for r in evidence["records"]] == ["ecc"] and set(_statuses(out)) == set(evidence["checks"])
        assert data["gpus"][3]["ecc"]["volatile_uncorrected"] == 3  # the machine as it was judged

        replay = run_gpuval("health", "--recorded", str(bundle), "--json")
        assert replay.returncode == 1, replay.stderr
        assert _statuses(json.loads(replay.stdout)) == _statuses(out)
    finally:
        cluster.scontrol("update", "nodename=n1", "state=resume")


def test_a_pass_leaves_no_bundle(cluster, tmp_path: Path):
    proc = run_gpuval("health", "--recorded", str(recorded_machine(tmp_path, "good")), "--node", "n2",
                      "--scheduler", "slurm", "--drain", "--json")
    assert proc.returncode == 0 and "evidence" not in json.loads(proc.stdout), proc.stderr
    assert not (tmp_path / "state" / "evidence").exists()


def test_a_live_machine_is_captured_in_the_recorded_form(tmp_path: Path):
    """This machine (no NVIDIA driver) captured and loaded back as a recording: what it could not answer is left
    out, so the recording says it has none (the check that reads it is not judged), never a made-up value."""
    data = capture(LinuxMachine(), "this machine")
    path = tmp_path / "here.yaml"
    path.write_text(yaml.safe_dump(data))
    again = RecordedMachine.load(str(path))
    assert again.description == "this machine" and "now" in data
    assert data["gpus"] == [] and "driver_version" not in data
    replay = run_gpuval("health", "--recorded", str(path), "--check", "gpu_count", "--json")
    assert replay.returncode == 2 and "Traceback" not in replay.stderr, replay.stderr  # no driver: not judged
