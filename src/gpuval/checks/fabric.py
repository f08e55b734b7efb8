"""Checks of the fabric: InfiniBand (or RoCE) ports, GPU / NIC / NUMA placement, and the network NCCL really uses.

Where the SKU has HCAs (its baseline's `ib_hcas`) and none is visible, the verdict depends on where gpuval runs: in
a container (/.dockerenv, a container cgroup, a pod) the HCAs were most likely not passed in, which is ERROR "not
visible in this container" (could not run), never a hardware verdict; on a host it is a FAIL.
"""

from __future__ import annotations

from pathlib import Path

from gpuval.baselines.transport import judge_transport, socket_causes
from gpuval.checks.base import Check, CheckContext, CheckResult, check, worst
from gpuval.checks.measured import targets
from gpuval.collectives.nccl_debug import NcclNetwork, read_nccl_network
from gpuval.node.machine import IbPort
from gpuval.node.topology import gpu_topology
from gpuval.results.model import Status

# The IB-only NCCL run of reference.md, as AzNHC's check_nccl_allreduce_ib_loopback runs it: no shared memory, no
# NVLink/PCIe peer path, and no NVLink SHARP or CollNet either (they would carry bytes past the HCAs), Ring forced,
# so every byte crosses an
# HCA; NCCL_DEBUG=INFO so NCCL's own lines say which network, which path per channel, and GDR.
IB_LOOPBACK_ENV = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "5",
                   "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0", "NCCL_ALGO": "Ring",
                   "NCCL_IB_PCI_RELAXED_ORDERING": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH,ENV,TUNING"}


def infiniband_ports(ctx: CheckContext) -> list[IbPort]:
    """Ports whose link layer is InfiniBand (accelerated-networking Ethernet functions are not the fabric)."""
    return [p for p in ctx.machine.ib_ports() if p.link_layer.lower() == "infiniband"]


def fabric_ports(ctx: CheckContext) -> list[IbPort]:
    """The RDMA ports of the GPU fabric: InfiniBand ports; on a machine with none, whose SKU is not known to have
    InfiniBand HCAs, its RDMA-over-Ethernet (RoCE) ports. (On an InfiniBand SKU the Ethernet RDMA functions are host
    networking, e.g. Azure's mlx5_an0, never the fabric.)"""
    ports = ctx.machine.ib_ports()
    ib = [p for p in ports if p.link_layer.lower() == "infiniband"]
    if ib or ctx.limits.band("ib_hcas"):
        return ib
    return [p for p in ports if p.link_layer.lower() == "ethernet"]


def _fabric_kind(ports: list[IbPort]) -> str:
    return "RoCE" if ports and all(p.link_layer.lower() == "ethernet" for p in ports) else "InfiniBand"


def expected_hcas(ctx: CheckContext) -> int | None:
    """The SKU baseline's HCA count (None: the SKU is unknown or names none)."""
    band = ctx.limits.band("ib_hcas")
    return int(band.expected) if band and band.expected is not None else None


def hidden_by_container(ctx: CheckContext) -> str | None:
    """Why HCAs the SKU has may simply not be visible here (the container markers, /dev/infiniband missing), or
    None on a host."""
    markers = ctx.machine.container_markers()
    if not markers:
        return None
    missing = "" if ctx.machine.rdma_device_files() else ", and /dev/infiniband is missing"
    return f"running in a container ({', '.join(markers)}){missing}"


def loopback_env(ctx: CheckContext) -> dict[str, str]:
    """IB_LOOPBACK_ENV, plus NCCL_TOPO_FILE when this machine names none (environment, /etc/nccl.conf) and the SKU's
    baseline names the topology file Azure ships for it (packaged with gpuval, as AzNHC passes its own copy)."""
    from importlib import resources

    env = dict(IB_LOOPBACK_ENV)
    named = (ctx.baseline.topology if ctx.baseline else {}).get("nccl_topo_file")
    if named and getattr(ctx.machine, "nccl_topology", lambda: None)() is None:
        packaged = resources.files("gpuval.node") / "recorded" / str(named)
        if packaged.is_file():
            env["NCCL_TOPO_FILE"] = str(packaged)
    return env


