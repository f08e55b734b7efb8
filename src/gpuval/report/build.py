"""`gpuval report`: one run from the store as a self-contained HTML page and a Markdown summary.

The page holds everything it shows (CSS inline, charts as SVG drawn here, no script, no link out), so it opens
offline, from a mail attachment or a CI artifact, the same anywhere.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import platformdirs

from gpuval.collectives.sizes import format_size
from gpuval.baselines import BaselineSource, no_baselines
from gpuval.diagnosis import Diagnosis, diagnose, record_bands, sweep_rows
from gpuval.diagnosis.stats import HIGHER_IS_BETTER
from gpuval.errors import UsageError
from gpuval.report.fleet import fleet_section
from gpuval.report.svg import PALETTE, STATUS_COLORS, LineChart, Series, render_bars, render_line_chart
from gpuval.results.bulk import bulk
from gpuval.results.data import HealthData
from gpuval.results.model import Result, Status, severity
from gpuval.results.query import MetricPoint, Query

HISTORY_WINDOW = timedelta(days=30)
LEGEND_LIMIT = 10  # above this many nodes, lines are coloured by verdict instead of one colour each
MD_NODE_ROWS = 50
HEALTH_ROW_LIMIT = 2000  # health rows listed one by one; past it, passing and skipped checks are counted
APP_KINDS = ("collective", "lammps", "train")


@dataclass
class ReportInput:
    """What a report is drawn from: the run's records, the history before it, the diagnosis."""

    run_id: str
    records: list[Result]
    history: list[MetricPoint]
    diagnosis: Diagnosis
    baselines: BaselineSource = no_baselines
    since: datetime | None = None
    db: str = ""
    generated_at: datetime = field(default_factory=lambda: datetime.now().astimezone())

    @cached_property
    def statuses(self) -> dict[str, Status]:
        """Each node's verdict by host, built once."""
        return {n.host: n.status for n in self.diagnosis.nodes}


def gather(store: Any, run_id: str | None = None, since: datetime | None = None, hosts: list[str] | None = None,
           baselines: BaselineSource = no_baselines) -> ReportInput:
    """Read the run (default: the newest one with records of `hosts`), its hosts' history, and diagnose it."""
    hosts = hosts or []
    run_id = run_id or store.latest_run(Query(hosts=hosts))
    if run_id is None:
        raise UsageError(f"no runs in {store.url}" + (f" for {', '.join(hosts)}" if hosts else "")
                         + ": run gpuval validate or bench, or gpuval import a log first")
    records = store.results(Query(run_ids=[run_id], hosts=hosts))
    if not records:
        raise UsageError(f"no run {run_id!r} in {store.url}" + (f" for {', '.join(hosts)}" if hosts else "")
                         + ": see gpuval history")
    start = min(r.started_at for r in records)
    window_start = since or start - HISTORY_WINDOW
    run_hosts = sorted({r.where.hostname for r in records})
    history = store.metric_points(Query(hosts=run_hosts, since=window_start), HIGHER_IS_BETTER)
    history = [p for p in history if p.started_at <= start or p.run_id == run_id]
    diag = diagnose(records, history, baselines)
    return ReportInput(run_id, records, history, diag, baselines, window_start, store.url)


# ---- sections ---------------------------------------------------------------------------------------------------


def _sweep(record: Result, algbw: bool = False) -> list[tuple[float, float]]:
    """(size, best busbw, or best algbw with `algbw`) of each row of a stored sweep."""
    return [(float(row.size), max(s.alg_bw for s in row.sides()) if algbw else row.best_busbw())
            for row in sweep_rows(record) if row.sides() and row.size > 0]


def _largest(record: Result) -> tuple[int, float, float] | None:
    """(size, time in us, algbw) at the largest size of a sweep: a one-rank sweep's figures (busbw is 0 there)."""
    rows = [r for r in sweep_rows(record) if r.sides()]
    if not rows:
        return None
    side = rows[-1].sides()[0]
    return rows[-1].size, side.time, side.alg_bw


def _node_colors(inp: ReportInput, hosts: list[str]) -> dict[str, tuple[str, str]]:
    """(colour, legend label) per host: its own colour when few, its verdict's colour when many."""
    if len(hosts) <= LEGEND_LIMIT:
        return {h: (PALETTE[i % len(PALETTE)], h) for i, h in enumerate(hosts)}
    verdicts = {h: inp.statuses.get(h, Status.PASS) for h in hosts}
    return {h: (STATUS_COLORS[v.value], "" if v is Status.PASS else h) for h, v in verdicts.items()}


