"""A fleet drain and a node's quick pass race across hosts (the node's lock is local): Slurm has no conditional
update, so gpuval's read-modify-write (engines/slurm/nodes.edit_node) compares as closely as scontrol allows: the
node is read again right before an undrain, a drain is read back, and a drain written over a drain is read once
more after another gpuval's undrain could have landed. On the session's real Slurm (tests/operate/conftest.py),
with an scontrol wrapper that slows one call of the quick pass, as the review did."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpuval.operate.codes import Acted
from gpuval.engines import node_client
from gpuval.operate.node_state import apply
from gpuval.results.model import Status
from tests.operate.support import recorded_machine

HELD = "gpuval: ECC_ERRORS 20261126T000000Z-0ecc00"
FLEET_RUN = "20261126T000100Z-f1ee71"


def _in_service(cluster, node: str) -> None:
    if cluster.node(node).drained:
        cluster.scontrol("update", f"nodename={node}", "state=resume")


def _slow_quick_pass(tmp_path: Path, slow_when: str, before: bool) -> tuple[subprocess.Popen, Path]:
    """A healthy quick pass on n1 whose scontrol sleeps 6 s in one call (`slow_when`: a shell test on "$@"), before
    the call reaches slurmctld (`before`: the change lands late) or after it (the answer comes back late)."""
    real = subprocess.run(["which", "scontrol"], capture_output=True, text=True, check=True).stdout.strip()
    wrappers, marker = tmp_path / "bin", tmp_path / "slowed"
    wrappers.mkdir()
    (wrappers / "scontrol").write_text(
        "#!/bin/sh\n"
        f'if {slow_when}; then touch {marker}; {"sleep 6; " if before else ""}"{real}" "$@"; status=$?; '
        f'{"" if before else "sleep 6; "}exit $status; fi\n'
        f'exec "{real}" "$@"\n')
    (wrappers / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{wrappers}:{os.environ['PATH']}"}
    quick = subprocess.Popen([sys.executable, "-m", "gpuval", "health", "--quick", "--recorded",
                              str(recorded_machine(tmp_path, "good")), "--node", "n1", "--scheduler", "slurm",
                              "--drain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert quick.poll() is None and time.monotonic() < deadline, quick.communicate()
        time.sleep(0.05)
    return quick, marker


def test_a_fleet_drain_survives_a_quick_pass_whose_undrain_lands_after_it(cluster, tmp_path: Path):
    """The review's reproducer: the quick pass re-checked ECC_ERRORS and lifts it, its undrain slowed by 6 s; the
    fleet drains FLEET_NODE_SLOW meanwhile. Before, the undrain landed last and the fleet's finding was gone; now
    the fleet's drain, written over a drain, is read again after the undrain could land, and stands."""
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={HELD}")
    try:
        quick, _ = _slow_quick_pass(tmp_path, '[ "$3" = state=undrain ] && [ ! -e "$0.done" ] && touch "$0.done"', before=True)
        time.sleep(1)
        fleet = apply(Status.FAIL, "n1", FLEET_RUN, ["FLEET_NODE_SLOW"], node_client("slurm"))
        out, err = quick.communicate(timeout=120)
        assert "slurm node n1: resumed" in out, out + err  # its own lift was right: it re-checked ECC_ERRORS
        assert fleet.action == Acted.DRAINED
        node = cluster.node("n1")
        assert node.drained and node.reason == f"gpuval: FLEET_NODE_SLOW {FLEET_RUN}", node
    finally:
        _in_service(cluster, "n1")


def test_a_quick_pass_never_lifts_a_drain_whose_reason_changed_since_it_read_it(cluster, tmp_path: Path):
    """The quick pass reads ECC_ERRORS and decides to lift; its read comes back 6 s late, and meanwhile the fleet
    adds FLEET_NODE_SLOW. Read again right before the undrain, the reason has changed: decided again, the drain
    stays (the quick pass did not re-check FLEET_NODE_SLOW)."""
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={HELD}")
    try:
        quick, _ = _slow_quick_pass(tmp_path, '[ "$1" = show ] && [ ! -e "$0.done" ] && touch "$0.done"', before=False)
        fleet = threading.Thread(target=apply, args=(Status.FAIL, "n1", FLEET_RUN, ["FLEET_NODE_SLOW"],
                                                     node_client("slurm")))
        fleet.start()
        out, err = quick.communicate(timeout=120)
        fleet.join(timeout=120)
        assert "slurm node n1: unchanged" in out and "did not re-check FLEET_NODE_SLOW" in out, out + err
        node = cluster.node("n1")
        assert node.drained and node.reason == f"gpuval: ECC_ERRORS FLEET_NODE_SLOW {FLEET_RUN}", node
    finally:
        _in_service(cluster, "n1")
