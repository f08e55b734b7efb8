"""Which network each rank of a job uses, from the NCCL_DEBUG=INFO lines in its output: each node's lines read by THE
NCCL debug reader (gpuval.collectives.nccl_debug) and judged by THE transport verdict (gpuval.baselines.transport)
with the HCAs the node's SKU or profile counts on, so TCP sockets where InfiniBand is expected fail that node with
the rank named. A node whose lines say nothing of NCCL's network is not judged (no NCCL_DEBUG=INFO, or no NCCL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from gpuval.baselines.transport import judge_transport, socket_causes
from gpuval.collectives.logtext import strip_prefix
from gpuval.collectives.nccl_debug import NcclDebugStream
from gpuval.diagnosis.job_records import JobRecords
from gpuval.results.model import Status

MARK = "NCCL"  # in every NCCL_DEBUG line: a line without it says nothing of the network

_BATCH = 4096  # lines fed to a node's reader at a time
_NCCL_PREFIX = re.compile(r"[^\s:]+:(\d{1,10}):\d{1,10} ")


@dataclass(frozen=True)
class RankNet:
    """One rank's `Using network` line: the rank where the step records tell it (by pid on that node)."""

    rank: int | None
    pid: int | None
    device: int | None
    transport: str
    line: str


@dataclass
class NodeTransport:
    """A node's NCCL network as its lines show it, and the one transport verdict on it."""

    node: str
    status: Status
    reason: str
    transport: str | None = None
    nccl_version: str | None = None
    ranks: list[RankNet] = field(default_factory=list)


def nccl_pid(line: str) -> int | None:
    """The pid of NCCL's `host:pid:tid [dev] NCCL INFO` prefix (launcher prefixes removed), None without one."""
    found = _NCCL_PREFIX.match(strip_prefix(line))
    return int(found.group(1)) if found else None


def nccl_node(where: str | None, line: str, pid_node: Mapping[int, str] | None = None) -> str | None:
    """The node of an NCCL line: the engine's word (`where`), else the node where a probe found the process NCCL's
    prefix names (`pid_node`: pid -> node); None where neither places it."""
    return where or (pid_node or {}).get(nccl_pid(line) or -1)


def unplaced(lines: Iterable[tuple[str | None, str]], pid_node: Mapping[int, str] | None = None) -> int:
    """How many NCCL lines no node places (`nccl_node`): their network is judged on no node."""
    return sum(1 for where, line in lines if MARK in line and nccl_node(where, line, pid_node) is None)


def transport_per_rank(lines: Iterable[tuple[str | None, str]],
                       expected_hcas: Mapping[str, int | None] | int | None, records: JobRecords | None = None,
                       pid_node: Mapping[int, str] | None = None) -> list[NodeTransport]:
    """Each node's NCCL network and verdict from (node, line) pairs (Engine.node_lines). `expected_hcas`: the
    InfiniBand HCAs each node's SKU or profile has (one count for all nodes, or per node; None: unknown, then
    sockets are not judged); `records`: the job's step records, which name the rank of each pid; `pid_node`: pid
    -> the node where a probe found that process, which places a line the engine ties to no node (an unlabelled
    output) by the pid NCCL prints; a line neither places is left out (`unplaced` counts them): it judges no node,
    never the one a label would name by another step's layout."""
    streams: dict[str, NcclDebugStream] = {}
    pending: dict[str, list[str]] = {}
    for where, line in lines:
        if MARK not in line:
            continue
        node = nccl_node(where, line, pid_node)
        if node is None:
            continue
        batch = pending.setdefault(node, [])
        batch.append(line.rstrip("\n"))
        if len(batch) >= _BATCH:
            streams.setdefault(node, NcclDebugStream(node)).feed("\n".join(batch))
            batch.clear()
    for node, batch in pending.items():
        streams.setdefault(node, NcclDebugStream(node)).feed("\n".join(batch))
    found = []
    for node in sorted(streams):
        docs = streams[node].close()
        hcas = expected_hcas.get(node) if isinstance(expected_hcas, Mapping) else expected_hcas
        net = docs[0] if docs else None
        if net is None or net.transport is None:
            found.append(NodeTransport(node, Status.SKIPPED, "not judged: the node's lines name no NCCL network "
                                                             "(NCCL_DEBUG=INFO not set?)"))
            continue
        verdict = judge_transport(net, hcas, None, socket_causes(net))
        ranks = [RankNet(records.rank_of(node, r.pid) if records and r.pid is not None else None, r.pid, r.device,
                         r.transport, r.line) for r in net.rank_networks]
        found.append(NodeTransport(node, verdict.status, verdict.reason, net.transport, net.nccl_version, ranks))
    return found
