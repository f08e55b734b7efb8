"""Everything a job's diagnosis asks of one of its nodes, gathered on that node (inside the job's allocation:
`srun --jobid JOB --overlap -w NODE`, `kubectl exec`, or here) in one call, and printed as one document the
submitting side reads back from the engine's lines: the job's ranks here (gpuval.node.rank_probe), the node's
driver events since the job started (gpuval.node.node_events), NCCL RAS's status where the node's RAS port
answers (gpuval.collectives.nccl_ras_client; its address is the ranks' own NCCL_RAS_ADDR where they set one), and
the ranks' Flight Recorder dumps where they look hung (gpuval.workloads.diagnose.dumps).

The document is `gpuval-probe ` and JSON; a long one (stacks) goes out as `gpuval-piece` lines that a launcher's
1 KiB messages cannot tear (gpuval.results.pieces), joined back per node by `read_probes`.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

from pydantic import BaseModel, Field, ValidationError

from gpuval.collectives.nccl_ras import RasStatus, RasUnavailable
from gpuval.collectives.nccl_ras_client import query_ras, ras_address
from gpuval.diagnosis.hang import STALL_S
from gpuval.errors import GpuvalError
from gpuval.node.flight_recorder import RankDump
from gpuval.node.host import hostname
from gpuval.node.machine import Machine
from gpuval.node.node_events import NodeEvents, events_since
from gpuval.node.pystacks import Stacks
from gpuval.node.rank_probe import RankProbe, probe_ranks
from gpuval.results.pieces import MARK as PIECE_MARK
from gpuval.results.pieces import PieceJoiner, record_lines
from gpuval.workloads.diagnose.dumps import left_out, lighter, node_dumps

MARK = "gpuval-probe "
VERSION = 1


class NodeProbe(BaseModel):
    """One node's answer: its own name for itself (a claim: the engine's attribution of the lines names the
    node), when, the job's ranks found here, its driver events, RAS's status or why it could not be had, and the
    ranks' Flight Recorder dumps (compacted) with what kept any from being had."""

    v: int = VERSION
    host: str
    read_at: float
    ranks: list[RankProbe] = Field(default_factory=list)
    events: NodeEvents | None = None
    ras: RasStatus | None = None
    ras_problem: str = ""
    gpus: dict[str, int] = Field(default_factory=dict)  # a rank's PCI bus id -> that GPU's NVML index here
    passed_over: list[str] = Field(default_factory=list)  # state files not taken as the job's ranks, and why
    dumps: list[RankDump] = Field(default_factory=list)
    flight_problem: str = ""


def _nvml_indices(ranks: list[RankProbe]) -> dict[str, int]:
    """The NVML index of each GPU the ranks name by PCI bus id (CUDA's device index is not NVML's where
    CUDA_VISIBLE_DEVICES reorders); none without NVML."""
    from gpuval.node.gpus import nvml_gpus_of

    buses = sorted({r.identity.bus for r in ranks if r.identity.bus})
    if not buses:
        return {}
    try:
        found = nvml_gpus_of([(bus, None) for bus in buses])
    except GpuvalError:
        return {}
    return {bus: gpu.index for bus, gpu in zip(buses, found) if gpu is not None}


