"""The NVSwitch fabric of HGX nodes (ND A100 v4, ND H100 v5, ND H200 v5): the fabric manager trains NVLink through
the switches at boot, and until it is done CUDA refuses to start (error 802, "system not yet initialized"); a
stopped or mismatched fabric manager is a node that runs nothing. Hopper GPUs report the fabric's state through
NVML; A100 ones do not, so there the fabric manager service and its version are what can be read. NVLink SHARP
(NVLS) needs the fabric and multicast support in the GPU (CUDA's MULTICAST_SUPPORTED attribute)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, unreadable, worst
from gpuval.checks.fabric_domain import domain_findings, gpu_name, multi_node
from gpuval.node.cuda_attrs import is_system_not_ready
from gpuval.node.machine import FabricManager, GpuInventory, HardwareUnavailable, NotRecorded
from gpuval.node.nccl_topo import normalize_bus_id
from gpuval.results.model import Status

Finding = tuple[Status, str]


def _expected(ctx: CheckContext) -> dict[str, Any]:
    return dict((ctx.baseline.raw.get("fabric") if ctx.baseline else None) or {})


def _state_findings(inv: GpuInventory) -> list[Finding]:
    findings = []
    for g in inv.gpus:
        f = g.fabric
        if f is None or f.state == "not_supported":
            continue
        if f.state == "in_progress":
            findings.append((Status.WARN, f"{gpu_name(g)}: fabric training in progress: CUDA refuses to start until "
                                          "the fabric manager completes it (run again in a minute)"))
        elif f.state != "completed":
            findings.append((Status.FAIL, f"{gpu_name(g)}: fabric {f.state.replace('_', ' ')}: the fabric manager has "
                                          "not set up NVLink (CUDA fails with error 802)"))
        elif f.status != "success":
            findings.append((Status.FAIL, f"{gpu_name(g)}: fabric completed with status {f.status!r}"))
    return findings


def _manager_findings(fm: FabricManager, driver: str) -> tuple[list[Finding], str]:
    """The service must be active; its version must be the driver's (the fabric manager refuses to start on a
    mismatch, NVIDIA Fabric Manager User Guide)."""
    findings: list[Finding] = []
    if fm.service is not None and fm.service != "active":
        findings.append((Status.FAIL, f"nvidia-fabricmanager is {fm.service}: on an NVSwitch node CUDA fails with "
                                      "error 802 without it (systemctl start nvidia-fabricmanager)"))
    if fm.version and fm.version != driver:
        findings.append((Status.FAIL, f"fabric manager {fm.version} is not driver {driver}: it must be the same "
                                      "version (NVIDIA Fabric Manager User Guide)"))
    shown = f"nvidia-fabricmanager {fm.service or 'state unknown'}" + (f", version {fm.version}" if fm.version else "")
    return findings, shown + (f" ({fm.detail})" if fm.detail and (fm.service is None or not fm.version) else "")


def _nvls(ctx: CheckContext, inv: GpuInventory) -> tuple[list[Finding], str]:
    """NVLS multicast per GPU, from CUDA; CUDA that cannot start because the fabric is not ready fails."""
    try:
        attrs = ctx.machine.cuda_attributes()
    except NotRecorded:
        return [], "NVLS not read (not recorded)"
    except HardwareUnavailable as exc:
        if is_system_not_ready(str(exc)):
            return [(Status.FAIL, f"CUDA cannot start: {exc}")], "NVLS unknown"
        return [], f"NVLS not read ({exc})"
    values = {g.index: attrs.get(normalize_bus_id(g.pci_bus_id), {}).get("multicast_supported")
              for g in inv.gpus if g.pci_bus_id}
    missing = [i for i, v in values.items() if v == 0]
    if missing:
        return [(Status.WARN, f"NVLS multicast unavailable on GPU {', '.join(map(str, missing))} (CUDA): NCCL cannot "
                              "use NVLink SHARP, all_reduce runs without it")], "NVLS unavailable"
    known = [v for v in values.values() if v is not None]
    return [], "NVLS multicast available" if known and all(known) else "NVLS not reported by this driver"


def _manager(ctx: CheckContext, inv: GpuInventory, inferred: bool) -> tuple[list[Finding], str, bool]:
    """The fabric manager's findings, what was read, and whether anything was judged. `inferred`: no baseline
    says this is an NVSwitch node; with no fabric manager installed either, the check does not apply."""
    try:
        fm = ctx.machine.fabric_manager()
    except NotRecorded as exc:
        return [], str(exc), False
    if inferred and fm.service is None and fm.version is None:
        raise NotApplicable(f"no NVSwitch fabric seen: the GPUs report no fabric state and {fm.detail}")
    found, shown = _manager_findings(fm, inv.driver_version)
    return found, shown, fm.service is not None or bool(fm.version)


@check("fabric", "FABRIC_NOT_READY")
def fabric(ctx: CheckContext, me: Check) -> CheckResult:
    """NVLink fabric: each GPU's registration (Hopper and later: completed, status success; on a multi-node NVLink
    tray a clique and cluster UUID, one domain for the node), every health condition the driver sets, the fabric
    manager service and its version against the driver's (A100), and NVLS multicast where the SKU has it."""
    inv = ctx.inventory()
    want = _expected(ctx)
    if want.get("nvswitch") is False:
        raise NotApplicable(f"{ctx.sku} has no NVSwitch ({want.get('source', 'baseline')})")
    reporting = [g for g in inv.gpus if g.fabric is not None and g.fabric.state != "not_supported"]
    multi = multi_node(inv, want)
    registered, notes = domain_findings(inv, multi is not None)
    findings = unreadable(inv, "fabric") + _state_findings(inv) + registered
    parts = [f"{sum(1 for g in reporting if g.fabric and g.fabric.state == 'completed')}/{len(inv.gpus)} GPUs report "
             "the fabric completed"] + ([f"multi-node NVLink ({multi})"] if multi else []) + notes if reporting else []
    judged = bool(reporting)
    if want.get("fabric_state") and not reporting:
        findings.append((Status.WARN, f"the driver reports no fabric state for these GPUs ({ctx.sku} GPUs have one "
                                      "from R530 on): the fabric is not checked"))
    if want.get("fabric_manager") or (not want and not reporting):
        found, shown, read = _manager(ctx, inv, inferred=not want)
        findings, judged = findings + found, judged or read
        parts.append(shown)
    if want.get("nvls") or (not want and reporting):
        found, shown = _nvls(ctx, inv)
        findings += found
        parts.append(shown)
    if not judged and not findings:
        where = " (in a container the fabric manager runs on the host)" if ctx.machine.container_markers() else ""
        return me.result(Status.SKIPPED, reason=f"not judged: {'; '.join(parts)}{where}")
    status, reason = worst(findings)
    return me.result(status, len(reporting) if reporting else None, len(inv.gpus) if reporting else None,
                     "GPUs" if reporting else "", reason or "; ".join(parts),
                     fabric={g.index: asdict(g.fabric) for g in reporting if g.fabric})
