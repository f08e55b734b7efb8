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
from gpuval.collectives.patterns import OPS, dtype_named
from gpuval.collectives.table import Row, Side, Table
from gpuval.errors import UsageError

_INT = re.compile(r"^-?\d+$")
_NUM = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_PROGRAM = re.compile(r"\b([a-z_]+)_perf(?:_mpi)?\b")
_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group|Pid)\b(?:.*?\son\s+(\S+)\s+device\b)?")
_NRANKS_INFO = re.compile(r"\bnranks (\d+)\b")


def _number(token: str) -> float | None:
    return float(token) if _NUM.match(token) else None


def _collective(name: str) -> str | None:
    try:
        return collective_named(name).name
    except UsageError:
        return None


def _typesize(name: str) -> int | None:
    try:
        return dtype_named(name).size
    except UsageError:
        return None


def _elements_fill(row: Row, factor: int) -> bool:
    """count x type size x factor == size: how a collective's element count relates to its message size."""
    size = _typesize(row.type)
    return size is not None and row.count * size * factor == row.size


def _bus_ratio(table: Table) -> float | None:
    """busbw / algbw of the largest row that moves enough to tell (the two columns print two decimals)."""
    for row in reversed(table.rows):
        side = next((s for s in row.sides() if s.alg_bw >= 1.0), None)
        if side is not None:
            return side.bus_bw / side.alg_bw
    return None


def infer_collective(table: Table) -> str | None:
    """The collective a table proves when its log names none (nccl-tests before 2.17.4 prints no name; the source
    documents' logs are bare tables). Only what the columns prove, else None (unknown, and the diagnosis says it
    was not judged):
    - all_reduce: every row has a reduction op, root -1 (or no root column: old nccl-tests printed one for rooted
      collectives only) and count x type size = size; sendrecv prints the same columns, so its bus factor must
      show too: busbw / algbw = 2(n-1)/n, not sendrecv's 1 (a 2-rank all_reduce cannot be told apart: unknown);
    - reduce_scatter: the same columns with count x type size x ranks = size (ranks known, more than one);
    - reduce: a reduction op with a root >= 0 and count x type size = size (the only rooted reduction)."""
    rows = table.rows
    if not rows or not all(r.redop in OPS for r in rows):
        return None
    n = table.nranks
    if all(r.root is not None and r.root >= 0 for r in rows):
        return "reduce" if all(_elements_fill(r, 1) for r in rows) else None
    if not all(r.root in (None, -1) for r in rows):
        return None
    if n is not None and n > 1 and all(_elements_fill(r, n) for r in rows):
        return "reduce_scatter"
    ratio = _bus_ratio(table)
    if not all(_elements_fill(r, 1) for r in rows) or ratio is None or ratio < 1.05:
        return None
    if n is not None and abs(ratio - 2 * (n - 1) / n) > 0.02 * ratio:
        return None  # the bus factor of n ranks is not all_reduce's
    return "all_reduce"


def _side(tokens: list[str], wrong_is_error: bool) -> Side | None:
    time, algbw, busbw = (_number(t) for t in tokens[:3])
    if time is None or algbw is None or busbw is None:
        return None
    last = tokens[3]
    if last == "N/A":
        return Side(time, algbw, busbw, None)
    value = _number(last)
    if value is None:
        return None
    return Side(time, algbw, busbw, None if wrong_is_error else value)


def parse_row(line: str, wrong_is_error: bool = False) -> Row | None:
    """One table row, or None when the line is not a (complete) row."""
    tokens = line.split()
    if len(tokens) < 11 or not (_INT.match(tokens[0]) and _INT.match(tokens[1])):
        return None
    middle = tokens[3:-8]
    if len(middle) > 2 or _number(tokens[2]) is not None:
        return None
    redop: str | None = None
    root: int | None = None
    if len(middle) == 2:
        redop, root = middle[0], int(middle[1]) if _INT.match(middle[1]) else None
    elif len(middle) == 1:
        if _INT.match(middle[0]):
            root = int(middle[0])
        else:
            redop = middle[0]
    oop = _side(tokens[-8:-4], wrong_is_error)
    inp = _side(tokens[-4:], wrong_is_error)
    if oop is None or inp is None:
        return None
    return Row(int(tokens[0]), int(tokens[1]), tokens[2], redop, root, oop, inp)


@dataclass
class _Test:
    table: Table = field(default_factory=Table)
    ranks: dict[int, str | None] = field(default_factory=dict)  # rank -> its host, when the line names one
    info_nranks: int | None = None
    wrong_is_error: bool = False
    closed: bool = False
    started: bool = False  # a header was seen

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


