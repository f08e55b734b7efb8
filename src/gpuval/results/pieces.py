"""Record lines that cross a launcher whole: a record written to a stream (a pipe, as a job's tasks have) is cut
into pieces that each fit one message of the launcher, and the reader joins them back.

Launchers forward a task's output in messages of a fixed size and write the messages of all tasks into one file
as they come: slurmstepd sends at most 1,024 bytes per message (a longer line is cut), so two nodes that each write
a 2 KiB record at the same moment leave both lines torn and mixed in the job's output (measured on a real
two-node job: 3,696 of 4,000 lines of 1,100 bytes unreadable; none of 4,000 lines of 950 bytes). A record under
PIECE_BYTES is written as it is; a longer one as numbered `gpuval-piece` lines, each under PIECE_BYTES and one
write, which the reader joins by the record's id whatever came between them.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass, field

PIECE_BYTES = 960  # under slurmstepd's 1,024-byte message; Open MPI's (4 KiB) and the CRI log's (16 KiB) are larger
MARK = "gpuval-piece "
_HEADER_BYTES = 40  # MARK, two spaces, "I/N ", the newline (the id counted apart), with room to spare
# Pieces of one record: gpuval's longest records (a health check's per-GPU rows) take a few dozen; this is room for
# ~900 KB. The writer refuses more, the reader takes no more.
MAX_PIECES = 1024
# What the reader holds of records whose pieces have begun and not ended, counted in bytes of memory (each piece's
# text, at most PIECE_BYTES of UTF-8, as the string it is kept in, and its slot): per source (one node: it writes one record at a time) and in all.
# Past either bound the unfinished record least recently added to (of that source, or of all) is dropped: a task
# that died mid-record, or one that floods. Another node's records are never dropped for one source's flood.
MAX_OPEN_BYTES = 4 << 20
MAX_TOTAL_BYTES = 256 << 20
_PIECE_COST = 100  # bytes a kept piece costs beyond its text (its string and its slot)
_RECORD_COST = 400  # bytes an open record costs before any piece


def _cost(text: str) -> int:
    """What keeping a piece's text costs, in bytes of memory: the string itself (one to four bytes a character,
    by its widest one: one four-byte character among 900 makes 3,600) and its slot."""
    return sys.getsizeof(text) + _PIECE_COST


def record_lines(line: str, key: str) -> list[str]:
    """`line` (one record's JSON, ending in a newline) as lines each under PIECE_BYTES: itself when it fits, else
    pieces `gpuval-piece KEY I/N TEXT` (TEXT a run of the line, cut between characters, never inside one). A record
    of more than MAX_PIECES pieces is a ValueError (no reader would take it)."""
    data = line.rstrip("\n").encode()
    if len(data) + 1 <= PIECE_BYTES:
        return [line]
    size = PIECE_BYTES - _HEADER_BYTES - len(key)
    chunks: list[bytes] = []
    start = 0
    while start < len(data):
        end = min(start + size, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte: cut before its character
            end -= 1
        chunks.append(data[start:end])
        start = end
    if len(chunks) > MAX_PIECES:
        raise ValueError(f"a record of {len(data)} bytes takes {len(chunks)} pieces, more than {MAX_PIECES}")
    return [f"{MARK}{key} {i}/{len(chunks)} {chunk.decode()}\n" for i, chunk in enumerate(chunks)]


@dataclass
class _Open:
    """One record whose pieces have begun: the pieces in so far (by index), how many are missing, what it holds."""

    count: int
    parts: dict[int, str] = field(default_factory=dict)
    held: int = _RECORD_COST

    @property
    def missing(self) -> int:
        return self.count - len(self.parts)


class PieceJoiner:
    """Joins `gpuval-piece` lines back into the record lines they were cut from, in whatever order and mixed with
    whatever other lines they came. Pieces are joined only with pieces of the same `source` (the node that printed
    them, where the engine says): a node cannot complete or overwrite another node's record. Each piece costs
    constant time (the pieces in a dict, the missing ones counted), and what is held is bounded (MAX_OPEN_BYTES per
    source, MAX_TOTAL_BYTES in all)."""

    def __init__(self) -> None:
        self._open: dict[str, OrderedDict[str, _Open]] = {}  # source -> its unfinished records, oldest first
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()  # every unfinished record, oldest first
        self._held: dict[str, int] = {}  # source -> bytes held for it
        self._total = 0

    def add(self, line: str, source: str = "") -> str | None:
        """One piece line (launcher prefix already removed): the whole record line once its last piece is in,
        else None. A line that is no well-formed piece is None too (it is a log line, not a record)."""
        try:
            _, key, position, text = line.rstrip("\r\n").split(" ", 3)
            index, count = (int(n) for n in position.split("/"))
        except ValueError:
            return None
        if not 0 <= index < count <= MAX_PIECES or len(text.encode("utf-8", "surrogatepass")) > PIECE_BYTES:
            return None
        records = self._open.setdefault(source, OrderedDict())
        record = records.get(key)
        if record is None or record.count != count:
            if record is not None:
                self._drop(source, key)
            record = records[key] = _Open(count)
            self._order[(source, key)] = None
            self._hold(source, record.held)
        else:  # the least recently added to goes first when a bound is reached
            records.move_to_end(key)
            self._order.move_to_end((source, key))
        before = record.parts.get(index)
        record.parts[index] = text
        cost = _cost(text) - (_cost(before) if before is not None else 0)
        record.held += cost
        self._hold(source, cost)
        if record.missing:
            self._bound(source)
            return None
        self._drop(source, key)
        return "".join(record.parts[i] for i in range(count)) + "\n"

    def _hold(self, source: str, cost: int) -> None:
        self._held[source] = self._held.get(source, 0) + cost
        self._total += cost

    def _bound(self, source: str) -> None:
        """Drop the stalest unfinished records while the source, then everything, holds more than its bound (never
        the one just added to)."""
        records = self._open[source]
        while self._held[source] > MAX_OPEN_BYTES and len(records) > 1:
            self._drop(source, next(iter(records)))
        while self._total > MAX_TOTAL_BYTES and len(self._order) > 1:
            oldest_source, oldest_key = next(iter(self._order))
            self._drop(oldest_source, oldest_key)

    def _drop(self, source: str, key: str) -> None:
        record = self._open[source].pop(key)
        del self._order[(source, key)]
        self._hold(source, -record.held)
        if not self._open[source]:
            del self._open[source], self._held[source]
