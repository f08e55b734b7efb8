"""Checks of the fabric: InfiniBand ports, GPU / NIC / NUMA placement, and the network NCCL really uses."""

from __future__ import annotations

from pathlib import Path

from gpuval.baselines.transport import judge_transport, socket_causes
from gpuval.checks.base import Check, CheckContext, CheckResult, check, worst
from gpuval.collectives.nccl_debug import NcclNetwork, read_nccl_network
from gpuval.node.machine import IbPort
from gpuval.node.topology import gpu_topology
from gpuval.results.model import Status


def infiniband_ports(ctx: CheckContext) -> list[IbPort]:
    """Ports whose link layer is InfiniBand (accelerated-networking Ethernet functions are not the fabric)."""
    return [p for p in ctx.machine.ib_ports() if p.link_layer.lower() == "infiniband"]


@check("ib_ports", "IB_PORT_DOWN", needs_gpu=False)
def ib_ports(ctx: CheckContext, me: Check) -> CheckResult:
    """Every InfiniBand port ACTIVE at the SKU's rate, and as many HCAs as the SKU has."""
    ports = infiniband_ports(ctx)
    hcas = sorted({p.hca for p in ports})
    count_band = ctx.limits.band("ib_hcas")
    if not ports:
        if count_band and count_band.expected:
            return me.result(Status.FAIL, 0, count_band.expected, "HCAs",
                             f"no InfiniBand HCA found, {ctx.sku} has {count_band.expected:g} ({count_band.expected_source})")
        return me.result(Status.SKIPPED, reason="no InfiniBand HCA on this machine (/sys/class/infiniband)")
    findings = []
    judged = ctx.limits.judge("ib_hcas", len(hcas))
    if judged.status in (Status.WARN, Status.FAIL):
        findings.append((judged.status, f"{len(hcas)} HCAs: {judged.reason}"))
    for p in ports:
        if p.state.upper() != "ACTIVE":
            findings.append((Status.FAIL, f"{p.hca} port {p.port} is {p.state} ({p.phys_state})"))
        elif p.rate_gbps is not None:
            rate = ctx.limits.judge("ib_rate_gbps", p.rate_gbps)
            if rate.status in (Status.WARN, Status.FAIL):
                findings.append((rate.status, f"{p.hca} port {p.port}: {rate.reason}"))
    status, reason = worst(findings)
    rates = sorted({p.rate_gbps for p in ports if p.rate_gbps is not None})
    return me.result(status, len(hcas), count_band.expected if count_band else None, "HCAs",
                     reason or f"{len(hcas)} HCAs ({', '.join(hcas)}) ACTIVE at {'/'.join(f'{r:g}' for r in rates)} Gb/s",
                     ports=[f"{p.hca}/{p.port} {p.state} {p.rate_gbps} Gb/s" for p in ports])


@check("topology", "TOPOLOGY_MISMATCH")
def topology(ctx: CheckContext, me: Check) -> CheckResult:
    """GPU NUMA placement as the SKU expects, an HCA on each GPU's NUMA node, NCCL_TOPO_FILE present if set."""
    rows = gpu_topology(ctx.machine, ctx.inventory())
    expected = (ctx.baseline.topology if ctx.baseline else {}) or {}
    want = expected.get("gpu_numa")
    seen = [r.numa_node for r in rows]
    findings = []
    if want is not None:
        if len(want) == len(seen) and any(s != w for s, w in zip(seen, want) if s is not None):
            bad = [f"GPU {i} on NUMA {s} (expected {w})" for i, (s, w) in enumerate(zip(seen, want)) if s != w]
            findings.append((Status.FAIL, f"{', '.join(bad)} ({expected.get('source', 'baseline')}): "
                                          "pinning plans and topology files made for this SKU would be wrong"))
    unknown = [r.gpu for r in rows if r.numa_node is None]
    if unknown:
        findings.append((Status.WARN, f"GPU {', '.join(map(str, unknown))}: the platform does not say its NUMA node"))
    if expected.get("hca_on_gpu_numa"):
        lonely = [r.gpu for r in rows if r.numa_node is not None and not r.local_nics]
        if lonely:
            findings.append((Status.FAIL, f"GPU {', '.join(map(str, lonely))}: no InfiniBand HCA on its NUMA node"))
    topo_file = ctx.env.get("NCCL_TOPO_FILE")
    if topo_file and not Path(topo_file).exists():
        findings.append((Status.WARN, f"NCCL_TOPO_FILE={topo_file} does not exist on this machine"))
    status, reason = worst(findings)
    return me.result(status, " ".join("-" if s is None else str(s) for s in seen),
                     " ".join(map(str, want)) if want is not None else None, "NUMA node per GPU",
                     reason or f"{len(rows)} GPUs on NUMA nodes {sorted({s for s in seen if s is not None})}"
                     + (", each with a local HCA" if expected.get("hca_on_gpu_numa") else ""))


def transport_causes(net: NcclNetwork, ctx: CheckContext) -> list[str]:
    """What this machine and the log show about why NCCL fell back to TCP sockets."""
    down = [f"{p.hca}/{p.port} {p.state}" for p in infiniband_ports(ctx) if p.state.upper() != "ACTIVE"]
    return socket_causes(net, ib_disabled=ctx.env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"),
                         net_socket=ctx.env.get("NCCL_NET", "").lower() == "socket",
                         rdma_missing=not ctx.machine.rdma_device_files(),
                         libibverbs_missing=not ctx.has_libibverbs(), ports_down=down)


def judge_log(net: NcclNetwork | None, ctx: CheckContext, me: Check) -> CheckResult:
    """This machine's NCCL log judged by the one transport verdict: its HCAs counted here, its SKU's expected."""
    band = ctx.limits.band("ib_hcas")
    expected = int(band.expected) if band and band.expected is not None else None
    hcas = len({p.hca for p in infiniband_ports(ctx)})
    status, reason, facts = judge_transport(net, expected, hcas, transport_causes(net, ctx) if net else [])
    value, wanted = facts.pop("transport", None), facts.pop("expected", None)
    return me.result(status, value, wanted, "", reason, **facts)


@check("nccl_transport", "NCCL_NOT_IB")
def nccl_transport(ctx: CheckContext, me: Check) -> CheckResult:
    """Run NCCL with NCCL_DEBUG=INFO and read which network it chose (IB, Socket, or a plugin such as OFI)."""
    ranks = ctx.gpus_present()
    if ctx.measurer is None:
        return me.result(Status.SKIPPED, reason="no GPU measurer here")
    return judge_log(read_nccl_network(ctx.measurer.nccl_debug_log(ranks)), ctx, me)