def parse_text(text: str) -> list[Table]:
    """Every test in a text log; a test with no complete row is dropped."""
    tests: list[_Test] = []
    current = _Test()
    program_hint: str | None = None

    def begin_new() -> None:
        nonlocal current
        tests.append(current)
        current = _Test()

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            if body.startswith(("nThread", "Collective test starting")) or (
                "size" in body.split() and "count" in body.split()
            ):
                if current.table.rows or current.closed:
                    begin_new()
                current.started = True
                if body.startswith("Collective test starting"):
                    current.table.collective = _collective(body.split(":", 1)[1].strip())
                if "size" in body.split():
                    current.wrong_is_error = "error" in body.split()
            elif match := _RANK_LINE.match(line):
                if current.table.rows or current.closed:
                    begin_new()
                current.ranks[int(match.group(1))] = match.group(2)
            elif body.startswith("Out of bounds values"):
                current.table.out_of_bounds = int(_number(body.split(":", 1)[1].split()[0]) or 0)
            elif body.startswith("Avg bus bandwidth"):
                value = body.split(":", 1)[1].split()
                current.table.avg_busbw = _number(value[0]) if value else None
                current.closed = True
            elif body.startswith("Collective test concluded"):
                current.table.collective = current.table.collective or _collective(body.split(":", 1)[1].strip())
                current.closed = True
            elif body.startswith("gpuval") and "_perf" in body:
                program_hint = body
            continue
        row = parse_row(line, current.wrong_is_error)
        if row is not None:
            if current.closed:
                begin_new()
            current.table.rows.append(row)
            continue
        if "NCCL INFO" in line and (match := _NRANKS_INFO.search(line)):
            current.info_nranks = int(match.group(1))
        elif (match := _PROGRAM.search(line)) and not current.table.rows:
            program_hint = match.group(0)
        if program_hint and current.table.collective is None:
            found = _PROGRAM.search(program_hint)
            current.table.collective = _collective(found.group(1)) if found else None
    tests.append(current)
    return [t.finish() for t in tests if t.table.rows]


def _side_from_json(data: dict[str, Any] | None) -> Side | None:
    if not data:
        return None
    nwrong = data.get("nwrong")
    return Side(
        float(data.get("time", data.get("cpu_time", 0.0))),
        float(data["alg_bw"]),
        float(data["bus_bw"]),
        None if nwrong is None else float(nwrong),
    )


def rows_from_json(results: list[dict[str, Any]]) -> list[Row]:
    """-J `results[]` entries as Rows (root may be nccl-tests' padded text or a number)."""
    rows = []
    for r in results:
        root = r.get("root")
        rows.append(Row(
            size=int(r["size"]), count=int(r["count"]), type=str(r["type"]), redop=r.get("redop"),
            root=int(str(root).strip()) if root is not None and str(root).strip() else None,
            out_of_place=_side_from_json(r.get("out_of_place")), in_place=_side_from_json(r.get("in_place")),
        ))
    return rows


def parse_json(doc: dict[str, Any]) -> Table:
    """A -J document as a Table."""
    rows = rows_from_json(doc.get("results") or [])
    collective = None
    names = [r.get("experiment_name") for r in doc.get("results") or []] + list(doc.get("args") or [])[:1]
    for name in names:
        if name and (found := _PROGRAM.search(str(name).rsplit("/", 1)[-1] + " ")):
            collective = _collective(found.group(1))
            break
    oob = doc.get("out_of_bounds") or {}
    avg = doc.get("average_bus_bandwidth") or {}
    devices = doc.get("devices") or []
    return _named(Table(
        collective=collective, nranks=len(devices) or None, rows=rows,
        out_of_bounds=int(oob["count"]) if "count" in oob else None,
        avg_busbw=float(avg["bandwidth"]) if "bandwidth" in avg else None,
        hosts=list(dict.fromkeys(d["hostname"] for d in devices if isinstance(d, dict) and d.get("hostname"))),
    ))


def _as_json(text: str) -> dict[str, Any] | None:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        doc = json.loads(stripped)
    except json.JSONDecodeError:
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


def read_documents(text: str, source: str) -> list[NcclTestsDocument]:
    """Every test in a log, text or -J JSON; a broken -J document is a one-line error naming the file."""
    doc = _as_json(text)
    try:
        tables = [parse_json(doc)] if doc is not None else parse_text(text)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{source}: not a readable nccl-tests JSON document ({type(exc).__name__}: {exc})") from None
    return [NcclTestsDocument(source, t) for t in tables if t.rows]