def collective_sections(inp: ReportInput) -> list[dict[str, Any]]:
    """Per collective: busbw against message size, a line per node, the baseline drawn dashed. On one rank busbw is
    0 by definition: algbw is drawn instead, the time at the largest size said, and no baseline is drawn."""
    groups: dict[tuple[str, int | None], list[Result]] = defaultdict(list)
    for r in inp.records:
        if r.kind == "collective" and sweep_rows(r):
            groups[(r.name, r.where.ranks)].append(r)
    sections = []
    for (name, ranks), records in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        hosts = sorted({r.where.hostname for r in records})
        colors = _node_colors(inp, hosts)
        many = len(hosts) > LEGEND_LIMIT
        one = ranks == 1
        series = []
        for r in sorted(records, key=lambda r: severity(_node_status(inp, r.where.hostname))):
            color, label = colors[r.where.hostname]
            flagged = _node_status(inp, r.where.hostname) is not Status.PASS
            series.append(Series(label, _sweep(r, algbw=one), color,
                                 width=2.0 if flagged or not many else 1.0, opacity=1.0 if flagged or not many else 0.35))
        baselines = [] if one else _baseline_lines(inp, records, name)
        series += baselines
        what = "algorithm bandwidth (one rank: busbw is 0 by definition)" if one else "bus bandwidth"
        chart = LineChart(f"{name} {what}", "message size (bytes, log scale)", f"{'algbw' if one else 'busbw'} (GB/s)",
                          series, log_x=True, x_format=lambda v: format_size(int(v)))
        sections.append({
            "title": f"{name}" + (f", {ranks} rank{'' if one else 's'}" if ranks else ""),
            "chart": render_line_chart(chart), "nodes": len(hosts), "baselines": [s.label for s in baselines],
            "many": many, **_median(records, one),
        })
    return sections


def _median(records: list[Result], one: bool) -> dict[str, Any]:
    """The section's headline: the median busbw at the largest size over its nodes; on one rank the median algbw
    and time there (`figure` names which)."""
    if one:
        found = [f for f in map(_largest, records) if f is not None]
        return {"figure": "algbw", "median": statistics.median(f[2] for f in found) if found else None,
                "time_us": statistics.median(f[1] for f in found) if found else None,
                "size": format_size(max(f[0] for f in found)) if found else ""}
    largest = [r.metric("busbw") for r in records]
    values = [m.value for m in largest if m is not None and m.value is not None]
    sizes = [m.size_bytes for m in largest if m is not None and m.size_bytes]
    return {"figure": "busbw", "median": statistics.median(values) if values else None, "time_us": None,
            "size": format_size(max(sizes)) if sizes else ""}


def _node_status(inp: ReportInput, host: str) -> Status:
    return inp.statuses.get(host, Status.PASS)  # a dict built once: a scan per record made the report O(n^2)


def _baseline_lines(inp: ReportInput, records: list[Result], name: str) -> list[Series]:
    lines = []
    for sku in sorted({r.where.sku for r in records if r.where.sku}):
        for rb in record_bands(inp.baselines(sku)):
            band = rb.band
            if rb.kind != "collective" or rb.metric != "busbw" or rb.name != name or band.expected is None:
                continue
            xs = [x for r in records for x, _ in _sweep(r)]
            if band.size_bytes:
                xs.append(float(band.size_bytes))
            if not xs:
                continue
            at = f" at {format_size(band.size_bytes)}" if band.size_bytes else ""
            lines.append(Series(f"baseline {sku}: {band.expected:g} {band.unit}{at}",
                                [(min(xs), band.expected), (max(xs), band.expected)], "#222222", dashed=True,
                                width=1.5))
            if band.fail_below is not None:
                lines.append(Series("", [(min(xs), band.fail_below), (max(xs), band.fail_below)], "#d62728",
                                    dashed=True, width=1.0, opacity=0.6))
    return lines


def _first_metric(r: Result) -> tuple[str, str]:
    m = next((m for m in r.metrics if m.value is not None), None)
    return (f"{m.value:.4g} {m.unit}".strip(), m.name) if m else ("", "")


