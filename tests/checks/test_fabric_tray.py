"""The fabric check on a GB200 NVL72 tray, judged whole: the recorded tray (node/recorded/gb200-tray.yaml) is its
published sources, and the Fabric blocks people posted (tests/data/nvidia-smi/SOURCE.md) change one field of it
each: Azure's tray with clique 0 and a zero cluster UUID, an Unhealthy summary in another domain, a driver that
reports the fabric Not Supported, topograph's swapped clique and UUID. NVML's health mask is decoded as nvml.h lays
it out; the HGX board's zeros stay normal."""

from __future__ import annotations

import json
import re

import pynvml

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import run_suite
from gpuval.node.fabric import ZERO_UUID, FabricHealth, decode_health
from gpuval.node.nvidia_smi import read_query
from gpuval.node.nvml import read_inventory
from gpuval.node.recorded import RecordedMachine
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import context, gpu, no_imds  # noqa: F401
from tests.node.fake_nvml import h100_node, install

SMI = DATA / "nvidia-smi"
TRAY = "gb200-tray"


def run(ctx):
    [result] = run_suite(ctx, [REGISTRY["fabric"]]).results
    return result


def as_query(block: str, bus: str = "00000018:01:00.0") -> list[dict]:
    """A posted Fabric block as `nvidia-smi -q` prints it under a GPU (its lines re-indented to the block's place:
    the posts cut the GPU header and, for Azure's, the indentation)."""
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith(("#", "--"))]
    base = min(len(line) - len(line.lstrip()) for line in lines)
    return read_query(f"GPU {bus}\n" + "\n".join("    " + line[base:] for line in lines) + "\n")


def test_the_recorded_tray_is_its_published_sources():
    table = (SMI / "gb200x4-590.48.01-slinky.txt").read_text()
    states = json.loads("[" + re.search(r'"fabric_states\\":\[(.*?\}\}),', (SMI / "gb200-fabric-states-gpud-1106.txt")
                                        .read_text()).group(1).replace('\\"', '"') + "]")
    inv = RecordedMachine.load(TRAY).gpu_inventory()
    assert [g.pci_bus_id for g in inv.gpus] == re.findall(r"(\w{8}:01:00\.0) Off", table)
    assert inv.driver_version in table and {g.name for g in inv.gpus} == {"NVIDIA GB200"}
    assert all(f"{g.memory_total_mib}MiB" in table and f"{g.power.enforced_w:.0f}W" in table for g in inv.gpus)
    assert [g.uuid for g in inv.gpus] == re.findall(r"GPU (GPU-[0-9a-f-]{36})",
                                                    (SMI / "gb200-fabric-not-supported-gpud-1108.txt").read_text())
    assert {(g.fabric.state, g.fabric.status, g.fabric.clique_id, g.fabric.cluster_uuid) for g in inv.gpus} == {
        (s["state"].lower(), s["status"].lower(), s["clique_id"], s["cluster_uuid"]) for s in states}
    assert all(g.fabric.health is None and len(g.nvlink_active) == 18 for g in inv.gpus)


def test_the_healthy_tray_passes_naming_its_one_domain():
    result = run(context(TRAY))
    assert result.status is Status.PASS and result.value == 4
    assert "NVLink domain 9c6f5af3-53bf-49b5-a436-b66766c413c3.4026 (GPU 0, 1, 2, 3)" in result.reason
    assert "fabric health not reported by this driver (not judged)" in result.reason
    assert json.loads(json.dumps(result.details))["fabric"]["0"]["clique_id"] == 4026  # the record's JSON


def test_a_tray_with_clique_0_and_a_zero_uuid_fails_fabric():
    """Azure/azhpc-images#506: State Completed, CliqueId 0, a zero ClusterUUID kept passing a shallower check.
    With Status Success the zeros alone fail; with Azure's own block every problem is named."""
    def unregistered(data):
        data["gpu_defaults"]["fabric"] = {"state": "completed", "status": "success", "clique_id": 0,
                                          "cluster_uuid": ZERO_UUID}

    result = run(context(TRAY, unregistered))
    assert result.status is Status.FAIL
    every = "GPU 0 (00000008:01:00.0), GPU 1 (00000009:01:00.0), GPU 2 (00000018:01:00.0), GPU 3 (00000019:01:00.0)"
    assert f"{every}: fabric CliqueId 0: registered in no multi-node NVLink domain" in result.reason
    assert f"{every}: fabric ClusterUUID all zero" in result.reason
    [posted] = as_query((SMI / "gb200-fabric-azhpc-images-506.txt").read_text())
    azure = run(context(TRAY, gpu(2, fabric=posted["fabric"])))
    assert azure.status is Status.FAIL
    assert "GPU 2 (00000018:01:00.0): fabric completed with status 'insufficient resources'" in azure.reason


