"""IMEX where it applies, on published `nvidia-imex-ctl` answers (tests/data/imex/SOURCE.md): an 18-tray GB200 rack
UP (AWS ParallelCluster's guide), GH200 domains of one and two nodes from a ComputeDomain's daemon pod
(jgehrcke/jpsnips-nv); the recorded GB200 tray at rest is not judged, nor an HGX box, nor a job or pod without a
channel. Hostile answers (truncated JSON, a matrix of the wrong size, a state word nobody prints) could not run,
naming the command. The live reader runs stand-in systemctl and nvidia-imex-ctl (tests/node/tools.py)."""

from __future__ import annotations

import json

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import run_suite
from gpuval.node.imex import ImexOutputError, parse_domain, parse_query
from gpuval.node.services import imex_host
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import context, no_imds  # noqa: F401
from tests.node.tools import fake_tool, only_on_path, printing

IMEX = DATA / "imex"
RACK = (IMEX / "imex-N-18-nodes-aws-pcluster.txt").read_text()
TRAY = "gb200-tray"


def run(change=None, env=None):
    [result] = run_suite(context(TRAY, change, env=env or {}), [REGISTRY["imex"]]).results
    return result


def static(domain: str = RACK, channels=("channel0",), query: str = "READY"):
    """The tray with a static IMEX domain: the service active, nvidia-imex-ctl's answers, the channels."""
    def apply(data):
        data["imex"] = {"service": "active", "installed": True, "query": query, "domain": domain,
                        "channels": list(channels), "channel_major": 234}
    return apply


def test_published_answers_read_whole():
    rack = parse_domain(RACK)
    assert rack.state == "UP" and len(rack.peers) == 18 and not rack.not_ready() and not rack.broken()
    assert (rack.peers[17].host, rack.peers[17].version) == ("172.31.56.47", "570.172")
    for name, nodes in (("imex-q-N-1-node-gh200-jgehrcke.txt", 1), ("imex-q-N-2-nodes-gh200-jgehrcke.txt", 2)):
        query, domain = (IMEX / name).read_text().split("\n", 1)
        assert parse_query(query) == "READY" and len(parse_domain(domain).cells) == nodes * nodes


