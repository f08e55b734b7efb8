"""THE reader of NCCL RAS's status (NCCL 2.24 and later), in both formats it answers, into one typed RasStatus.

The JSON status (SET FORMAT json, 2.28.7 and later) is RAS's raw data per rank (init state, async error, abort flag,
collective counts) and per missing rank (unresponsive, considered dead), left to the reader to interpret
(gpuval.diagnosis.hang does). The text status names dead and unresponsive processes, communicators with missing
ranks, errors and mismatched operation counts in its own words; its shapes (docs.nvidia.com/deeplearning/nccl/
user-guide/docs/troubleshooting/ras.html, NVIDIA/nccl src/ras/client_support.cc):
    Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
        0         1         4       7-8        32        32   RUNNING  INCOMPLETE
    Errors / ======            a section; Warnings / ======== the other
    DEAD                       a finding of the job ...
    #0-0 (cf264af53edbe986) INCOMPLETE      ... or of one communicator
      1 job process is considered dead (unreachable via the RAS network)     its summary
      Process 3487984 on node 172.16.64.213 managing GPU 5
      26 ranks have launched up to operation 6650                            a group: the note of the ranks after it
      Rank 21 has status INIT -- GPU 5 managed by process 3487984 on node 172.16.64.213
      The missing rank: 21                                                    (2.24's form)
Every line is read with string tests and bounded patterns: linear in the text. Asking is
gpuval.collectives.nccl_ras_client's; nothing here judges.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpuval.errors import GpuvalError

TEXT_KEPT = 256 << 10  # characters of the raw status kept with it, for people
_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4}\S{0,32})")
_ROW = re.compile(r"^\s{0,8}(\d{1,9})\s{1,16}(\d{1,9})\s{1,16}(\d{1,9})\s{1,16}(\S{1,32})\s{1,16}(\d{1,9})\s{1,16}"
                  r"(\d{1,9})\s{1,16}([A-Z]{1,16})\s{1,16}([A-Z,]{1,64})\s*$")
_PROCESS = re.compile(r"^Process (\d{1,10}) on node (\S{1,256}) managing GPUs? (.{0,256})$")
_MANAGED = re.compile(r"^GPU (\d{1,4})(?: \(NVML (\d{1,4})\))? managed by process (\d{1,10}) on node (\S{1,256})$")
_GROUP = re.compile(r"^\d{1,9} ranks (?:have|reported) ")
_COMM = re.compile(r"^(#\d{1,9}-\d{1,9} \([0-9a-fA-F]{1,32}\)) ([A-Z,]{1,64})$")
_TIMEOUTS = re.compile(r"Encountered (\d{1,9}) communication timeouts?")
_SECTIONS = {"Errors": "error", "Warnings": "warning"}


class RasUnavailable(GpuvalError):
    """The RAS service could not be asked (nothing listens, no answer in time) or answered something that is not
    the RAS protocol: could not run, never a verdict on the job."""


class RasRank(BaseModel):
    """One rank of a communicator as RAS reports it. JSON gives every field of a responding rank (or of a missing
    one: `unresponsive`, `considered_dead`); text names only the ranks of a finding, with its words in `note`."""

    rank: int | None = None
    host: str = ""
    pid: int | None = None
    gpu: int | None = None  # CUDA device
    nvml_gpu: int | None = None
    init_state: int | None = None  # 0 ncclSuccess, 7 ncclInProgress, anything else an error
    async_error: int | None = None
    finalize_called: bool | None = None
    destroy_flag: bool | None = None
    abort_flag: bool | None = None
    unresponsive: bool | None = None
    considered_dead: bool | None = None
    counts: dict[str, int] = Field(default_factory=dict)  # operations launched, per collective
    note: str = ""


class RasProcess(BaseModel):
    """A job process RAS names (DEAD, or missing from a communicator's data): its node's address, pid and GPUs."""

    host: str
    pid: int
    gpus: str = ""


class RasFinding(BaseModel):
    """One problem in RAS's own words (text status): DEAD, INCOMPLETE, ERROR, MISMATCH or TIMEOUT, under its
    Errors or Warnings section, for the job or one communicator (`#group-index (hash)`)."""

    kind: str
    severity: Literal["error", "warning"]
    communicator: str = ""
    summary: str = ""
    processes: list[RasProcess] = Field(default_factory=list)
    ranks: list[RasRank] = Field(default_factory=list)


class RasCommunicator(BaseModel):
    """A communicator (JSON) or a group of alike ones (text's summary table: `count` communicators)."""

    hash: str = ""
    group: int | None = None
    count: int = 1
    size: int | None = None  # ranks per communicator
    nodes: int | None = None
    status: str = ""  # text: INIT, RUNNING, FINALIZE, ABORT, NOCOMM
    errors: str = ""  # text: OK, MISMATCH, ERROR, INCOMPLETE (comma-joined)
    ranks: list[RasRank] = Field(default_factory=list)
    missing: list[RasRank] = Field(default_factory=list)


class RasStatus(BaseModel):
    """What RAS answered to STATUS, in either format."""

    format: Literal["text", "json"]
    address: str = ""
    nccl_version: str = ""
    timestamp: str = ""
    communicators: list[RasCommunicator] = Field(default_factory=list)
    findings: list[RasFinding] = Field(default_factory=list)
    timeouts: int = 0
    collection_s: float | None = None
    text: str = ""  # the answer as sent (its first TEXT_KEPT characters)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _json_rank(doc: Any) -> RasRank:
    doc = doc if isinstance(doc, dict) else {}
    status = doc.get("status") if isinstance(doc.get("status"), dict) else {}
    counts = doc.get("collective_counts") if isinstance(doc.get("collective_counts"), dict) else {}
    return RasRank(
        rank=_int(doc.get("rank")), host=str(doc.get("host", ""))[:256], pid=_int(doc.get("pid")),
        gpu=_int(doc.get("cuda_dev")), nvml_gpu=_int(doc.get("nvml_dev")), init_state=_int(status.get("init_state")),
        async_error=_int(status.get("async_error")), finalize_called=_bool(status.get("finalize_called")),
        destroy_flag=_bool(status.get("destroy_flag")), abort_flag=_bool(status.get("abort_flag")),
        unresponsive=_bool(status.get("unresponsive")), considered_dead=_bool(status.get("considered_dead")),
        counts={str(k)[:64]: v for k, v in counts.items() if _int(v) is not None})


def read_json_status(text: str) -> RasStatus:
    """RAS's JSON status (SET FORMAT json, 2.28.7+) as a RasStatus; RasUnavailable when it is not that."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RasUnavailable(f"NCCL RAS sent a JSON status that does not parse ({exc}): {text[:120]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators", []), list):
        raise RasUnavailable(f"NCCL RAS sent JSON that is not a status: {text[:120]!r}")
    comms = []
    for comm in doc.get("communicators", []):
        if not isinstance(comm, dict):
            continue
        ranks = [_json_rank(r) for r in comm.get("ranks", []) if isinstance(r, dict)]
        missing = [_json_rank(r) for r in comm.get("missing_ranks", []) if isinstance(r, dict)]
        comms.append(RasCommunicator(hash=str(comm.get("hash", ""))[:64], size=_int(comm.get("size")),
                                     ranks=ranks, missing=missing))
    ras = doc.get("ras") if isinstance(doc.get("ras"), dict) else {}
    seconds = ras.get("collection_time_sec")
    return RasStatus(format="json", nccl_version=str(doc.get("nccl_version", ""))[:32],
                     timestamp=str(doc.get("timestamp", ""))[:64], communicators=comms,
                     timeouts=_int(ras.get("timeouts_count")) or 0,
                     collection_s=float(seconds) if _int(seconds) is not None or (
                         isinstance(seconds, float) and math.isfinite(seconds)) else None,
                     text=text[:TEXT_KEPT])


def _text_rank(line: str, note: str) -> RasRank | None:
    """`Rank R [words] -- GPU G managed by process P on node H` (or `-- [process information not found]`)."""
    left, _, right = line.partition(" -- ")
    parts = left.split(" ", 2)
    if len(parts) < 2 or parts[0] != "Rank" or not parts[1].isdigit():
        return None
    rank = RasRank(rank=int(parts[1]), note=parts[2] if len(parts) > 2 else note)
    if m := _MANAGED.match(right):
        rank.gpu, rank.pid, rank.host = int(m.group(1)), int(m.group(3)), m.group(4)
        rank.nvml_gpu = int(m.group(2)) if m.group(2) else rank.gpu
    return rank


def _missing(line: str) -> list[RasRank]:
    """2.24's `The missing rank: 21` / `The missing ranks: 21, 22`."""
    _, _, numbers = line.partition(":")
    return [RasRank(rank=int(n), note="missing") for n in numbers.replace(",", " ").split() if n.isdigit()]


class _Reader:
    def __init__(self) -> None:
        self.status = RasStatus(format="text")
        self.severity: str | None = None
        self.finding: RasFinding | None = None
        self.note = ""
        self.in_table = False
        self.understood = False

    def line(self, raw: str) -> None:
        line = raw.rstrip()
        if not line.strip():
            self.in_table = False
            return
        if "NCCL version" in line and (m := _VERSION.search(line)):
            self.status.nccl_version = self.status.nccl_version or m.group(1)
            self.understood = True
        elif line.startswith(("Job summary", "Communicators")) or "Gathering data" in line:
            self.understood = True
        elif line.startswith("Group") and "Comms" in line:
            self.in_table = self.understood = True
        elif self.in_table and (m := _ROW.match(line)):
            self.status.communicators.append(RasCommunicator(
                group=int(m.group(1)), count=int(m.group(2)), nodes=int(m.group(3)), size=int(m.group(5)),
                status=m.group(7), errors=m.group(8)))
        elif line in _SECTIONS:
            self.severity, self.finding, self.understood = _SECTIONS[line], None, True
        elif self.severity and not line.startswith(" ") and not set(line) <= {"="}:
            self._finding(line)
        elif self.finding is not None and line.startswith("  "):
            self._detail(line.strip())

    def _finding(self, line: str) -> None:
        severity = "error" if self.severity == "error" else "warning"
        if m := _COMM.match(line):
            self.finding = RasFinding(kind=m.group(2), severity=severity, communicator=m.group(1))
        else:
            self.finding = RasFinding(kind=line.strip()[:64], severity=severity)
        self.status.findings.append(self.finding)
        self.note = ""

    def _detail(self, text: str) -> None:
        finding = self.finding
        assert finding is not None
        if m := _TIMEOUTS.search(text):
            self.status.timeouts += int(m.group(1))
        if m := _PROCESS.match(text):
            finding.processes.append(RasProcess(host=m.group(2), pid=int(m.group(1)), gpus=m.group(3).strip()))
        elif text.startswith("Rank ") and (rank := _text_rank(text, self.note)):
            finding.ranks.append(rank)
        elif text.startswith("The missing rank"):
            finding.ranks.extend(_missing(text))
        elif _GROUP.match(text):
            self.note = text.split(" ", 2)[2][:200]
        elif not finding.summary:
            finding.summary = text[:300]


def read_text_status(text: str) -> RasStatus:
    """RAS's text status as a RasStatus; RasUnavailable when the text is not one (nothing of a status in it)."""
    reader = _Reader()
    for raw in text.splitlines():
        reader.line(raw[:4096])
    if not reader.understood:
        raise RasUnavailable(f"NCCL RAS sent text that is not a status: {text[:120]!r}")
    reader.status.text = text[:TEXT_KEPT]
    return reader.status
