"""The fleet section of a report: a fleet check's verdicts (bad nodes first), the links, switch uplinks and group
runs that do not pass, the rounds it took, and the pairs it tested: a pair matrix up to MATRIX_LIMIT nodes, past
that a histogram of the pair tests' shortfalls (a 4,096-node matrix would be 16 million cells; the page must open).

Read from the run's records of kind "fleet" (fleet.run.records), one pass over them: linear in the records.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

from markupsafe import Markup, escape

from gpuval.report.svg import STATUS_COLORS, render_bars
from gpuval.results.data import FleetData
from gpuval.results.model import Result, Status, severity

MATRIX_LIMIT = 64  # nodes drawn as a pair matrix; above it, a histogram
ROW_LIMIT = 200  # passing nodes listed by name; above it they are counted
_CELL = 12


def _worst_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (-severity(Status(r["status"])), r["name"]))


def _fleet(r: Result) -> FleetData:
    """A fleet record's data, read by its type."""
    return r.data if isinstance(r.data, FleetData) else FleetData()


def _row(r: Result) -> dict[str, Any]:
    data = _fleet(r)
    return {"name": data.subject or r.where.hostname, "status": r.status.value, "reason": r.reason,
            "members": list(data.members), "codes": list(data.fault_codes)}


def fleet_section(records: Iterable[Result]) -> dict[str, Any] | None:
    """Everything the templates show of a fleet check, or None when the run holds none."""
    nodes: list[dict[str, Any]] = []
    verdicts: dict[str, dict[str, dict[str, Any]]] = {"link": {}, "uplink": {}, "group": {}}
    tests: dict[str, Result] = {}
    rounds = 0
    for r in records:
        if r.kind != "fleet":
            continue
        if r.name == "node":
            nodes.append(_row(r))
            rounds = max(rounds, _fleet(r).rounds or 0)
        elif r.name in verdicts:
            verdicts[r.name].setdefault(_row(r)["name"], _row(r))  # a link is stored with each of its ends
        elif r.name == "test":
            tests.setdefault(_fleet(r).subject, r)
    if not nodes and not tests:
        return None
    nodes = _worst_first(nodes)
    bad = [n for n in nodes if Status(n["status"]) is not Status.PASS]
    passing = [n for n in nodes if Status(n["status"]) is Status.PASS]
    links = _worst_first(list(verdicts["link"].values()))
    counts = Counter(n["status"] for n in nodes)
    return {
        "nodes": bad + passing[:ROW_LIMIT], "more_passing": max(len(passing) - ROW_LIMIT, 0), "counts": dict(counts),
        "total": len(nodes), "failed": [n["name"] for n in nodes if Status(n["status"]) is Status.FAIL],
        "links": [row for row in links if Status(row["status"]) is not Status.PASS], "links_passing": sum(
            Status(row["status"]) is Status.PASS for row in links),
        "uplinks": _worst_first(list(verdicts["uplink"].values())), "groups": list(verdicts["group"].values()),
        "rounds": rounds or len(_round_rows(tests.values())), "round_rows": _round_rows(tests.values()),
        "chart": _matrix([n["name"] for n in nodes], {n["name"]: n["status"] for n in nodes}, tests.values())
        if len(nodes) <= MATRIX_LIMIT else _histogram(tests.values()),
        "matrix": len(nodes) <= MATRIX_LIMIT,
    }


def _round_rows(tests: Iterable[Result]) -> list[dict[str, Any]]:
    """Per round: its tests by purpose and by status."""
    purposes: dict[int, Counter[str]] = defaultdict(Counter)
    statuses: dict[int, Counter[str]] = defaultdict(Counter)
    for t in tests:
        index = _fleet(t).round
        if index is None:
            continue
        purposes[index][str(t.params.get("purpose", ""))] += 1
        statuses[index][t.status.value] += 1
    return [{"round": i, "tests": ", ".join(f"{n} {p}" for p, n in purposes[i].items()),
             "statuses": ", ".join(f"{n} {s}" for s, n in sorted(statuses[i].items(),
                                                                  key=lambda kv: -severity(Status(kv[0]))))}
            for i in sorted(purposes)]


def _pair_tests(tests: Iterable[Result]) -> dict[tuple[str, str], list[Result]]:
    pairs: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for t in tests:
        members = _fleet(t).members
        if len(members) == 2:
            a, b = sorted(members)
            pairs[(a, b)].append(t)
    return pairs


def _tip(t: Result) -> str:
    return f"{t.params.get('test', '')}: {t.status.value} {_fleet(t).evidence_of('reason') or t.reason}"


def _matrix(order: list[str], node_status: dict[str, str], tests: Iterable[Result]) -> Markup:
    """Nodes bad first on both axes; a cell is the last pair test of its two nodes (its tests in the tooltip), the
    diagonal the node's verdict; white: never tested together."""
    n = len(order)
    if n < 2:
        return Markup("")
    pos = {name: i for i, name in enumerate(order)}
    pairs = _pair_tests(tests)
    label = max(len(name) for name in order) * 7 + 10
    size = label + n * _CELL + 10
    out = [f'<svg class="chart matrix" viewBox="0 0 {size} {size}" width="{size}" height="{size}" role="img" '
           f'aria-label="pair matrix">']
    for name, i in pos.items():
        y = label + i * _CELL
        out.append(f'<text class="tick" x="{label - 4}" y="{y + 10}" text-anchor="end">{escape(name)}</text>'
                   f'<text class="tick" x="{y + 9}" y="{label - 4}" transform="rotate(-90 {y + 9} {label - 4})">'
                   f'{escape(name)}</text>')
        color = STATUS_COLORS.get(node_status.get(name, "skipped"), "#ccc")
        out.append(f'<rect x="{y}" y="{y}" width="{_CELL - 1}" height="{_CELL - 1}" fill="{color}" opacity="0.45">'
                   f'<title>{escape(name)}: {escape(node_status.get(name, ""))}</title></rect>')
    for (a, b), runs in pairs.items():
        if a not in pos or b not in pos:
            continue
        color = STATUS_COLORS.get(runs[-1].status.value, "#ccc")
        tip = escape("; ".join(_tip(t) for t in runs))
        for i, j in ((pos[a], pos[b]), (pos[b], pos[a])):
            out.append(f'<rect x="{label + j * _CELL}" y="{label + i * _CELL}" width="{_CELL - 1}" '
                       f'height="{_CELL - 1}" fill="{color}"><title>{escape(a)} &amp; {escape(b)}: {tip}</title>'
                       f'</rect>')
    out.append("</svg>")
    return Markup("".join(out))


def _histogram(tests: Iterable[Result]) -> Markup:
    """Pair tests by shortfall under the fleet (5% bins), each bar coloured by the worst status in it."""
    bins: Counter[int] = Counter()
    worst: dict[int, str] = {}
    for t in _pair_tests(tests).values():
        for run in t:
            short = _fleet(run).evidence_of("shortfall")
            if short is None:
                continue
            b = max(min(int(short * 100 // 5), 20), -4)
            bins[b] += 1
            if b not in worst or severity(run.status) > severity(Status(worst[b])):
                worst[b] = run.status.value
    bars = [(f"{5 * b}% to {5 * b + 5}%" if b < 20 else "100% and more", float(bins[b]),
             STATUS_COLORS.get(worst[b], "#ccc")) for b in sorted(bins)]
    return render_bars("pair tests by shortfall under the fleet", "tests", bars)