def health_rows(inp: ReportInput) -> list[dict[str, Any]]:
    """Every record that is not an application run: health checks and anything else, worst first."""
    rows = []
    for r in inp.records:
        if r.kind in APP_KINDS:
            continue
        value, metric = _first_metric(r)
        expected = r.data.expected if isinstance(r.data, HealthData) else None
        rows.append({"host": r.where.hostname, "check": r.name, "kind": r.kind, "status": r.status.value,
                     "value": value, "metric": metric, "expected": "" if expected is None else str(expected),
                     "reason": r.reason})
    rows.sort(key=lambda row: (-severity(Status(row["status"])), row["host"], row["check"]))
    if len(rows) <= HEALTH_ROW_LIMIT:
        return rows
    # A fleet's checks (4,096 nodes x 17) would be 70,000 rows: every row that does not pass, then the rest counted.
    quiet_statuses = (Status.PASS, Status.SKIPPED)
    shown = [row for row in rows if Status(row["status"]) not in quiet_statuses][:HEALTH_ROW_LIMIT]
    quiet = Counter((row["check"], row["status"]) for row in rows if Status(row["status"]) in quiet_statuses)
    shown += [{"host": f"{n} nodes", "check": check, "kind": "health", "status": status, "value": "", "metric": "",
               "expected": "", "reason": "listed by count: the run has more rows than a page should hold"}
              for (check, status), n in sorted(quiet.items())]
    return shown


def _app_rows(inp: ReportInput, kind: str, columns: list[str]) -> list[dict[str, Any]]:
    rows = []
    for r in inp.records:
        if r.kind != kind:
            continue
        row = {"host": r.where.hostname, "name": r.name, "status": r.status.value, "ranks": r.where.ranks,
               **{k: v for k, v in r.params.items() if k in columns}}
        for m in r.metrics:
            row[m.name] = m.value
        rows.append(row)
    return sorted(rows, key=lambda row: (row["host"], row.get("ranks") or 0))


def app_section(inp: ReportInput, kind: str, figure: str, unit: str, columns: list[str]) -> dict[str, Any] | None:
    """LAMMPS or training runs: a table and bars of the headline figure per node and rank count."""
    rows = _app_rows(inp, kind, columns)
    if not rows:
        return None
    status = {n.host: n.status.value for n in inp.diagnosis.nodes}
    bars = [(f"{row['host']} x{row['ranks']}" if row.get("ranks") else row["host"], float(row[figure]),
             STATUS_COLORS[status.get(row["host"], "pass")]) for row in rows if row.get(figure) is not None]
    return {"rows": rows, "columns": columns, "chart": render_bars(figure, unit, bars), "figure": figure}


def trend_sections(inp: ReportInput) -> list[dict[str, Any]]:
    """Each judged figure over the runs of the window: the median over nodes, and the flagged nodes' own lines."""
    by_key: dict[tuple[str, str, str, int | None], list[MetricPoint]] = defaultdict(list)
    for p in inp.history:
        if p.value is not None and p.metric in ("busbw", "timesteps_per_s", "samples_per_s"):
            by_key[(p.kind, p.name, p.metric, p.size_bytes)].append(p)
    flagged = [n.host for n in inp.diagnosis.nodes if n.status is not Status.PASS][:LEGEND_LIMIT]
    sections = []
    for (kind, name, metric, size), points in sorted(by_key.items(), key=lambda kv: str(kv[0])):
        runs = {p.run_id for p in points}
        if len(runs) < 2:
            continue
        times: dict[str, datetime] = {}
        per_run: dict[str, list[float]] = defaultdict(list)
        for p in points:
            times[p.run_id] = min(times.get(p.run_id, p.started_at), p.started_at)
            per_run[p.run_id].append(p.value)
        origin = min(times.values())

        def days(run: str) -> float:
            return (times[run] - origin).total_seconds() / 86400

        order = sorted(runs, key=times.__getitem__)
        series = [Series("median over nodes", [(days(r), statistics.median(per_run[r])) for r in order], "#222222",
                         width=2.5, markers=True)]
        for i, host in enumerate(flagged):
            own = sorted((p for p in points if p.hostname == host), key=lambda p: p.started_at)
            if own:
                series.append(Series(host, [(days(p.run_id), p.value) for p in own],
                                     PALETTE[(i + 3) % len(PALETTE)], markers=True))
        unit = points[0].unit
        at = f" at {format_size(size)}" if size else ""
        chart = LineChart(f"{name} {metric}{at}", f"days since {origin:%Y-%m-%d %H:%M} UTC", f"{metric} ({unit})",
                          series, x_format=lambda v: f"{v:.1f}")
        sections.append({"title": f"{kind} {name}: {metric}{at}", "chart": render_line_chart(chart),
                         "runs": len(runs)})
    return sections


