"""The page of one job's diagnosis (gpuval.diagnosis.job_diagnosis): suspects first, then the per-rank timeline of
compute and wait with the straggler and why it is slow, the job's communication against its own past, the hang
with each rank's collective, stacks and evidence, the Flight Recorder's first disagreement per process group, RAS
status, each node's NCCL network and driver events. Self-contained like the run report (gpuval.report.build): CSS
inline, SVG charts, no script, no link out.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from markupsafe import Markup

from gpuval.diagnosis.job_diagnosis import JobDiagnosis
from gpuval.diagnosis.job_records import rank_list
from gpuval.diagnosis.straggler import RankWindow, StragglerReport
from gpuval.report.build import default_report_path, template_environment, write_file
from gpuval.report.svg import PALETTE, STATUS_COLORS, LineChart, Series, render_line_chart

ALL_RANKS_DRAWN = 16  # up to this many ranks every rank gets a line; past it, the median and the stragglers only
FLIGHT_SITES = 64  # members shown per process group's finding (those behind first); the rest counted


def _chart(report: StragglerReport, figure: str, label: str) -> Markup:
    """One line per rank (thin grey, or coloured for a straggler) of a per-step median over the windows, and the
    ranks' median across them (dashed)."""
    per_rank: dict[int, list[RankWindow]] = defaultdict(list)
    per_window: dict[int, list[float]] = defaultdict(list)
    for row in report.timeline:
        per_rank[row.rank].append(row)
        per_window[row.last].append(getattr(row, figure))
    named = {s.rank for s in report.stragglers}
    series = [Series("median of the ranks", [(x, statistics.median(v) * 1e3) for x, v in sorted(per_window.items())],
                     "#222222", dashed=True, width=2)]
    for i, rank in enumerate(sorted(named)):
        rows = per_rank[rank]
        series.append(Series(f"rank {rank} (straggler)", [(r.last, getattr(r, figure) * 1e3) for r in rows],
                             PALETTE[(3 + i) % len(PALETTE)], width=2.5, markers=True))
    if len(per_rank) <= ALL_RANKS_DRAWN:
        series += [Series("", [(r.last, getattr(r, figure) * 1e3) for r in per_rank[rank]], "#888888", width=1,
                          opacity=0.6) for rank in sorted(set(per_rank) - named)]
    return render_line_chart(LineChart(f"{label} per step, each rank", "step (end of each report's window)",
                                       f"{label} (ms, median per step)", series))


def _rank_rows(diag: JobDiagnosis) -> list[dict[str, Any]]:
    """Per rank: its node, its newest window's figures and how many windows flagged it."""
    report = diag.straggler
    if report is None:
        return []
    newest: dict[int, RankWindow] = {}
    flagged: dict[int, int] = defaultdict(int)
    for row in report.timeline:
        if row.rank not in newest or row.last >= newest[row.rank].last:
            newest[row.rank] = row
        flagged[row.rank] += row.flagged
    return [{"rank": rank, "node": diag.node_of.get(rank, ""), "steps": f"{w.first}-{w.last}",
             "compute_ms": w.compute_s * 1e3, "wait_ms": w.wait_s * 1e3, "step_ms": w.step_s * 1e3,
             "flagged": flagged[rank]} for rank, w in sorted(newest.items())]


def _flight_groups(diag: JobDiagnosis) -> list[dict[str, Any]]:
    """Per process group's finding of the Flight Recorder: its members, those behind first, cut at FLIGHT_SITES."""
    if diag.flight is None:
        return []
    groups = []
    for finding in [*diag.flight.findings, *diag.flight.stuck]:
        sites = sorted(finding.sites, key=lambda s: (s.rank not in finding.behind, s.rank))
        groups.append({"finding": finding, "sites": sites[:FLIGHT_SITES], "more": max(len(sites) - FLIGHT_SITES, 0),
                       "members": rank_list(finding.members), "behind": rank_list(finding.behind) or "none"})
    return groups


def job_context(diag: JobDiagnosis) -> dict[str, Any]:
    """What the job template shows."""
    straggler = diag.straggler
    charts = []
    if straggler is not None and straggler.timeline:
        charts = [_chart(straggler, "compute_s", "compute"), _chart(straggler, "wait_s", "collective wait")]
    hang = diag.hang
    return {
        "diag": diag, "suspects": diag.suspects, "comm": diag.comm, "nodes": sorted(set(diag.node_of.values()) | set(diag.probed)), "straggler": straggler, "charts": charts,
        "rank_rows": _rank_rows(diag), "hang": hang,
        "stacks": sorted(hang.stacks.items()) if hang is not None else [],
        "transport": [{"node": t.node, "status": t.status.value, "transport": t.transport or "",
                       "version": t.nccl_version or "", "reason": t.reason,
                       "sockets": ", ".join(str(r.rank if r.rank is not None else f"pid {r.pid}")
                                            for r in t.ranks if r.transport == "Socket")} for t in diag.transport],
        "events": sorted(diag.events.items()), "ras": sorted(diag.ras.items()), "status_colors": STATUS_COLORS,
        "flight": diag.flight, "flight_groups": _flight_groups(diag), "flight_sources": diag.flight_sources,
    }


def render_job_html(diag: JobDiagnosis) -> str:
    """The diagnosis page."""
    env = template_environment()
    env.filters["ms"] = lambda v: "" if v is None or not math.isfinite(v) else f"{v:.4g}"
    return env.get_template("job.html.j2").render(**job_context(diag))


def default_job_report_path(run_id: str) -> Path:
    """job-<run>.html under reports/ in gpuval's data directory (beside the run reports)."""
    return default_report_path(run_id).with_name(f"job-{run_id}.html")


def write_job_report(diag: JobDiagnosis, path: Path) -> Path:
    """Write the diagnosis page to `path` (a one-line error when it cannot be written); returns the path."""
    write_file(path, render_job_html(diag))
    return path
