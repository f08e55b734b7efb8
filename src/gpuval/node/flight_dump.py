"""A PyTorch Flight Recorder dump read as untrusted input.

Each rank's dump (`<prefix><rank>`: written by torch's DebugInfoWriter at a watchdog timeout or when its dump pipe
is written to, or by gpuval's gloo pipe, gpuval.workloads.train.flight) is the output of
`torch._C._distributed_c10d._dump_fr_trace`: a pickle (protocol 2) of plain data: `version`, `pg_config` (each
process group's name, description and ranks as the text "[0, 1]"), `pg_status` (per process group id: the last
collective enqueued, started and completed), `entries` (each collective and point-to-point operation recorded:
record id, process group id and (name, description), sequence numbers, `profiling_name` such as
`nccl:all_reduce`, sizes and dtypes, state, the Python frames of its call site). torch writes the same document as
JSON only on request in the process (`_dump_fr_trace_json`, no frames: "far too much data"); no variable of torch
2.13 makes a timeout or pipe dump JSON.

A dump is a file in a folder of the job's user: it is read as hostile. Nothing is unpickled by the standard
unpickler: `_PlainUnpickler` builds dicts, lists, tuples, strings, bytes, numbers, booleans and None, and refuses
every global (the opcode by which a pickle names a class or a function, `os.system` included), persistent ids and
extension codes, before anything is called. The bytes are bounded (MAX_DUMP_BYTES), then the structure (MAX_NODES
values counted as a tree, so shared references cannot multiply it; MAX_DEPTH), then every field is typed. Whatever
fails is `UnreadableDump` with one line saying why, never a traceback.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

# A 20,000-entry ring buffer (torchtitan's size; torch's default is 2,000) with Python frames is some 7-15 MB
# (0.35 KB an entry with 9 frames in this project's gloo dumps, tests/data/flight-recorder; more with deeper
# stacks); 32 MiB leaves room for C++ frames (TORCH_FR_CPP_STACK) while a probe's memory on a training node stays
# bounded: the values built from a pickle take some 10 times its bytes.
MAX_DUMP_BYTES = 32 * 1024 * 1024
MAX_NODES = 4_000_000  # values in the document, each reference counted: about 60 an entry with frames
MAX_DEPTH = 12  # a dump nests 6 deep (document, entries, entry, input_sizes, one input's sizes, a size)
MAX_TEXT = 300  # characters of a frame's file or function name kept
PLAIN = (dict, list, tuple, str, bytes, int, float, bool, type(None))


class UnreadableDump(ValueError):
    """A dump that could not be read, with the reason in one line."""


class FrFrame(BaseModel):
    """One Python frame of a call site, innermost first as torch records them."""

    name: str = ""
    filename: str = ""
    line: int = 0

    @field_validator("name", "filename")
    @classmethod
    def _short(cls, value: str) -> str:
        return value[:MAX_TEXT]

    def where(self) -> str:
        """`name (file:line)`."""
        return f"{self.name} ({self.filename.rsplit('/', 1)[-1]}:{self.line})"


class FrEntry(BaseModel):
    """One operation the recorder saw. `state` is torch's: `scheduled`, `started` (with TORCH_NCCL_ENABLE_TIMING)
    or `completed` as CUDA events said when the dump was taken; gloo records no events (always `scheduled`), its
    completion is its group's `last_completed_collective`."""

    record_id: int
    pg_id: int
    process_group: tuple[str, str]  # (name, description)
    collective_seq_id: int
    p2p_seq_id: int = 0
    op_id: int = 0
    profiling_name: str
    time_created_ns: int = 0
    input_sizes: list[list[int]] = Field(default_factory=list)
    output_sizes: list[list[int]] = Field(default_factory=list)
    input_dtypes: list[str] = Field(default_factory=list)
    output_dtypes: list[str] = Field(default_factory=list)
    state: str = "scheduled"
    time_discovered_completed_ns: int | None = None
    retired: bool = False
    is_p2p: bool = False
    timeout_ms: int | None = None
    duration_ms: float | None = None
    frames: list[FrFrame] = Field(default_factory=list)

    @field_validator("duration_ms")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    @property
    def op(self) -> str:
        """The operation without its backend and peers: `all_reduce` of `nccl:all_reduce`, `send` of `nccl:send
        0->1`."""
        return self.profiling_name.split(":", 1)[-1].split(" ", 1)[0]

    @property
    def completed(self) -> bool:
        """Its CUDA events said it completed (NCCL); gloo's entries never say."""
        return self.state == "completed" or bool(self.time_discovered_completed_ns)