@check("ib_ports", "IB_PORT_DOWN", needs_gpu=False)
def ib_ports(ctx: CheckContext, me: Check) -> CheckResult:
    """Every InfiniBand (or RoCE) port ACTIVE at the SKU's rate, and as many HCAs as the SKU has."""
    ports = fabric_ports(ctx)
    hcas = sorted({p.hca for p in ports})
    count_band = ctx.limits.band("ib_hcas")
    if not ports:
        if count_band and count_band.expected:
            hidden = hidden_by_container(ctx)
            if hidden:
                return me.result(Status.ERROR, 0, count_band.expected, "HCAs",
                                 f"could not run: {ctx.sku} has {count_band.expected:g} HCAs, none is visible here: "
                                 f"{hidden} (not visible in this container: pass the RDMA devices in, e.g. "
                                 "--device /dev/infiniband, or rdma/ib on Kubernetes)")
            return me.result(Status.FAIL, 0, count_band.expected, "HCAs",
                             f"no InfiniBand HCA found, {ctx.sku} has {count_band.expected:g} ({count_band.expected_source})")
        return me.result(Status.SKIPPED, reason="no InfiniBand or RoCE port on this machine (/sys/class/infiniband)")
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
    kind = _fabric_kind(ports)
    return me.result(status, len(hcas), count_band.expected if count_band else None, "HCAs",
                     reason or f"{len(hcas)} HCAs ({kind}: {', '.join(hcas)}) ACTIVE at "
                               f"{'/'.join(f'{r:g}' for r in rates)} Gb/s",
                     ports=[f"{p.hca}/{p.port} {p.state} {p.rate_gbps} Gb/s" for p in ports], fabric=kind)


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
    down = [f"{p.hca}/{p.port} {p.state}" for p in fabric_ports(ctx) if p.state.upper() != "ACTIVE"]
    return socket_causes(net, ib_disabled=ctx.env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"),
                         net_socket=ctx.env.get("NCCL_NET", "").lower() == "socket",
                         rdma_missing=not ctx.machine.rdma_device_files(),
                         libibverbs_missing=not ctx.has_libibverbs(), ports_down=down)


def gdr_expected(ctx: CheckContext) -> bool | None:
    """Whether the SKU's baseline says its HCAs carry GPUDirect RDMA (`fabric.gpudirect_rdma`); None: unknown."""
    fabric = (ctx.baseline.raw.get("fabric") if ctx.baseline else None) or {}
    value = fabric.get("gpudirect_rdma")
    return bool(value) if value is not None else None


def judge_log(net: NcclNetwork | None, ctx: CheckContext, me: Check) -> CheckResult:
    """This machine's NCCL log judged by the one transport verdict: the fabric HCAs counted here against the SKU's
    expected count (a SKU with HCAs where none is visible is not "sockets expected"), GPUDirect RDMA
    against what the SKU carries."""
    expected = expected_hcas(ctx)
    hcas = len({p.hca for p in fabric_ports(ctx)})
    if expected and not hcas and net is not None and net.transport is not None:
        hidden = hidden_by_container(ctx)
        if hidden:
            return me.result(Status.ERROR, net.transport, "IB", "",
                             f"could not run: {ctx.sku} has {expected} HCAs, none is visible here: {hidden} (not "
                             f'visible in this container; NCCL said "{net.evidence}")', transport=net.transport)
    # the SKU's count decides that HCAs are expected when none is visible here: sockets are then a fault
    visible = hcas if hcas or not expected else None
    status, reason, facts = judge_transport(net, expected, visible, transport_causes(net, ctx) if net else [],
                                            gdr_expected=gdr_expected(ctx))
    value, wanted = facts.pop("transport", None), facts.pop("expected", None)
    return me.result(status, value, wanted, "", reason, **facts)


@check("nccl_transport", "NCCL_NOT_IB")
def nccl_transport(ctx: CheckContext, me: Check) -> CheckResult:
    """Read which network NCCL chose (IB, Socket, or a plugin such as OFI) and whether its channels use GPUDirect
    RDMA, from NCCL_DEBUG=INFO of the IB-loopback run (every channel a network channel)."""
    if ctx.measurer is None:
        ctx.gpus_present()
        return me.result(Status.SKIPPED, reason="no GPU measurer here")
    chosen, _ = targets(ctx)
    return judge_log(read_nccl_network(ctx.measurer.nccl_debug_log(chosen, loopback_env(ctx))), ctx, me)
