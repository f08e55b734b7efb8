"""The diagnosis of one job, as `gpuval jobs diagnose` fills it and the report draws it (gpuval.report.job): the
per-rank timeline and the straggler (gpuval.diagnosis.straggler), the hang and its ranks' stacks
(gpuval.diagnosis.hang), where the ranks' Flight Recorder dumps part ways (gpuval.diagnosis.flight), each node's
NCCL network (gpuval.diagnosis.job_transport), driver events (gpuval.node.node_events) and RAS status
(gpuval.collectives.nccl_ras), and the suspects they nominate.

A suspect is a node, once, with every reason any part gave for it (one broken node is one finding). The job's
symptoms only nominate: a verdict on the node is a re-test's.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel

from gpuval.collectives.nccl_ras import RasStatus
from gpuval.diagnosis.comm import CommReport
from gpuval.diagnosis.flight import FlightAnalysis
from gpuval.diagnosis.hang import FLIGHT, HangReport
from gpuval.diagnosis.job_records import rank_list
from gpuval.diagnosis.job_transport import NodeTransport
from gpuval.diagnosis.straggler import StragglerReport
from gpuval.engines.exclude import Exclusion
from gpuval.node.node_events import NodeEvents
from gpuval.results.model import Status


@dataclass
class Suspect:
    """A node the job's symptoms point at: its ranks and GPUs involved, why, and which parts said so."""

    node: str
    ranks: list[int] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    # straggler, hang, flight recorder (a hang's evidence), ras, transport, events, unreachable
    sources: list[str] = field(default_factory=list)


@dataclass
class RetestNode:
    """One node of a re-test: a suspect or a partner lent to it, the fleet's verdict on it, and what was done."""

    node: str
    role: Literal["suspect", "partner"]
    status: Status
    reason: str
    action: str = "unchanged"  # drained (a suspect that failed), unchanged, or not drained (and why)
    detail: str = ""


@dataclass(frozen=True)
class RetestLink:
    """A link between two nodes under re-test whose pair test failed while neither end failed with its known-good
    partners: the link itself is named (no node is taken out for it)."""

    link: str
    status: Status
    reason: str


@dataclass
class Retest:
    """The fleet check's targeted re-test of a job's suspects with partners: its run (its records carry this run
    id), its verdict, each node's, the links it named, and what it could not do. `links`: the job's links were
    re-tested (`--retest --links`), not only its suspect nodes."""

    run_id: str
    status: Status
    reason: str
    nodes: list[RetestNode] = field(default_factory=list)
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    failed_links: list[RetestLink] = field(default_factory=list)
    links: bool = False


@dataclass
class JobDiagnosis:
    """Everything a diagnosis found about one job; `suspects` is `nominate(self)`'s. `probed`: each node asked,
    with why it did not answer ('' when it did); `gpus`: node -> a GPU's PCI bus id -> its NVML index there;
    `flight` the analysis of the ranks' Flight Recorder dumps, `flight_sources` where each rank's came from."""

    job_id: str
    engine: str
    run_id: str = ""
    generated_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    since: datetime | None = None  # the job's start: events are read from it
    world: int = 0
    node_of: dict[int, str] = field(default_factory=dict)
    straggler: StragglerReport | None = None
    comm: CommReport | None = None  # a communication slowdown: job-wide, it nominates the job's links, no node
    hang: HangReport | None = None
    flight: FlightAnalysis | None = None
    flight_sources: dict[int, str] = field(default_factory=dict)
    transport: list[NodeTransport] = field(default_factory=list)
    events: dict[str, NodeEvents] = field(default_factory=dict)
    ras: dict[str, RasStatus] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)
    probed: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    retest: Retest | None = None
    exclusion: Exclusion | None = None  # --exclude: the job moved off its suspects (engines/exclude.py)

    def gpu_name(self, node: str | None, gpu: int | None, bus: str | None) -> str:
        """A rank's GPU as people and NVML name it: `GPU 3 (0000:3b:00.0)` where the node's NVML index of its bus
        id is known, else CUDA's own device index (`cuda:1 (0000:3b:00.0)`); '' off GPUs."""
        if gpu is None and not bus:
            return ""
        index = self.gpus.get(node or "", {}).get(bus or "")
        name = f"GPU {index}" if index is not None else f"cuda:{gpu}"
        return name + (f" ({bus})" if bus else "")

    def to_json(self) -> dict[str, Any]:
        """The diagnosis as plain JSON (what `--json` prints): times in ISO 8601, non-finite numbers as null."""
        return plain(self)


