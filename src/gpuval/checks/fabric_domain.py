"""The NVLink domain a node's GPUs registered into, judged whole (the fabric check's second half; docs/nvl72.md).

A GB200/GB300 NVL72 compute tray's GPUs register, through the rack's NMX controller, into one multi-node NVLink
domain named `ClusterUUID.CliqueId`. Registration can complete and still leave a GPU outside any domain: Azure found
trays with `CliqueId 0` and an all-zero `ClusterUUID` that kept passing a shallower check (Azure/azhpc-images#506);
NCCL, UCX (openucx/ucx#10615) and torchcomms (meta-pytorch/torchcomms#1385) then treat the GPU as not MNNVL. On a
single-node HGX board the same zeros are normal (tests/data/nvidia-smi/h100x8-565.57.01-thamada-q.txt), so they are
judged only where the GPUs belong to a multi-node domain. Every health condition the driver sets is named; what it
reports as not supported is not judged.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gpuval.node.fabric import SUMMARIES, UUID, ZERO_UUID, FabricHealth
from gpuval.node.machine import Gpu, GpuInventory
from gpuval.results.model import Status

Finding = tuple[Status, str]

# The GPUs of NVL72 compute trays (NVIDIA Multi-Node NVLink user guide: GB200 NVL72, GB300 NVL72), by NVML name
MULTI_NODE_MODELS = ("GB200", "GB300")

# Each health condition the driver can set: (field, the value that is a problem, verdict, what it means)
_HEALTH = (("summary", "unhealthy", Status.FAIL, "the driver's fabric health summary is Unhealthy"),
           ("summary", "limited capacity", Status.WARN, "the driver's fabric health summary is Limited Capacity"),
           ("route_unhealthy", True, Status.FAIL, "a fabric route is unhealthy"),
           ("degraded_bandwidth", True, Status.WARN, "the fabric runs at degraded bandwidth (NVML health mask)"),
           ("route_recovery", True, Status.WARN, "fabric route recovery is in progress"),
           ("access_timeout_recovery", True, Status.WARN, "the fabric is recovering from an access timeout"),
           ("partition_assigned", False, Status.WARN, "no NVLink partition is assigned to it"),
           ("gfm_connected", False, Status.WARN, "the global fabric manager is disconnected"))


def gpu_name(g: Gpu) -> str:
    """A GPU as every finding names it: NVML index and PCI bus id."""
    return f"GPU {g.index} ({g.pci_bus_id})" if g.pci_bus_id else f"GPU {g.index}"


def multi_node(inv: GpuInventory, fabric_baseline: dict[str, Any]) -> str | None:
    """Why this node's GPUs belong to a multi-node NVLink domain, None where nothing says they do: the baseline's
    `fabric.multi_node_nvlink`, an NVL72 tray's GPU model, or a GPU that reports a clique or cluster."""
    declared = fabric_baseline.get("multi_node_nvlink")
    if declared is not None:
        return "the baseline's fabric.multi_node_nvlink" if declared else None
    models = sorted({g.name for g in inv.gpus if any(m in g.name.upper() for m in MULTI_NODE_MODELS)})
    if models:
        return f"{', '.join(models)}: the GPU of an NVL72 compute tray"
    joined = [g.index for g in inv.gpus if g.fabric and (_number(g.fabric.clique_id) or 0) > 0]
    return f"GPU {', '.join(map(str, joined))} report a fabric clique" if joined else None


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0xFFFFFFFF else None


def _identity(g: Gpu, multi: bool) -> list[Finding]:
    """CliqueId and ClusterUUID: readable, and on a multi-node domain's GPU, not the zeros of no domain (what is
    wrong, without the GPU: the findings of several GPUs are grouped)."""
    f = g.fabric
    assert f is not None
    found: list[Finding] = []
    if f.clique_id is not None and _number(f.clique_id) is None:
        found.append((Status.ERROR, f"could not read its fabric CliqueId {f.clique_id!r} (not a clique id)"))
    if f.cluster_uuid is not None and not UUID.match(str(f.cluster_uuid)):
        found.append((Status.ERROR, f"could not read its fabric ClusterUUID {str(f.cluster_uuid)[:60]!r} (not a UUID)"))
    if found or not multi:
        return found
    if f.clique_id == 0:
        found.append((Status.FAIL, "fabric CliqueId 0: registered in no multi-node NVLink domain (NCCL and UCX fall "
                                   "back from MNNVL; Azure/azhpc-images#506)"))
    if f.cluster_uuid == ZERO_UUID:
        found.append((Status.FAIL, "fabric ClusterUUID all zero: the GPU belongs to no NVLink cluster"))
    return found


