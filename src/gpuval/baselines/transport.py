"""THE verdict on the network NCCL chose, as its NCCL_DEBUG=INFO log shows it (gpuval.collectives.nccl_debug).

One pure function, used by the `nccl_transport` health check (this machine: its HCAs are counted), by `gpuval
import` of a debug log (another machine: what it has comes from the SKU's baseline, when `--sku` says which) and by
`gpuval train` (the rank-0 node). The rule:

- no line about the network: ERROR, could not run (NCCL_DEBUG=INFO not honoured?), never a hardware verdict;
- TCP sockets (any rank) on a node with InfiniBand HCAs: FAIL, with the causes the log and the machine show;
  sockets where there is no HCA: PASS, sockets are expected; HCAs unknown (an imported log, no SKU): SKIPPED,
  "not judged", never PASS;
- IB without GPUDirect RDMA: WARN, naming NCCL's own decision ("HCA capable, path not used" with NCCL's
  "GPU Direct RDMA Disabled for GPU ... / HCA ..." line, or HCAs not capable), judged from the channels NCCL built
  (`gdr_used`) when the log has network channels, else from the HCA capability lines; not on a SKU whose HCAs carry
  no GPUDirect RDMA by design (`gdr_expected=False`); IB, or a plugin such as OFI: PASS.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gpuval.collectives.nccl_debug import NcclNetwork
from gpuval.results.model import Status


class TransportVerdict(NamedTuple):
    """(status, reason, facts); facts hold `transport` and `expected` (the value and expected value a check
    reports) and what the log shows: version, GPUDirect RDMA, devices, causes, ranks on sockets."""

    status: Status
    reason: str
    facts: dict[str, Any]


def socket_causes(net: NcclNetwork, *, ib_disabled: bool = False, net_socket: bool = False,
                  rdma_missing: bool = False, libibverbs_missing: bool = False,
                  ports_down: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Why NCCL fell back to TCP sockets: what the log shows, and what the caller knows of the machine (the
    environment, /dev/infiniband, libibverbs, ports); an imported log gives the log's causes only."""
    causes = []
    if net.ib_disabled_by_env or ib_disabled:
        causes.append("NCCL_IB_DISABLE=1 is set")
    if net_socket:
        causes.append("NCCL_NET=Socket is set")
    if rdma_missing:
        causes.append("/dev/infiniband is missing (in a container: pass the devices, on AKS request rdma/ib)")
    if net.libibverbs_missing or libibverbs_missing:
        causes.append("libibverbs cannot be loaded (install rdma-core / libibverbs1 in the image)")
    if ports_down:
        causes.append(f"port(s) not ACTIVE: {', '.join(ports_down)}")
    if net.no_ib_device and not causes:
        causes.append("NCCL found no IB device (NET/IB : No device found)")
    return causes


def _facts(net: NcclNetwork, transport: str | None, expected: str | None, **more: Any) -> dict[str, Any]:
    return {"transport": transport, "expected": expected, "nccl_version": net.nccl_version, "gdr": net.gdr,
            "gdr_used": getattr(net, "gdr_used", None), "gdr_capable": getattr(net, "gdr_capable", None),
            "net_channels": getattr(net, "net_channels", None), "nvls": getattr(net, "nvls", None),
            "collnet": getattr(net, "collnet", None), "algorithms": list(getattr(net, "algorithms", None) or []),
            "topology_file": net.topology_file,
            "devices": net.devices, **more}


def _without_gdr(net: NcclNetwork) -> str | None:
    """Why NCCL's IB traffic goes without GPUDirect RDMA, in NCCL's words; None when it uses it (or cannot tell).
    The channels decide when there are network channels (gdr_used); else the HCA capability lines (gdr)."""
    used = getattr(net, "gdr_used", None)
    disabled = list(getattr(net, "gdr_disabled", None) or [])
    if used is True:
        return None
    if used is False:
        if disabled:
            return f'HCA capable, path not used: "{disabled[0]}"'
        if getattr(net, "gdr_capable", None) is False:
            return "the HCAs are not GPUDirect capable (nvidia-peermem or DMA-BUF missing?): " + str(net.gdr_evidence)
        return "no network channel uses /GDRDMA"
    return str(net.gdr_evidence) if net.gdr is False else None


def _has_hcas(net: NcclNetwork, expected_hcas: int | None, visible_hcas: int | None) -> bool | None:
    """Whether the node has HCAs: counted on it, else its SKU's count, else (IB in use) yes, else unknown."""
    if visible_hcas is not None:
        return visible_hcas > 0
    if expected_hcas is not None:
        return expected_hcas > 0
    return True if net.transport == "IB" else None


def judge_transport(net: NcclNetwork | None, expected_hcas: int | None, visible_hcas: int | None,
                    causes: list[str], gdr_expected: bool | None = None) -> TransportVerdict:
    """The verdict on one NCCL_DEBUG=INFO log. `visible_hcas`: InfiniBand HCAs counted on the node (None: not
    this machine); `expected_hcas`: the SKU baseline's count (None: no SKU); `causes`: socket_causes();
    `gdr_expected`: whether the SKU's HCAs carry GPUDirect RDMA (False: IB without it is as designed)."""
    if net is None or net.transport is None:
        return TransportVerdict(Status.ERROR, "could not run: NCCL printed no line about its network "
                                              "(was NCCL_DEBUG=INFO honoured?)", {})
    has_hcas = _has_hcas(net, expected_hcas, visible_hcas)
    evidence = f'"{net.evidence}"'
    on_socket = [r for r in net.rank_networks if r.transport == "Socket"]
    if net.transport == "Socket" or on_socket:
        if has_hcas is None:
            return TransportVerdict(Status.SKIPPED, f"not judged: no SKU, HCAs unknown (NCCL used TCP sockets: "
                                                    f"{evidence}; give --sku to judge it)", _facts(net, "Socket", None))
        if not has_hcas:
            where = "here" if visible_hcas is not None else "on this SKU"
            return TransportVerdict(Status.PASS, f"no InfiniBand HCA {where}, sockets expected: {evidence}",
                                    _facts(net, "Socket", "Socket"))
        # any rank on sockets slows the whole job to its pace: name it and quote its own line
        first = on_socket[0] if on_socket else None
        who = f"{len(on_socket)} of {len(net.rank_networks)} ranks, first {first.who()}, " if first else ""
        quoted = f'"{first.line}"' if first else evidence
        return TransportVerdict(Status.FAIL, f"NCCL fell back to TCP sockets on a node with HCAs ({who}"
                                             f"{'; '.join(causes) or 'cause not visible'}): {quoted}",
                                _facts(net, "Socket", "IB", causes=causes, socket_ranks=[r.who() for r in on_socket]))
    expected = "IB" if has_hcas else None
    without = _without_gdr(net) if net.transport == "IB" and has_hcas else None
    if without and gdr_expected is not False:
        return TransportVerdict(Status.WARN, f"IB without GPUDirect RDMA ({without}): {evidence}",
                                _facts(net, "IB", expected, gdr_disabled=list(getattr(net, "gdr_disabled", []))))
    version = f"NCCL {net.nccl_version} uses" if net.nccl_version else "NCCL uses"
    note = " (without GPUDirect RDMA, as this SKU's HCAs are)" if without else ""
    if net.transport == "IB" and getattr(net, "gdr_used", None) is True:
        note = " with GPUDirect RDMA on its network channels"
    return TransportVerdict(Status.PASS, f"{version} {net.network_name or net.transport}{note}: {evidence}",
                            _facts(net, net.transport, expected))
