"""InfiniBand performance per HCA with perftest, where it is installed: loopback RDMA write bandwidth (from GPU
memory with GPUDirect where the SKU's baseline says so, as AzNHC's check_ib_bw_gdr does) and latency."""

from __future__ import annotations

from typing import Any

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, worst
from gpuval.checks.fabric import infiniband_ports
from gpuval.node.dist_env import free_port
from gpuval.node.machine import HardwareUnavailable, IbPort, NotRecorded, ToolMissing
from gpuval.node.nccl_topo import normalize_bus_id
from gpuval.node.perftest import parse
from gpuval.node.topology import gpu_topology
from gpuval.results.model import Status

DEFAULT_SIZE = 8388608  # AzNHC's message size for the GDR loopback
LATENCY_SIZE = 2


def _gpu_for(ctx: CheckContext, ports: list[IbPort]) -> dict[str, str]:
    """The GPU (its PCI bus id) each HCA reads from: one beside it (nearest, else on its NUMA node), each GPU once
    while one is free, else the GPU of the HCA's index (AzNHC pairs HCA i with GPU i)."""
    rows = gpu_topology(ctx.machine, ctx.inventory())
    chosen: dict[str, str] = {}
    for i, p in enumerate(ports):
        near = [r for r in rows if p.hca in r.nearest_nics] or [r for r in rows if p.hca in r.local_nics]
        free = [r for r in near if normalize_bus_id(r.pci_bus_id) not in chosen.values()]
        pick = free[0] if free else (rows[i] if i < len(rows) else rows[0])
        chosen[p.hca] = normalize_bus_id(pick.pci_bus_id)
    return chosen


def _latency(ctx: CheckContext, p: IbPort) -> dict[str, Any] | None:
    if ctx.machine.tool("ib_write_lat") is None:
        return None
    try:
        rows = parse(ctx.machine.perftest("ib_write_lat", p.hca, free_port(), LATENCY_SIZE, None, p.numa_node)).latency
    except HardwareUnavailable as exc:
        return {"error": str(exc)}
    return {"typical_us": rows[0].t_typical, "p99_us": rows[0].p99} if rows else None


def _one(ctx: CheckContext, p: IbPort, size: int, gpu: str | None, metric: str) -> tuple[list[tuple[Status, str]],
                                                                                          float | None]:
    try:
        out = ctx.machine.perftest("ib_write_bw", p.hca, free_port(), size, gpu, p.numa_node)
    except (NotRecorded, ToolMissing):
        raise
    except HardwareUnavailable as exc:
        return [(Status.ERROR, f"{p.hca}: could not run: {exc}")], None
    rows = [r for r in parse(out).bandwidth if r.size == size]
    if not rows:
        return [(Status.ERROR, f"{p.hca}: ib_write_bw printed no result row for {size} bytes")], None
    gbps = rows[-1].average_gbps
    judged = ctx.limits.judge(metric, gbps)
    found = [(judged.status, f"{p.hca}: {judged.reason}")] if judged.status in (Status.WARN, Status.FAIL) else []
    return found, gbps


@check("ib_write_bw", "IB_WRITE_BW_LOW", needs_gpu=False)
def ib_write_bw(ctx: CheckContext, me: Check) -> CheckResult:
    """Loopback RDMA write bandwidth through each active HCA (perftest ib_write_bw, from GPU memory where the SKU
    uses GPUDirect RDMA, AzNHC's check_ib_bw_gdr) and its latency (ib_write_lat, host memory) when installed."""
    ports = infiniband_ports(ctx)
    if not ports:
        raise NotApplicable("no InfiniBand HCA on this machine (/sys/class/infiniband)")
    if ctx.machine.tool("ib_write_bw") is None:
        raise ToolMissing(f"ib_write_bw (perftest, linux-rdma/perftest) is not installed on {ctx.machine.description}")
    gdr = ctx.limits.band("ib_write_bw_gdr_gbps") is not None
    metric = "ib_write_bw_gdr_gbps" if gdr else "ib_write_bw_gbps"
    band = ctx.limits.band(metric)
    size = int(band.size_bytes) if band and band.size_bytes else DEFAULT_SIZE
    active = [p for p in ports if p.state.upper() == "ACTIVE"]
    if not active:
        return me.result(Status.FAIL, 0, band.expected if band else None, "Gb/s",
                         "no InfiniBand port is ACTIVE: nothing to measure (see ib_ports)")
    gpus = _gpu_for(ctx, active) if gdr else {}
    findings, measured, latency = [], {}, {}
    for p in active:
        found, gbps = _one(ctx, p, size, gpus.get(p.hca), metric)
        findings += found
        if gbps is not None:
            measured[p.hca] = gbps
        lat = _latency(ctx, p)
        if lat:
            latency[p.hca] = lat
    if not measured:
        return me.result(Status.ERROR, reason=f"could not run: {worst(findings)[1]}")
    status, reason = worst(findings)
    low = min(measured, key=measured.__getitem__)
    how = f"{'GPU memory (GPUDirect)' if gdr else 'host memory'}, {size} bytes"
    judged = "" if band else " (no baseline: reported, not judged)"
    return me.result(status, measured[low], band.expected if band else None, "Gb/s",
                     reason or f"{len(measured)} HCAs, slowest {low} {measured[low]:.1f} Gb/s ({how}){judged}",
                     bandwidth_gbps=measured, metric=metric, size_bytes=size, gpus=gpus, latency=latency,
                     skipped=[p.hca for p in ports if p not in active])
