"""Checks of the fabric: InfiniBand ports, GPU / NIC / NUMA placement, and the network NCCL really uses."""

from __future__ import annotations

from pathlib import Path

from gpuval.checks.base import Check, CheckContext, CheckResult, check, worst
from gpuval.checks.nccl_debug import NcclNetwork, read_nccl_network
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


def socket_causes(net: NcclNetwork, ctx: CheckContext) -> list[str]:
    """What this machine and the log show about why NCCL fell back to TCP sockets."""
    causes = []
    if net.ib_disabled_by_env or ctx.env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"):
        causes.append("NCCL_IB_DISABLE=1 is set")
    if ctx.env.get("NCCL_NET", "").lower() == "socket":
        causes.append("NCCL_NET=Socket is set")
    if not ctx.machine.rdma_device_files():
        causes.append("/dev/infiniband is missing (in a container: pass the devices, on AKS request rdma/ib)")
    if net.libibverbs_missing or not ctx.has_libibverbs():
        causes.append("libibverbs cannot be loaded (install rdma-core / libibverbs1 in the image)")
    down = [f"{p.hca}/{p.port} {p.state}" for p in infiniband_ports(ctx) if p.state.upper() != "ACTIVE"]
    if down:
        causes.append(f"port(s) not ACTIVE: {', '.join(down)}")
    if net.no_ib_device and not causes:
        causes.append("NCCL found no IB device (NET/IB : No device found)")
    return causes


def judge_transport(net: NcclNetwork | None, ctx: CheckContext, me: Check) -> CheckResult:
    """The verdict on a run's NCCL log: IB or a plugin pass, Socket on a node with HCAs fails with its causes."""
    if net is None or net.transport is None:
        return me.result(Status.ERROR, reason="could not run: NCCL printed no line about its network "
                                               "(was NCCL_DEBUG=INFO honoured?)")
    has_hcas = bool(infiniband_ports(ctx))
    evidence = f'"{net.evidence}"'
    on_socket = [r for r in net.rank_networks if r.transport == "Socket"]
    if net.transport == "Socket" or on_socket:
        if not has_hcas:
            return me.result(Status.PASS, "Socket", "Socket", "", f"no InfiniBand HCA here, sockets expected: {evidence}")
        causes = socket_causes(net, ctx)
        # any rank on sockets slows the whole job to its pace: name it and quote its own line
        first = on_socket[0] if on_socket else None
        who = (f"{len(on_socket)} of {len(net.rank_networks)} ranks, first {first.who()}, " if first else "")
        quoted = f'"{first.line}"' if first else evidence
        return me.result(Status.FAIL, "Socket", "IB", "",
                         f"NCCL fell back to TCP sockets on a node with HCAs ({who}"
                         f"{'; '.join(causes) or 'cause not visible'}): {quoted}",
                         causes=causes, socket_ranks=[r.who() for r in on_socket], **_facts(net))
    expected = "IB" if has_hcas else None
    if net.transport == "IB" and net.gdr is False and has_hcas:
        return me.result(Status.WARN, "IB", expected, "", f"IB without GPUDirect RDMA ({net.gdr_evidence}): {evidence}",
                         **_facts(net))
    return me.result(Status.PASS, net.transport, expected, "", f"NCCL {net.nccl_version or ''} uses "
                     f"{net.network_name or net.transport}: {evidence}".replace("NCCL  uses", "NCCL uses"), **_facts(net))


def _facts(net: NcclNetwork) -> dict[str, object]:
    return {"nccl_version": net.nccl_version, "gdr": net.gdr, "topology_file": net.topology_file,
            "devices": net.devices}


@check("nccl_transport", "NCCL_NOT_IB")
def nccl_transport(ctx: CheckContext, me: Check) -> CheckResult:
    """Run NCCL with NCCL_DEBUG=INFO and read which network it chose (IB, Socket, or a plugin such as OFI)."""
    ranks = ctx.gpus_present()
    if ctx.measurer is None:
        return me.result(Status.SKIPPED, reason="no GPU measurer here")
    return judge_transport(read_nccl_network(ctx.measurer.nccl_debug_log(ranks)), ctx, me)
