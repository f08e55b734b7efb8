"""`gpuval fleet check` on the command line, in a subprocess as a user runs it: every bad request is one line and
exit 2 before anything is sent, Azure ML is refused with what to run instead, and the dry run prints what round 0
and a screening pair would send. (The check itself runs in tests/fleet/test_driver*.py and test_run_*.py.)"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import run_gpuval


def test_azureml_is_refused_with_what_to_run_instead():
    proc = run_gpuval("fleet", "check", "--on", "azureml", "--nodes", "4", "--wait")
    assert proc.returncode == 2 and "cannot run on Azure ML" in proc.stderr and "--on kubernetes" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["--on", "slurm"], "name the nodes"),
    (["--on", "slurm", "--nodes", "2", "--nodelist", "n[1-2]"], "not both"),
    (["--on", "local", "--nodes", "1", "--drain"], "no pool to take nodes out of"),
    (["--on", "slurm", "--nodelist", "n[2-1]"], "empty or too large"),
    # counted before anything is expanded: 40 million names would take gigabytes and minutes
    (["--on", "slurm", "--nodelist", "n[" + ",".join(["0-999999"] * 40) + "]"], "too large"),
    (["--on", "slurm", "--nodelist", "n[1-2]", "--samples", "8,8"], "SUITE,SCREEN,RETEST"),
    (["--on", "slurm", "--nodelist", "n[1-2]", "--sku", "Standard_NC6"], "no baseline"),
    (["--on", "local", "--nodes", "2"], "this machine only"),
    (["--on", "slurm", "--nodelist", "n1", "--switch-label", "x"], "Kubernetes node label"),
    (["--on", "slurm", "--nodelist", "n1", "--drain", "--max-drain", "half"], "--max-drain 'half': give a number"),
])
def test_bad_requests_are_one_line_errors_before_anything_is_sent(args, message):
    proc = run_gpuval("fleet", "check", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("nodelist", ["n[2-1]", "n[0-999999],n[0-999999]"])
def test_a_bad_host_list_is_refused_before_the_background_check_starts(nodelist, tmp_path):
    """Without --wait the check goes to the background: a host list it cannot expand is a one-line error first."""
    proc = run_gpuval("fleet", "check", "--on", "slurm", "--nodelist", nodelist,
                      env={"GPUVAL_JOBS_DIR": str(tmp_path / "jobs")})
    assert proc.returncode == 2 and "empty or too large" in proc.stderr, proc.stderr
    assert "background" not in proc.stdout and not (tmp_path / "jobs").exists()


def test_the_dry_run_shows_round_0_and_a_pair_as_the_engine_would_get_them():
    proc = run_gpuval("fleet", "check", "--on", "kubernetes", "--nodelist", "gpu-1,gpu-2,gpu-3", "--image", "img:1",
                      "--sku", "Standard_ND96asr_v4", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert [s["title"] for s in shown] == ["round 0: node tests of 3 nodes",
                                           "round 1 (if round 0 passes): a screening pair, gpu-1 and gpu-2"]
    pair = yaml.safe_load(next(iter(shown[1]["files"].values())))
    assert pair["kind"] == "PyTorchJob" and pair["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    env = pair["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "NCCL_IB_PCI_RELAXED_ORDERING", "value": "1"} in env  # the SKU's preset


def test_the_dry_run_shows_the_samples_the_check_would_send():
    """--samples 6,3,6: round 0's node tests take 6 samples and the screening pair 3, in the dry run as in the check
    (it showed the built-in 32 and 8 while the check sent what was asked)."""
    proc = run_gpuval("fleet", "check", "--on", "kubernetes", "--nodelist", "gpu-1,gpu-2", "--image", "img:1",
                      "--samples", "6,3,6", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    samples = [re.findall(r"--samples\s*- '(\d+)'", "".join(s["files"].values())) for s in json.loads(proc.stdout)]
    assert samples == [["6"], ["3"]]


def test_markup_in_what_a_node_printed_never_breaks_the_summary(capsys):
    """A node's reason, fault code or name with rich markup ("[/]", "[bold]") is printed as text, after the drain."""
    from gpuval.cli.fleet import _print_outcome
    from gpuval.fleet.plan.causes import Cause
    from gpuval.fleet.plan.terms import FleetVerdicts, Verdict
    from gpuval.fleet.run.outcome import FleetOutcome
    from gpuval.operate.codes import Acted
    from gpuval.operate.node_state import NodeAction
    from gpuval.results.model import Status

    bad = Verdict("node", "n[/]1", ("n[/]1",), Status.FAIL, "node suite: health suite failed: ecc: [/] [bold]x",
                  cause=Cause.HEALTH_FAILED)
    found = FleetVerdicts({"n[/]1": bad}, {}, {}, (), 2, ("note [/]",))
    outcome = FleetOutcome("run-[/]", "slurm", found, [], {}, {"n[/]1": ["[/red]"]}, "n[/]1",
                           [NodeAction("slurm", "n[/]1", Status.FAIL, Acted.DRAINED, "reason '[/]'")])
    _print_outcome(outcome)
    out = capsys.readouterr().out
    assert "ecc: [/] [bold]x" in out and "[/red]" in out and "note [/]" in out and "reason '[/]'" in out


def test_a_node_list_is_capped_before_any_engine_splits_it():
    """Kubernetes names are split at commas, not parsed as a host list: the check counts them first (a list this
    long only comes through the API, not a command line: the kernel caps one argument at 128 KiB)."""
    from gpuval.errors import UsageError
    from gpuval.fleet.run.request import CheckRequest, prepare

    with pytest.raises(UsageError, match="at most"):
        prepare(CheckRequest(on="kubernetes", run_id="20260101T000000Z-abcdef", nodelist=",".join(f"k{i}" for i in range(200_001))))