def test_an_unhealthy_summary_and_a_second_domain_are_named():
    """kubernetes-sigs/dra-driver-nvidia-gpu#626: Completed, Success, CliqueId 2, Health Summary Unhealthy."""
    [posted] = as_query((SMI / "gb200-fabric-unhealthy-dra-626.txt").read_text())
    assert posted["fabric"]["health"] == {"summary": "unhealthy", "degraded_bandwidth": False}
    result = run(context(TRAY, gpu(1, fabric=posted["fabric"])))
    assert result.status is Status.FAIL
    assert "GPU 1 (00000009:01:00.0): the driver's fabric health summary is Unhealthy" in result.reason
    assert ("this node's GPUs are in 2 NVLink domains, not one: 9c6f5af3-53bf-49b5-a436-b66766c413c3.4026 "
            "(GPU 0, 2, 3); dc6e40c4-d722-4357-9ba6-5291dd461278.2 (GPU 1)") in result.reason


def test_not_supported_is_not_judged_and_garbage_could_not_be_read():
    """leptonai/gpud#1108: a GB200 driver reporting the fabric Not Supported: not judged, never a pass.
    NVIDIA/topograph's test data: a CliqueId that is a UUID and a ClusterUUID that is a number."""
    skipped = run(context(TRAY, lambda d: d["gpu_defaults"].update(fabric={"state": "not_supported"})))
    assert skipped.status is Status.SKIPPED and skipped.reason.startswith("not judged")
    pdsh = (SMI / "mnnvl-pdsh-topograph.txt").read_text()
    clique, cluster = re.findall(r"node-11:\s+(?:CliqueId|ClusterUUID)\s+: (?!N/A)(\S+)", pdsh)
    [swapped] = read_query(f"GPU 00000008:01:00.0\n    Fabric\n        State : Completed\n        Status : Success\n"
                           f"        CliqueId : {clique}\n        ClusterUUID : {cluster}\n")
    result = run(context(TRAY, gpu(0, fabric=swapped["fabric"])))
    assert result.status is Status.ERROR
    assert f"could not read its fabric CliqueId '{clique}' (not a clique id)" in result.reason
    assert f"could not read its fabric ClusterUUID '{cluster}' (not a UUID)" in result.reason


def test_health_bits_are_named_as_nvml_h_lays_them_out():
    """NVIDIA/nccl#2186 read healthMask 0xaa as "4 of 8 NVL paths down": by nvml.h it is every condition false."""
    assert decode_health(0xAA) == FabricHealth(None, False, False, False, False, None, None, None)
    bad = decode_health(1 << 4 | 5 << 8 | 2 << 12 | 2 << 14 | 1 << 2, 2)
    assert (bad.route_unhealthy, bad.incorrect_configuration, bad.partition_assigned, bad.gfm_connected,
            bad.route_recovery, bad.summary) == (True, "insufficient NVLinks", False, False, True, "unhealthy")
    result = run(context(TRAY, gpu(3, fabric={"state": "completed", "status": "success", "clique_id": 4026,
                                              "cluster_uuid": "9c6f5af3-53bf-49b5-a436-b66766c413c3",
                                              "health": bad.__dict__})))
    assert result.status is Status.FAIL
    for said in ("a fabric route is unhealthy", "the fabric reports an incorrect configuration: insufficient NVLinks",
                 "the driver's fabric health summary is Unhealthy"):
        assert f"GPU 3 (00000019:01:00.0): {said}" in result.reason


def test_nvml_v4_and_v3_fabric_info_and_the_hgx_zeros(monkeypatch):
    """NVML's fabric info through the pynvml stand-in: v4's unicast clique and its mask and summary, v3 where the
    driver has no v4. The HGX board's clique 0 and zero UUID are normal there: judged only on a multi-node tray."""
    uuid = bytes.fromhex("9c6f5af353bf49b5a436b66766c413c3")
    done = (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, 4026)
    install(monkeypatch, h100_node({0: {"fabric": done, "fabric_v4": True, "fabric_uuid": uuid,
                                        "fabric_health": (0xAA | 1 << 8, 1)},
                                    1: {"fabric": done, "fabric_uuid": uuid, "fabric_health": (0x1, 3)}}))
    g0, g1 = read_inventory().gpus[:2]
    assert (g0.fabric.clique_id, g0.fabric.cluster_uuid, g0.fabric.health.summary,
            g0.fabric.health.incorrect_configuration) == (4026, "9c6f5af3-53bf-49b5-a436-b66766c413c3", "healthy",
                                                          "none")
    assert (g1.fabric.clique_id, g1.fabric.degraded_bandwidth, g1.fabric.health.summary) == (4026, True,
                                                                                             "limited capacity")
    hgx = run(context("hgx-h100-8gpu"))
    assert hgx.status is Status.PASS and "multi-node" not in hgx.reason
