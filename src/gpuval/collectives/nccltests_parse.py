"""Read nccl-tests output of any version, text or `-J` JSON, into Tables.

Text is read by the shape of each row, not by column positions: a row is `size count type`, then zero, one or two
of `redop root`, then eight figures (time, algbw, busbw, #wrong|error, twice). Headers and footers mark where one
test ends and the next begins; NCCL INFO/WARN lines and anything else between rows are skipped, wherever they are.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuval.collectives.catalog import collective_named
from gpuval.collectives.logtext import clip, strip_inline_tags, strip_prefix
from gpuval.collectives.nccltests_infer import infer_collective
from gpuval.collectives.nccltests_json import program_names, rows_from_json, table_from_json
from gpuval.collectives.table import Row, Side, Table
from gpuval.errors import UsageError

_PROGRAM = re.compile(r"\b([a-z_]{1,64})_perf(?:_mpi)?\b")
_NRANKS_INFO = re.compile(r"\bnranks (\d{1,7})\b")
_ROW_START = frozenset("0123456789")
_BEGIN = ("nThread", "Collective test starting", "nccl-tests version", "Using devices")
MAX_JSON = 64 * 1024**2  # a -J document is kilobytes; past this the file is read as text


def _number(token: str) -> float | None:
    """A finite figure (nccl-tests prints none other: inf or an overflow is a broken line, not a measurement);
    ASCII only (float() would take Arabic digits and underscores)."""
    if len(token) > 64 or not token.isascii() or "_" in token:
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    return value if value - value == 0 else None  # inf - inf and nan - nan are nan


def _int(token: str) -> bool:
    """A size, count or root: ASCII digits, maybe a minus (a longer run of digits is no field)."""
    digits = token[1:] if token[:1] == "-" else token
    return digits.isascii() and digits.isdigit() and len(digits) <= 19


def _collective(name: str) -> str | None:
    try:
        return collective_named(name).name
    except UsageError:
        return None


def _row_text(line: str) -> str:
    """A row as nccl-tests printed it: an NCCL INFO line joined onto its tail cut off, and launcher tags that recur
    inside it (MPICH's `-1[0]    1626.5`) removed."""
    at = line.find(" NCCL ")
    if at >= 0:
        head = line[:at].rsplit(None, 2)  # drop `host:pid:tid [dev]`
        line = head[0] if len(head) == 3 else ""
    return strip_inline_tags(line)


_FIG = r"(\d{1,30}(?:\.\d{0,30})?(?:[eE][-+]?\d{1,3})?|\.\d{1,30}(?:[eE][-+]?\d{1,3})?)"
_WRONG = r"(\d{1,30}(?:\.\d{0,30})?(?:[eE][-+]?\d{1,3})?|N/A)"
_SIDE = rf"\s+(?:{_FIG}\s+{_FIG}\s+{_FIG}\s+{_WRONG}|N/A\s+N/A\s+N/A\s+N/A)"  # all N/A: a side not measured
# size count type [redop] [root] then time algbw busbw #wrong|error, twice. Every token is bounded and the
# separators are whitespace runs between tokens that hold none, so a match costs linear time.
_ROW = re.compile(rf"\s*(\d{{1,19}})\s+(\d{{1,19}})\s+([^\s\d.+-]\S{{0,31}})(?:\s+([^\s\d.+-]\S{{0,31}}))?"
                  rf"(?:\s+(-?\d{{1,19}}))?{_SIDE}{_SIDE}\s*")


def _side_of(g: tuple[str, ...], wrong_is_error: bool) -> Side | None:
    """One side from its four groups (time, algbw, busbw, #wrong); None where all four read N/A (not measured)."""
    if g[0] is None:
        return None
    return Side(float(g[0]), float(g[1]), float(g[2]), None if wrong_is_error or g[3] == "N/A" else float(g[3]))


def _row_of(g: tuple[str, ...], wrong_is_error: bool) -> Row | None:
    """A Row from _ROW's groups; None when a figure overflows (1e999: a broken line) or no side was measured."""
    sides = [_side_of(g[5:9], wrong_is_error), _side_of(g[9:13], wrong_is_error)]
    figures = [x for s in sides if s is not None for x in (s.time, s.alg_bw, s.bus_bw, s.nwrong or 0.0)]
    if not figures or sum(figures) * 0 != 0:
        return None
    return Row(int(g[0]), int(g[1]), g[2], g[3], None if g[4] is None else int(g[4]), sides[0], sides[1])


def parse_row(line: str, wrong_is_error: bool = False) -> Row | None:
    """One table row, or None when the line is not a (complete) row."""
    if "[" in line or " NCCL " in line:
        line = _row_text(line)
    found = _ROW.fullmatch(line)
    return None if found is None else _row_of(found.groups(), wrong_is_error)


@dataclass
class _Test:
    table: Table = field(default_factory=Table)
    ranks: dict[int, str | None] = field(default_factory=dict)  # rank -> its host, when the line names one
    info_nranks: int | None = None
    wrong_is_error: bool = False
    closed: bool = False

    def finish(self) -> Table:
        if self.table.nranks is None:
            self.table.nranks = (max(self.ranks) + 1) if self.ranks else self.info_nranks
        hosts = [self.ranks[r] for r in sorted(self.ranks) if self.ranks[r]]
        self.table.hosts = list(dict.fromkeys(hosts))
        return _named(self.table)


def _named(table: Table) -> Table:
    """The table with its collective: as the log named it, else as its columns prove it (infer_collective)."""
    if table.collective is None:
        table.collective = infer_collective(table)
        table.collective_inferred = table.collective is not None
    return table


def _named_program(words: list[str]) -> str | None:
    """`all_reduce_perf`, `all_reduce_perf_mpi` (an MPI build) or `all_reduce` -> all_reduce."""
    name = words[0][:256] if words else ""
    found = _PROGRAM.search(name + " ")
    return _collective(found.group(1) if found else name)


def _after_colon(body: str) -> list[str]:
    return body.partition(":")[2].split()


def _rank(body: str) -> tuple[int, str | None] | None:
    """`Rank 3 Group 0 Pid 1234 on host device 3 [...] NAME` (older: no Group) -> (3, host)."""
    words = body.split(None, 12)
    if len(words) < 3 or words[0] != "Rank" or not words[1].isdigit() or len(words[1]) > 7:
        return None
    if words[2] not in ("Group", "Pid"):
        return None
    host = None
    if "on" in words:
        at = words.index("on")
        if at + 2 < len(words) and words[at + 2] == "device":
            host = words[at + 1]
    return int(words[1]), host


class TextReader:
    """nccl-tests text output, fed in pieces of whole lines (any size); each test is returned as soon as the next
    one begins, so a log of ten thousand tests is never held whole. Nothing it reads raises: a line that is not
    what it looks for is skipped."""

    def __init__(self) -> None:
        self.current = _Test()
        self.program_hint: str | None = None

    def _begin_new(self, done: list[Table]) -> None:
        if self.current.table.rows:
            done.append(self.current.finish())
        self.current = _Test()

    def feed(self, text: str) -> list[Table]:
        """Read whole lines; returns the tests that ended in them."""
        done: list[Table] = []
        row_match = _ROW.fullmatch
        for raw in text.splitlines():
            if len(raw) < 512 and (found := row_match(raw)) is not None:  # a plain row, the common line: at once
                row = _row_of(found.groups(), self.current.wrong_is_error)
                if row is not None:
                    if self.current.closed:
                        self._begin_new(done)
                    self.current.table.rows.append(row)
                    continue
            line = raw.strip()
            if not line:
                continue
            first = line[0]
            if first in "[(" or (first in _ROW_START and ":" in line[:48]):
                line = strip_prefix(clip(line)).strip()
                if not line:
                    continue
                first = line[0]
            if first == "#":
                self._comment(clip(line), done)
            elif first in _ROW_START:
                row = parse_row(clip(line), self.current.wrong_is_error)
                if row is not None:
                    if self.current.closed:
                        self._begin_new(done)
                    self.current.table.rows.append(row)
                else:
                    self._other(line)
            else:
                self._other(line)
        return done

    def close(self) -> list[Table]:
        """The last test, once the whole log was read."""
        done: list[Table] = []
        self._begin_new(done)
        return done

    def _other(self, line: str) -> None:
        """A line that is neither a row nor a comment: NCCL's rank count, the program's name in its command."""
        current = self.current
        if "nranks" in line and "NCCL" in line and (match := _NRANKS_INFO.search(clip(line))):
            current.info_nranks = int(match.group(1))
        elif "_perf" in line and not current.table.rows and (match := _PROGRAM.search(clip(line))):
            self.program_hint = match.group(0)
        if self.program_hint and current.table.collective is None:
            found = _PROGRAM.search(self.program_hint)
            current.table.collective = _collective(found.group(1)) if found else None

    def _comment(self, line: str, done: list[Table]) -> None:
        current = self.current
        body = line.lstrip("#").strip()
        header = body.startswith("size") and "count" in body
        if header or body.startswith(_BEGIN):
            if current.table.rows or current.closed:
                self._begin_new(done)
                current = self.current
            if body.startswith("Collective test starting"):
                current.table.collective = _named_program(_after_colon(body))
            if header:
                current.wrong_is_error = "error" in body.split()
        elif body.startswith("Rank"):
            found = _rank(body)
            if found is not None:
                if current.table.rows or current.closed:
                    self._begin_new(done)
                self.current.ranks[found[0]] = found[1]
        elif body.startswith("Out of bounds values"):
            value = _after_colon(body)[:1]
            number = _number(value[0]) if value else None
            current.table.out_of_bounds = int(number) if number is not None and number >= 0 else None
        elif body.startswith("Avg bus bandwidth"):
            value = _after_colon(body)[:1]
            current.table.avg_busbw = _number(value[0]) if value else None
            current.closed = True
        elif body.startswith("Collective test concluded"):
            current.table.collective = current.table.collective or _named_program(_after_colon(body))
            current.closed = True
        elif body.startswith("gpuval") and "_perf" in body:
            self.program_hint = body


def parse_text(text: str) -> list[Table]:
    """Every test in a text log; a test with no complete row is dropped."""
    reader = TextReader()
    return [*reader.feed(text), *reader.close()]


def parse_json(doc: dict[str, Any]) -> Table:
    """A -J document as a Table (TypeError, ValueError or KeyError when it is not one), its collective from the
    program that wrote it."""
    table = table_from_json(doc)
    for name in program_names(doc):
        if found := _PROGRAM.search(name.rsplit("/", 1)[-1] + " "):
            table.collective = _collective(found.group(1))
            break
    return _named(table)


def _as_json(text: str) -> dict[str, Any] | None:
    """The -J document the text is, or None when it is not one (it is then read as text)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # not JSON; a 5,000-digit number; 100,000 nested brackets
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("results"), list) else None


KIND = "nccl-tests"


@dataclass
class NcclTestsDocument:
    """One test found in a log: its table, and the file it came from."""

    source: str
    table: Table

    def to_json(self) -> dict[str, Any]:
        """The `gpuval parse --json` object for one test."""
        table = self.table
        return {
            "source": self.source,
            "kind": KIND,
            "collective": table.collective,
            "collective_inferred": table.collective_inferred,
            "nranks": table.nranks,
            "results": [r.to_json() for r in table.rows],
            "average_bus_bandwidth": None if table.avg_busbw is None else {"bandwidth": table.avg_busbw},
            "out_of_bounds": None if table.out_of_bounds is None else {
                "count": table.out_of_bounds, "okay": table.out_of_bounds == 0},
            "hosts": table.hosts,
        }


class NcclTestsStream:
    """`gpuval parse`/`import`'s reader: a log fed in pieces of whole lines, its tests returned as they end. A file
    that starts with `{` is kept (up to MAX_JSON) to be read as one -J document at the end; a broken -J document is
    a one-line error naming the file."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.text = TextReader()
        self.json: list[str] | None = None
        self.json_size = 0
        self.started = False

    def _docs(self, tables: list[Table]) -> list[NcclTestsDocument]:
        return [NcclTestsDocument(self.source, t) for t in tables if t.rows]

    def feed(self, text: str) -> list[NcclTestsDocument]:
        """Read whole lines; the tests that ended in them."""
        if not self.started:
            head = text.lstrip()
            if not head:
                return []
            self.started = True
            self.json = [] if head[0] == "{" else None
        if self.json is not None:
            self.json.append(text)
            self.json_size += len(text)
            if self.json_size <= MAX_JSON:
                return []
            held, self.json = "".join(self.json), None  # far too large for a -J document: it is text
            return self._docs(self.text.feed(held))
        return self._docs(self.text.feed(text))

    def close(self) -> list[NcclTestsDocument]:
        """The tests left once the whole log was read."""
        if self.json is None:
            return self._docs(self.text.close())
        held, self.json = "".join(self.json), None
        doc = _as_json(held)
        if doc is None:
            return self._docs([*self.text.feed(held), *self.text.close()])
        try:
            return self._docs([parse_json(doc)])
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise UsageError(f"{self.source}: not a readable nccl-tests JSON document "
                             f"({type(exc).__name__}: {str(exc)[:200]})") from None


def read_documents(text: str, source: str) -> list[NcclTestsDocument]:
    """Every test in a log, text or -J JSON; a broken -J document is a one-line error naming the file."""
    stream = NcclTestsStream(source)
    return [*stream.feed(text), *stream.close()]