def _ras_addr(ranks: list[RankProbe]) -> str | None:
    """NCCL_RAS_ADDR as the first running rank's environment sets it (/proc/PID/environ), None where none does."""
    for probe in ranks:
        if not probe.running:
            continue
        try:
            environ = Path(f"/proc/{probe.identity.pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"NCCL_RAS_ADDR="):
                return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def probe_node(job: str | None, since: datetime | None, machine: Machine | None = None, ras: bool = True,
               stacks: bool = True, timeout_s: float = 10.0, folder: Path | None = None,
               uid: int | None = None, flight: bool = True, stall_s: float = STALL_S) -> NodeProbe:
    """This node's answer for `job` (its ranks' state files name it; None: every rank here) started at `since`
    (older rank files and events are left out), its ranks those of user `uid` (the job's owner; default: this
    process's user); `machine` reads the kernel log (default: this Linux machine); `ras` asks the RAS port;
    `flight` gets the ranks' Flight Recorder dumps where none made progress for `stall_s`."""
    if machine is None:
        from gpuval.node.sysfs import LinuxMachine

        machine = LinuxMachine()
    start = since.timestamp() if since else None
    scan = probe_ranks(folder, job, start, stacks, timeout_s, uid)
    ranks = scan.ranks
    found = NodeProbe(host=hostname(), read_at=time.time(), ranks=ranks, events=events_since(machine, since),
                      gpus=_nvml_indices(ranks), passed_over=scan.notes())
    if flight:
        owner = os.geteuid() if uid is None else uid
        found.dumps, found.flight_problem = node_dumps(scan, job, start, stall_s, timeout_s, owner)
    if ras:
        try:
            host, port = ras_address(_ras_addr(ranks))
            found.ras = query_ras(host, port, timeout_s=max(timeout_s, 12.0))
        except RasUnavailable as exc:
            found.ras_problem = str(exc)
    return found


def probe_lines(probe: NodeProbe) -> list[str]:
    """The answer as lines to print, each under 960 bytes, and never more than a record may take
    (gpuval.results.pieces.MAX_PIECES): the events are bounded where they are read (gpuval.node.node_events);
    where the ranks' stacks, RAS's status or the Flight Recorder dumps would make the answer longer, they are cut,
    and the cut said in their own fields, rather than the whole answer lost (a node that answers nothing is
    nominated "unreachable")."""
    key = uuid.uuid4().hex
    for fitted in _lighter(probe):
        try:
            return record_lines(MARK + fitted.model_dump_json() + "\n", key)
        except ValueError:  # more pieces than a reader takes: try it lighter
            continue
    raise GpuvalError(f"this node's answer holds {len(probe.ranks)} rank(s) and is too long to send even without "
                      "their stacks, RAS's status and the Flight Recorder's dumps")


_FRAMES_KEPT = 64  # of a rank's main thread, innermost first, where its stacks must be cut


def _lighter(probe: NodeProbe) -> Iterator[NodeProbe]:
    """The answer, then lighter and lighter copies of it: each rank's main thread only (its innermost frames), RAS
    without its raw text and each Flight Recorder dump cut to its groups' last few collectives; then no stacks and
    no RAS status at all; then no dumps either."""
    yield probe
    ras = probe.ras.model_copy(update={"text": ""}) if probe.ras is not None else None
    dumps = [lighter(d) for d in probe.dumps]
    yield probe.model_copy(update={"ranks": [_main_only(r) for r in probe.ranks], "ras": ras, "dumps": dumps})
    said = "left out: this node's answer would be too long to send with them"
    bare = probe.model_copy(update={
        "ranks": [r.model_copy(update={"stacks": Stacks(source="", problem=f"stacks {said}")}) for r in probe.ranks],
        "ras": None, "ras_problem": f"its status was {said}" if probe.ras is not None else probe.ras_problem,
        "dumps": dumps})
    yield bare
    yield bare.model_copy(update={"dumps": [left_out(d, said.replace("them", "it")) for d in probe.dumps]})


def _main_only(rank: RankProbe) -> RankProbe:
    if rank.stacks is None:
        return rank
    main = rank.stacks.main_thread()
    threads = [main.model_copy(update={"frames": main.frames[:_FRAMES_KEPT]})] if main is not None else []
    cut = Stacks(source=rank.stacks.source, threads=threads, problem=(
        f"{len(rank.stacks.threads) - len(threads)} other thread(s) left out, and frames past the innermost "
        f"{_FRAMES_KEPT}: this node's answer would be too long to send with them"))
    return rank.model_copy(update={"stacks": cut})


def read_probes(lines: Iterable[tuple[str, str]]) -> list[tuple[str, NodeProbe]]:
    """The answers in (node, line) pairs (Engine.node_lines), each with the node that printed it; pieces are
    joined only with pieces of the same node, and a line that is no answer is passed over."""
    joiner = PieceJoiner()
    found = []
    for node, raw in lines:
        line = raw.rstrip("\r\n")
        at = line.find(PIECE_MARK)
        if at >= 0:
            line = (joiner.add(line[at:], node) or "").rstrip("\n")
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            probe = NodeProbe.model_validate_json(line[at + len(MARK):])
        except ValidationError:
            continue
        if probe.v == VERSION:
            found.append((node, probe))
    return found