def test_an_idle_tray_an_hgx_box_and_a_job_or_pod_without_a_channel_are_not_judged():
    idle = run()
    assert idle.status is Status.SKIPPED and "(an idle tray is not judged)" in idle.reason
    job = run(env={"SLURM_JOB_ID": "74"})
    assert job.status is Status.SKIPPED and "Slurm job 74 holds no IMEX channel" in job.reason
    pod = run(env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert pod.status is Status.SKIPPED and "this pod holds no ComputeDomain channel" in pod.reason
    hgx = run_suite(context("hgx-h100-8gpu", lambda d: d.update(imex={"service": "failed"}), env={}),
                    [REGISTRY["imex"]]).results[0]
    assert hgx.status is Status.SKIPPED and "IMEX does not apply (NVIDIA/NVSentinel#1471)" in hgx.reason


def test_a_rack_up_with_a_channel_passes_and_a_job_with_its_channel_is_judged():
    up = run(static())
    assert up.status is Status.PASS and up.value == 18
    assert up.reason.startswith("IMEX domain UP, 18 node(s) READY and Connected; channel(s) channel0")
    slinky = (IMEX / "imex-channel-slinky.txt").read_text().split("\n")[3]  # the channel Slurm job 74 held
    in_job = run(lambda d: d.update(imex={"service": "inactive", "installed": False, "channels": [slinky]}),
                 env={"SLURM_JOB_ID": "74"})
    assert in_job.status is Status.PASS and "the domain was not read: nvidia-imex-ctl is not installed" in in_job.reason


def test_a_degraded_domain_names_the_nodes_and_a_missing_channel_fails():
    """The rack's answer with tray #5 down, as the legend says it would be printed (built from the real one)."""
    lines = RACK.replace("Node #5   - 172.31.50.44    - READY      ", "Node #5   - 172.31.50.44    - UNAVAILABLE").split("\n")
    rows = [line if not line.strip()[:2].strip().isdigit() else
            line[:16] + "   ".join("N" if (int(line.split()[0]) == 5) != (i == 5) else "C" for i in range(18))
            for line in lines]
    degraded = "\n".join(rows).replace("Domain State: UP", "Domain State: DEGRADED")
    result = run(static(degraded, channels=()))
    assert result.status is Status.FAIL
    assert "IMEX domain state DEGRADED (of 18 nodes), not UP" in result.reason
    assert "IMEX node #5 (172.31.50.44) is UNAVAILABLE" in result.reason
    assert "34 IMEX connection(s) not Connected: node #0 (172.31.48.81) -> node #5 (172.31.50.44): never connected" \
        in result.reason
    assert "no IMEX channel under /dev/nvidia-caps-imex-channels" in result.reason
    waiting = run(static(query="WAITING_FOR_PEERS"))
    assert waiting.status is Status.FAIL and "this node's IMEX daemon is WAITING_FOR_PEERS" in waiting.reason


def test_the_json_answer_counts_an_unreachable_node_as_invalid():
    """`-N -j` in the shape DCGM and the published parsers read (built: no verbatim capture was published)."""
    doc = {"status": "DEGRADED", "timestamp": "9/4/2026 00:37:39.905", "nodes": {
        "0": {"status": "READY", "host": "10.0.0.1", "version": "580.95.05",
              "connections": {"0": {"host": "10.0.0.1", "status": "CONNECTED"},
                              "1": {"host": "10.0.0.2", "status": "DISCONNECTED"}}},
        "1": {"status": "UNAVAILABLE", "host": "10.0.0.2"}}}
    domain = parse_domain(json.dumps(doc))
    assert [(a.index, b.index, what) for a, b, what in domain.broken()] == [
        (0, 1, "disconnected"), (1, 0, "invalid (not reachable)"), (1, 1, "invalid (not reachable)")]


@pytest.mark.parametrize("answer, said", [
    ('{"status": "UP", "nodes": {"0": {"status": "READY", "host"', "nvidia-imex-ctl -N -j: not JSON"),
    ('{"status": "UP", "nodes": ["READY"]}', "nvidia-imex-ctl -N -j: not the domain's shape"),
    (RACK.replace("   C\n      17", "\n      17"), "row 16 of the connectivity matrix has 17 cells for 18 nodes"),
    (RACK.replace("      17        C" + "   C" * 17 + "\n", ""), "a 17 x 18 connectivity matrix for 18 nodes"),
    (RACK.replace("Domain State: UP", ""), "no 'Domain State:' line"),
    (RACK.replace("   C   C\n       2", "   C   X\n       2"), "connectivity codes ['X'] are not in its legend"),
])
def test_hostile_answers_could_not_run_naming_the_command(answer, said):
    with pytest.raises(ImexOutputError, match="nvidia-imex-ctl"):
        parse_domain(answer)
    result = run(static(answer))
    assert result.status is Status.ERROR and said in result.reason and result.reason.startswith("could not run")
    assert "Traceback" not in result.reason


def test_a_query_word_nobody_prints_could_not_run():
    result = run(static(query="\x1b[31mOK\n"))
    assert result.status is Status.ERROR and "nvidia-imex-ctl -q answered '\\x1b[31mOK', not a daemon state" \
        in result.reason


def test_the_live_reader_runs_systemctl_and_nvidia_imex_ctl(tmp_path, monkeypatch):
    """The 18-tray rack's answer printed by a stand-in nvidia-imex-ctl, systemd saying active, a channel device
    and its major number under a node root."""
    bin_dir = tmp_path / "bin"
    only_on_path(monkeypatch, bin_dir)
    fake_tool(bin_dir, "systemctl", "echo active")
    printing(bin_dir, "nvidia-imex-ctl", IMEX / "imex-N-18-nodes-aws-pcluster.txt")
    root = tmp_path / "root"
    (root / "dev/nvidia-caps-imex-channels").mkdir(parents=True)
    (root / "dev/nvidia-caps-imex-channels/channel0").touch()
    (root / "proc").mkdir()
    (root / "proc/devices").write_text("Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n")
    host = imex_host(root)
    assert (host.service, host.installed, host.channels, host.channel_major) == ("active", True, ["channel0"], 234)
    assert parse_domain(host.domain).state == "UP" and host.detail == ""
    fake_tool(bin_dir, "nvidia-imex-ctl", "echo 'failed to connect to IMEX daemon' >&2; exit 1")
    down = imex_host(root)
    assert down.query is None and "nvidia-imex-ctl -q: failed to connect to IMEX daemon" in down.detail
    fake_tool(bin_dir, "systemctl", "echo inactive; exit 3")  # an idle tray: nothing running, nothing to ask
    (root / "dev/nvidia-caps-imex-channels/channel0").unlink()
    idle = imex_host(root)
    assert (idle.service, idle.query, idle.domain, idle.channels, idle.detail) == ("inactive", None, None, [], "")