def plain(value: Any) -> Any:
    """Dataclasses, pydantic models, enums and times as JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, BaseModel):
        return plain(value.model_dump())
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return value


class _Nominations:
    """The suspects, one per node of the job; what points outside the job's nodes, kept apart as `elsewhere`:
    source -> (ranks, the places they claim)."""

    def __init__(self, job_nodes: set[str]) -> None:
        self.job_nodes = job_nodes
        self.by_node: dict[str, Suspect] = {}
        self.elsewhere: dict[str, tuple[set[int], dict[str, None]]] = {}

    def add(self, node: str | None, source: str, why: str, rank: int | None = None, gpu: str = "",
            claimed: str = "") -> None:
        if node not in self.job_nodes:
            ranks, places = self.elsewhere.setdefault(source, (set(), {}))
            ranks.update([] if rank is None else [rank])
            places.setdefault(node or claimed or "no place", None)
            return
        suspect = self.by_node.setdefault(node, Suspect(node))
        if rank is not None and rank not in suspect.ranks:
            suspect.ranks.append(rank)
        if gpu and gpu not in suspect.gpus:
            suspect.gpus.append(gpu)
        if why not in suspect.why:
            suspect.why.append(why)
        if source not in suspect.sources:
            suspect.sources.append(source)

    def notes(self) -> list[str]:
        """One line per source that pointed outside the job's nodes."""
        found = []
        for source, (ranks, places) in self.elsewhere.items():
            who = f"rank(s) {rank_list(ranks)}" if ranks else f"{len(places)} process(es)"
            shown = ", ".join(list(places)[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
            found.append(f"{source}: {who} not nominated: no node of the job places them (they name {shown})")
        return found


def job_nodes(diag: JobDiagnosis) -> set[str]:
    """The nodes the job runs on, by the engine's word: every node probed (its placement) and every node the
    engine attributed a rank's lines to; never a host name a process claims."""
    return set(diag.probed) | set(diag.node_of.values())


def nominate(diag: JobDiagnosis) -> list[Suspect]:
    """The suspects of a diagnosis, one per node of the job (`job_nodes`), most-named first: stragglers, the ranks
    a hang waits for (each with the evidence it rests on; the Flight Recorder's a source of its own too), the
    processes RAS names as failing, nodes whose NCCL network fails or warns, nodes with driver
    events, and nodes that did not answer inside the job while others did (lost, hung, their scheduler's daemon
    down: the engine reached the job, not them). What points at a rank no node of the job places (an unlabelled
    rank claiming some host, RAS's address for a process no probe found) nominates nothing: it is said once per
    source in `diag.notes`, however many such ranks a job's output names."""
    found = _Nominations(job_nodes(diag))
    answered = [node for node, why in diag.probed.items() if not why]
    for node, why in diag.probed.items():
        if why and answered:
            found.add(node, "unreachable", f"did not answer inside the job while {len(answered)} other node(s) of "
                                           f"it did: {why}")
    if diag.straggler is not None:
        for s in diag.straggler.stragglers:
            found.add(s.node, "straggler", f"straggler: {s.describe()}", s.rank, diag.gpu_name(s.node, s.gpu, s.bus),
                      claimed=s.host)
    if diag.hang is not None and diag.hang.outcome == "hang":
        for r in diag.hang.waited_for:
            node = r.node or diag.node_of.get(r.rank)
            why = f"hang: rank {r.rank}: {r.why}" + (f" (evidence: {', '.join(r.evidence)})" if r.evidence else "")
            for source in ("hang", FLIGHT) if FLIGHT in r.evidence else ("hang",):
                found.add(node, source, why, r.rank, diag.gpu_name(node, r.gpu, r.bus))
        gpus = {r.rank: diag.gpu_name(r.node, r.gpu, r.bus) for r in diag.hang.ranks}  # a matched rank's own GPU
        for s in diag.hang.ras:
            if s.severity == "error":
                gpu = gpus.get(s.rank, "") if s.rank is not None else diag.gpu_name(s.node, s.gpu, None)
                found.add(s.node, "ras", f"NCCL RAS: {s.why}", s.rank, gpu, claimed=s.where())
    for t in diag.transport:
        if t.status in (Status.FAIL, Status.WARN):
            found.add(t.node, "transport", f"NCCL network: {t.reason}")
    for node, events in diag.events.items():
        if events.total:
            codes = sorted({f"{c.kind.upper()} {c.code}" for c in events.counts})
            ecc = f" ({events.ecc_total} memory/ECC)" if events.ecc_total else ""
            found.add(node, "events", f"{events.total} driver event(s) since the job started{ecc}: "
                                      f"{', '.join(codes)}")
    for note in found.notes():
        if note not in diag.notes:
            diag.notes.append(note)
    return sorted(found.by_node.values(), key=lambda s: (-len(s.sources), s.node))