class FrGroupConfig(BaseModel):
    """A process group as one rank's recorder knows it (NCCL records them; gloo's dumps leave this empty)."""

    name: str
    desc: str = ""
    ranks: list[int] = Field(default_factory=list)

    @field_validator("ranks", mode="before")
    @classmethod
    def _ranks_text(cls, value: Any) -> Any:
        """torch writes the ranks as the text "[0, 1]"; it is read as JSON, never evaluated."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError(f"ranks {value[:40]!r} is not a list of numbers") from None
        return value


class FrGroupStatus(BaseModel):
    """A process group's progress on one rank: the sequence number of the last operation enqueued, started and
    completed (-1: none). For a group that also ran point-to-point operations the last one may be a p2p number."""

    last_enqueued_collective: int = -1
    last_started_collective: int = -1
    last_completed_collective: int = -1


class FrDump(BaseModel):
    """One rank's dump, typed."""

    version: str
    pg_config: dict[str, FrGroupConfig] = Field(default_factory=dict)
    pg_status: dict[str, FrGroupStatus] = Field(default_factory=dict)
    entries: list[FrEntry] = Field(default_factory=list)
    comm_lib_version: str = ""

    def compact(self, keep: int = 16, frames_of: int = 4, max_frames: int = 24) -> FrDump:
        """The dump cut for sending across (a probe's document): each process group's last `keep` collectives
        (point-to-point operations dropped: the analysis reads collectives only), frames kept on the last
        `frames_of` of them, at most `max_frames` each."""
        kept: list[FrEntry] = []
        by_group: dict[tuple[str, str], int] = {}
        for entry in sorted((e for e in self.entries if not e.is_p2p), key=lambda e: -e.record_id):
            seen = by_group.get(entry.process_group, 0)
            by_group[entry.process_group] = seen + 1
            if seen < keep:
                frames = entry.frames[:max_frames] if seen < frames_of else []
                kept.append(entry.model_copy(update={"frames": frames}))
        return self.model_copy(update={"entries": sorted(kept, key=lambda e: e.record_id)})


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain values only: every opcode that would name a class or a function (GLOBAL,
    STACK_GLOBAL, INST, OBJ, the extension registry's EXT1/2/4: all go through find_class) and every persistent id
    is refused before anything is looked up, so nothing of the file is ever called."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names a global ({module[:60]}.{name[:60]}), which a dump never holds: "
                                     "refused, nothing was run")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id, which a dump never holds: refused")


def _check_plain(doc: Any) -> None:
    """Every value plain, the tree of values (each reference counted) at most MAX_NODES and MAX_DEPTH deep."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise UnreadableDump(f"it holds more than {MAX_NODES:,} values (a dump of a full buffer holds about "
                                 "a tenth of that)")
        if depth > MAX_DEPTH:
            raise UnreadableDump(f"it nests deeper than {MAX_DEPTH} levels (a dump nests 6)")
        if not isinstance(value, PLAIN):
            raise UnreadableDump(f"it holds a {type(value).__name__}, not plain data")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple)):
            stack.extend((item, depth + 1) for item in value)


def _decode(data: bytes) -> Any:
    """The document in `data`: JSON where it starts with `{`, else a pickle through the plain unpickler."""
    if data.lstrip()[:1] == b"{":
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise UnreadableDump(f"not valid JSON ({str(exc)[:80]})") from None
    if data[:1] != b"\x80":
        raise UnreadableDump("neither a pickle nor JSON (a dump starts with a pickle's protocol byte or '{')")
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise UnreadableDump(f"refused as a pickle: {str(exc)[:200]}") from None
    # A broken pickle raises whatever the opcode it broke in raises (EOFError when truncated, ValueError,
    # IndexError, KeyError, MemoryError, RecursionError...): all of them mean one thing here.
    except Exception as exc:
        raise UnreadableDump(f"a broken or truncated pickle ({type(exc).__name__}: {str(exc)[:80]})") from None


def _field_error(exc: ValidationError) -> str:
    """The first of pydantic's errors as `where: what`."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"][:4])
    return f"{where}: {first['msg'][:100]}"


def parse_dump(data: bytes) -> FrDump:
    """A dump's bytes (pickle or JSON) as an FrDump; UnreadableDump saying why for anything else: bytes over
    MAX_DUMP_BYTES, a pickle that names a global (never run), a broken or truncated file, values that are not plain
    or not of a dump's shape."""
    if len(data) > MAX_DUMP_BYTES:
        raise UnreadableDump(f"{len(data):,} bytes, over the limit of {MAX_DUMP_BYTES // 2**20} MiB")
    doc = _decode(data)
    _check_plain(doc)
    if not isinstance(doc, dict) or "version" not in doc:
        raise UnreadableDump("not a Flight Recorder dump (no document with a version)")
    try:
        return FrDump.model_validate(doc)
    except ValidationError as exc:
        raise UnreadableDump(f"not a Flight Recorder dump's shape ({_field_error(exc)})") from None