def context(inp: ReportInput) -> dict[str, Any]:
    """Everything the templates show."""
    diag = inp.diagnosis
    counts: dict[str, int] = defaultdict(int)
    for n in diag.nodes:
        counts[n.status.value] += 1
    findings = [f for f in diag.findings() if f.status not in (Status.PASS, Status.SKIPPED)]
    notes = [f for f in diag.findings() if f.status is Status.SKIPPED]
    skus = sorted({r.where.sku for r in inp.records if r.where.sku})
    return {
        "run_id": inp.run_id, "generated_at": inp.generated_at, "db": inp.db, "status": diag.status.value,
        "started_at": min(r.started_at for r in inp.records), "nodes": diag.nodes, "counts": dict(counts),
        "records": len(inp.records), "skus": skus, "findings": findings, "notes": notes,
        "has_baseline": any(record_bands(inp.baselines(s)) for s in skus),
        "collectives": collective_sections(inp), "health": health_rows(inp),
        "lammps": app_section(inp, "lammps", "timesteps_per_s", "steps/s",
                              ["procs", "atoms", "steps", "timesteps_per_s", "atom_steps_per_s", "loop_time_s"]),
        "train": app_section(inp, "train", "samples_per_s", "samples/s",
                             ["world_size", "samples_per_s", "step_time_p50_s", "step_time_p95_s", "loss_first",
                              "loss_last"]),
        "trends": trend_sections(inp), "since": inp.since, "md_node_rows": MD_NODE_ROWS,
        "fleet": fleet_section(inp.records),
        "status_colors": STATUS_COLORS,
    }


def _num(value: float | None) -> str:
    """Figures for people: whole numbers as they are, others to four significant digits."""
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.4g}"


def template_environment() -> Any:
    """The templates' environment (HTML escaped, undefined names an error) with the report's filters."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("gpuval.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["num"] = _num
    env.filters["size"] = lambda v: "" if v is None else format_size(int(v))
    env.filters["ev"] = lambda v: f"{v:.4g}" if isinstance(v, float) else ", ".join(map(str, v)) \
        if isinstance(v, list) else str(v)
    return env


def render_html(inp: ReportInput, ctx: dict[str, Any] | None = None) -> str:
    """The report page (`ctx`: the context already built for the Markdown, so it is built once)."""
    return template_environment().get_template("report.html.j2").render(**(ctx or context(inp)))


_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")


def md_escape(value: object) -> str:
    """A value as inert Markdown text: no HTML (`<img ...>` shows as text), no table cell break (`|`), no link,
    emphasis or code span, on one line."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: object) -> str:
    """A value inside a code span (`...`): shown as written, so only a backtick (it would end the span) and line
    breaks are taken out."""
    return " ".join(str(value).replace("`", "'").split())


def render_markdown(inp: ReportInput, ctx: dict[str, Any] | None = None) -> str:
    """The Markdown summary for CI logs and pull requests."""
    env = template_environment()
    env.autoescape = False
    env.filters["md"] = md_escape  # Markdown has no autoescape: every value from a log or a user goes through this
    env.filters["md_code"] = md_code
    return env.get_template("report.md.j2").render(**(ctx or context(inp)))


def default_report_path(run_id: str) -> Path:
    """report-<run>.html under reports/ in gpuval's data directory."""
    return platformdirs.user_data_path("gpuval") / "reports" / f"report-{run_id}.html"


def prepare(store: Any, run_id: str | None = None, since: datetime | None = None, hosts: list[str] | None = None,
            baselines: BaselineSource = no_baselines) -> tuple[ReportInput, dict[str, Any]]:
    """The run gathered and diagnosed, and the templates' context, built once for both outputs (`render_html(inp,
    ctx)`, `render_markdown(inp, ctx)`); a fleet run's records are read and judged without the garbage collector's
    passes over them (results.bulk)."""
    with bulk():
        inp = gather(store, run_id, since, hosts, baselines)
        return inp, context(inp)


def write_report(run_id: str | None = None, db: str | None = None, output: Path | None = None,
                 md: Path | None = None, since: datetime | None = None, hosts: list[str] | None = None,
                 baselines: BaselineSource | None = None) -> Path:
    """Write the HTML report of a run (default: the newest) and, with `md`, its Markdown summary; returns the
    HTML file's path. `gpuval validate` calls this at its end."""
    from gpuval.baselines import baseline_source
    from gpuval.results.store import open_store

    inp, ctx = prepare(open_store(db), run_id, since, hosts, baselines or baseline_source())
    target = output or default_report_path(inp.run_id)
    write_file(target, render_html(inp, ctx))
    if md:
        write_file(md, render_markdown(inp, ctx))
    return target


def write_file(path: Path, text: str) -> None:
    """Write a report file, creating folders; a path that cannot be written is a one-line error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
