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

from collections import OrderedDict

PIECE_BYTES = 960  # under slurmstepd's 1,024-byte message; Open MPI's (4 KiB) and the CRI log's (16 KiB) are larger
MARK = "gpuval-piece "
_HEADER_BYTES = 40  # MARK, two spaces, "I/N ", the newline (the id counted apart), with room to spare
MAX_OPEN = 4096  # records whose pieces have begun and not ended; past it the oldest is dropped (a task died)


def record_lines(line: str, key: str) -> list[str]:
    """`line` (one record's JSON, ending in a newline) as lines each under PIECE_BYTES: itself when it fits, else
    pieces `gpuval-piece KEY I/N TEXT` (TEXT a run of the line, cut between characters, never inside one)."""
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
    return [f"{MARK}{key} {i}/{len(chunks)} {chunk.decode()}\n" for i, chunk in enumerate(chunks)]


class PieceJoiner:
    """Joins `gpuval-piece` lines back into the record lines they were cut from, in whatever order and mixed with
    whatever other lines they came. Pieces are joined only with pieces of the same `source` (the node that printed
    them, where the engine says): a node cannot complete or overwrite another node's record."""

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[str, str], list[str | None]] = OrderedDict()

    def add(self, line: str, source: str = "") -> str | None:
        """One piece line (launcher prefix already removed): the whole record line once its last piece is in,
        else None. A line that is no well-formed piece is None too (it is a log line, not a record)."""
        try:
            _, key, position, text = line.rstrip("\r\n").split(" ", 3)
            index, count = (int(n) for n in position.split("/"))
        except ValueError:
            return None
        if not 0 <= index < count <= 1 << 16:
            return None
        slot = (source, key)
        parts = self._open.get(slot)
        if parts is None or len(parts) != count:
            parts = self._open[slot] = [None] * count
            if len(self._open) > MAX_OPEN:
                self._open.popitem(last=False)
        parts[index] = text
        if any(part is None for part in parts):
            return None
        del self._open[slot]
        return "".join(part for part in parts if part is not None) + "\n"