def _readable(field: str, value: Any) -> bool:
    """A health field holds what the driver can say: a summary word, a configuration text, else true or false."""
    if value is None:
        return True
    if field == "summary":
        return value in SUMMARIES.values()
    return isinstance(value, str) if field == "incorrect_configuration" else isinstance(value, bool)


def _health(health: FabricHealth) -> list[Finding]:
    """Each condition the driver set, named; a value it cannot have is a health it could not read."""
    found: list[Finding] = []
    for field in (f.name for f in fields(health)):
        value = getattr(health, field)
        if not _readable(field, value):
            found.append((Status.ERROR, f"could not read its fabric health {field} {value!r}"))
            continue
        found += [(status, meaning) for name, bad, status, meaning in _HEALTH if name == field and value == bad]
    wrong = health.incorrect_configuration
    if _readable("incorrect_configuration", wrong) and wrong not in (None, "none"):
        found.append((Status.FAIL, f"the fabric reports an incorrect configuration: {wrong}"))
    return found


def _grouped(found: list[tuple[Gpu, Finding]]) -> list[Finding]:
    """One finding per problem, naming every GPU that has it (in the order first seen)."""
    gpus: dict[Finding, list[str]] = {}
    for g, finding in found:
        gpus.setdefault(finding, []).append(gpu_name(g))
    return [(status, f"{', '.join(names)}: {text}") for (status, text), names in gpus.items()]


def _domains(gpus: list[Gpu]) -> tuple[list[Finding], list[str]]:
    """One `ClusterUUID.CliqueId` for every registered GPU of the node; the domains seen."""
    seen: dict[str, list[int]] = {}
    for g in gpus:
        f = g.fabric
        if f and _number(f.clique_id) and f.cluster_uuid and UUID.match(str(f.cluster_uuid)) \
                and f.cluster_uuid != ZERO_UUID:
            seen.setdefault(f"{f.cluster_uuid}.{f.clique_id}", []).append(g.index)
    shown = [f"{domain} (GPU {', '.join(map(str, idx))})" for domain, idx in seen.items()]
    if len(seen) > 1:
        return [(Status.FAIL, f"this node's GPUs are in {len(seen)} NVLink domains, not one: {'; '.join(shown)}")], \
            shown
    return [], shown


def domain_findings(inv: GpuInventory, multi: bool) -> tuple[list[Finding], list[str]]:
    """Findings on the completed registrations of the node's GPUs (identity, health, one domain) and what was read
    but not judged (fields the driver does not report)."""
    done = [g for g in inv.gpus if g.fabric and g.fabric.state == "completed" and g.fabric.status == "success"]
    found: list[tuple[Gpu, Finding]] = []
    for g in done:
        assert g.fabric is not None
        health = _health(g.fabric.health) if g.fabric.health is not None else []
        found += [(g, f) for f in _identity(g, multi) + health]
    findings = _grouped(found)
    split, shown = _domains(done)
    notes = [f"NVLink domain {shown[0]}"] if len(shown) == 1 else []
    unread = [g.index for g in done if g.fabric and (g.fabric.clique_id is None or g.fabric.cluster_uuid is None)]
    if multi and unread:
        notes.append(f"GPU {', '.join(map(str, unread))}: clique or cluster UUID not reported (not judged)")
    if done and not any(g.fabric and g.fabric.health and g.fabric.health.reported() for g in done):
        notes.append("fabric health not reported by this driver (not judged)")
    return findings + split, notes
