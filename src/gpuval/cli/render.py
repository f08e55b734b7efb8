"""Everything the commands show people, in one place: status styles and tallies, and the summaries of the documents
the log readers return (nccl-tests tables, NCCL debug logs, LAMMPS runs). rich is used here and in cli/ only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from gpuval.collectives.nccl_debug import NcclNetwork
from gpuval.collectives.nccltests_parse import NcclTestsDocument
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Table
from gpuval.results import Status
from gpuval.workloads.lammps.log import LammpsRun

if TYPE_CHECKING:
    from gpuval.checks.base import CheckContext, CheckResult
    from gpuval.engines.spec import JobStatus
    from gpuval.workloads.base import Outcome
    from gpuval.workloads.validate import ValidateOutcome

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL, C1
_SHOWN = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def inert(value: object) -> str:
    """Text from a record, a node, a scheduler or a log, made safe to print: every control character (C0, DEL, C1)
    shown as an escape (ESC as \\x1b, a newline as \\n), so nothing a node wrote moves the cursor, erases a line,
    sets the clipboard or starts a line of its own; then rich markup escaped (a `[/]` is text, not a tag). Every
    string shown from a record goes through here."""
    shown = _CONTROL.sub(lambda m: _SHOWN.get(m.group(), f"\\x{ord(m.group()):02x}"), str(value))
    return escape(shown)


STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "magenta", "skipped": "dim"}
VERDICT_STYLE = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red", "error": "bold magenta",
                 "skipped": "dim"}


def styled(status: Status | str, text: str | None = None, verdict: bool = False) -> str:
    """`text` (default: the status in capitals) in the status's colour."""
    value = status.value if isinstance(status, Status) else status
    style = (VERDICT_STYLE if verdict else STATUS_STYLE).get(value, "")
    return f"[{style}]{text if text is not None else value.upper()}[/]"


def tally(statuses: Iterable[Status | str]) -> str:
    """'3 pass, 1 fail' in the order pass, warn, fail, error, skipped (zero counts left out)."""
    values = [s.value if isinstance(s, Status) else s for s in statuses]
    return ", ".join(f"{values.count(s)} {s}" for s in STATUS_STYLE if values.count(s))


def show_value(value: object) -> str:
    """A measured value for a table cell: floats with %g, None as nothing."""
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def health_heading(ctx: CheckContext) -> str:
    """The first line of `gpuval health`: which machine, which SKU, judged by which baseline."""
    base = f"baseline {ctx.baseline.sku}" if ctx.baseline else "no baseline for this SKU: limits every SKU shares"
    gpu = ctx.limits.gpu  # the GPU-level bands, found from the GPUs themselves (or the SKU's model)
    model = ""
    if gpu is not None:
        model = (f"; GPU model {gpu.title} ({gpu.how})" if gpu.model
                 else f"; no GPU model known ({gpu.how}): GPU-level figures not judged")
    said = f"{ctx.machine.description}, SKU {ctx.sku or 'unknown'} ({base}{model})"  # a recording's words: text
    return f"[bold]gpuval health[/]: {inert(said)}"


def check_line(result: CheckResult) -> str:
    """One health check as `gpuval health` prints it: status, name, fault code, value, reason."""
    unit = result.unit if result.value is not None else ""
    said = f"{result.name:20} {result.fault_code:18} {show_value(result.value)} {unit}"  # a node's values: text
    return (f"  {styled(result.status, f'{result.status.value.upper():7}')} {inert(said)}  "
            f"[dim]{inert(result.reason)}[/]")


def job_status_line(status: JobStatus) -> str:
    """One line for people about a job's state."""
    code = "" if status.exit_code is None else f", exit code {status.exit_code}"
    detail = inert(f" ({status.detail})") if status.detail else ""
    return (f"{status.engine} job {inert(status.job_id)}: [bold]{status.state.value}[/] "
            f"[dim]({inert(status.native_state or '-')} from {status.source or '-'}{code})[/]{detail}")


def job_failure_lines(status: JobStatus) -> list[str]:
    """Under a failed job's status line: the lines of its output that say why, and where the whole output is."""
    lines = [f"  [red]why:[/] {inert(line)}" for line in status.why]
    if status.output:
        lines.append(f"  [dim]output: {inert(status.output)}[/]")
    return lines


def print_outcome(outcome: Outcome, console: Console, as_json: bool = False) -> None:
    """A finished job: for machines its JSON; for people its state, then each record with its headline figure."""
    if as_json:
        from gpuval.cli._common import print_json

        print_json(outcome.to_json())
        return
    console.print(job_status_line(outcome.status))
    for line in job_failure_lines(outcome.status):
        console.print(line, soft_wrap=True)
    for record in outcome.results:
        best = record.metric("busbw") or (record.metrics[0] if record.metrics else None)
        figure = f"{best.name} {best.value:.2f} {best.unit}" if best and best.value is not None else ""
        console.print(f"  {record.kind} {inert(record.name)}: [bold]{record.status.value}[/] {inert(figure)} "
                      f"{inert(record.reason)}")
    if outcome.note:
        console.print(f"  [dim]{inert(outcome.note)}[/]")


def _sweep_lines(table: Table, status: Status, reason: str) -> list[str]:
    """The sweep's headline: peak busbw over several ranks; on one rank (busbw 0 by definition) an NCCL smoke
    test's time and algbw at the largest size."""
    last = table.rows[-1]
    if table.nranks == 1:
        side = last.out_of_place or last.in_place
        figure = f"{side.time:.2f} us, algbw {side.alg_bw:.2f} GB/s" if side else "no figure"
        return [f"all_reduce on one rank (a smoke test): {len(table.rows)} sizes, {figure} at the largest size "
                f"{format_size(last.size)}, {table.total_wrong():g} wrong elements",
                f"  sweep: {inert(reason)}"]
    peak = table.peak()
    return [f"all_reduce: peak busbw {peak.best_busbw() if peak else 0:.2f} GB/s at "
            f"{format_size(peak.size if peak else 0)}, {last.best_busbw():.2f} GB/s at the largest size "
            f"{format_size(last.size)}, {table.total_wrong():g} wrong elements",
            f"  sweep: {status.value}: {inert(reason)}"]


def validate_summary(outcome: ValidateOutcome) -> list[str]:
    """`gpuval validate`'s closing lines: the verdict over the sweep and the checks, what it rests on, the report."""
    lines = []
    sweep = outcome.sweep
    if sweep is not None:
        lines += _sweep_lines(sweep.table, sweep.status, sweep.reason)
    checks = outcome.health.suite.results
    lines.append("  health: " + tally(r.status for r in checks))
    lines += [f"    {r.status.value.upper()} {inert(r.name)}: {inert(r.reason)}" for r in checks
              if r.status in (Status.FAIL, Status.ERROR, Status.WARN)]
    first = f"\n{styled(outcome.status, verdict=True)} " + lines[0]
    out = [first, *lines[1:]]
    if outcome.reason:
        out.append(f"  verdict: {inert(outcome.reason)}")
    if sweep is not None:
        out.append(f"  report: {outcome.report}" if outcome.report else f"  report not written: {outcome.report_error}")
    return out


def text(value: object, limit: int = 300) -> str:
    """A value from a log, for a summary: `inert` and cut at `limit` characters (rich lays a line out in time that
    grows faster than its length)."""
    shown = str(value)
    return inert(shown if len(shown) <= limit else shown[:limit] + "...")


def summarize(doc: Any, console: Console) -> None:
    """A readable summary of one document a log reader returned."""
    if isinstance(doc, NcclTestsDocument):
        _nccl_tests(doc, console)
    elif isinstance(doc, NcclNetwork):
        _nccl_debug(doc, console)
    elif isinstance(doc, LammpsRun):
        _lammps(doc, console)
    else:  # a reader added without a summary: its JSON is still readable
        console.print_json(data=doc.to_json())


def _nccl_tests(doc: NcclTestsDocument, console: Console) -> None:
    """What a log says is text, never markup: every value from it is escaped (a `[/]` in a log is no tag)."""
    table = doc.table
    name = table.collective or "collective ?"
    if table.collective_inferred:
        name += " (inferred from the table)"
    view = RichTable(title=text(f"{doc.source}: {name}, {table.nranks or '?'} ranks"), title_justify="left",
                     show_edge=False, pad_edge=False)
    for column in ("size", "type", "redop", "root", "time us", "algbw", "busbw", "in-place", "#wrong"):
        view.add_column(column, justify="right", no_wrap=True)
    for row in table.rows:
        oop, inp = row.out_of_place, row.in_place
        wrong = row.nwrong()
        view.add_row(
            format_size(row.size), text(row.type), text(row.redop or ""), "" if row.root is None else str(row.root),
            f"{oop.time:.1f}" if oop else "", f"{oop.alg_bw:.2f}" if oop else "",
            f"{oop.bus_bw:.2f}" if oop else "", f"{inp.bus_bw:.2f}" if inp else "",
            "N/A" if wrong is None else f"{wrong:g}",
        )
    console.print(view)
    peak = table.peak()
    if peak:
        console.print(f"peak busbw [bold]{peak.best_busbw():.2f} GB/s[/] at {format_size(peak.size)} "
                      f"({peak.size} B); largest size {format_size(table.rows[-1].size)}: "
                      f"{table.rows[-1].best_busbw():.2f} GB/s")
    wrong = table.total_wrong()
    if table.out_of_bounds is not None or wrong:
        console.print(f"wrong elements: {wrong:g}" + ("" if not wrong else "  [bold red]FAILED[/]"))
    if table.avg_busbw is not None:
        console.print(f"avg bus bandwidth (all sizes, not a verdict): {table.avg_busbw:g} GB/s")
    console.print()


def _nccl_debug(net: NcclNetwork, console: Console) -> None:
    transport = net.transport or "unknown"
    colour = {"IB": "green", "Socket": "red"}.get(transport, "cyan")
    named = f" ({net.network_name})" if net.network_name and net.network_name != transport else ""
    console.print(f"[bold]{text(net.source)}[/]: NCCL {text(net.nccl_version or '?')} used "
                  f"[bold {colour}]{text(transport)}[/]{text(named)}")
    console.print(f"  evidence: {text(net.evidence or '')}", soft_wrap=True)
    if len(net.transports_seen) > 1:
        console.print(f"  [yellow]ranks disagree:[/] {text(', '.join(net.transports_seen))}")
    facts = [f"ranks {net.ranks}" if net.ranks else None, f"hosts {', '.join(net.hosts)}" if net.hosts else None,
             None if net.gdr is None else f"GPUDirect RDMA {'on' if net.gdr else 'off'}",
             None if net.gdr_used is None else f"{'some' if net.gdr_used else 'no'} network channel uses GDRDMA",
             None if net.nvls is None else f"NVLS {'available' if net.nvls else 'not available'}",
             None if net.collnet is None else f"CollNet {'on' if net.collnet else 'off'}",
             f"algorithms {', '.join(net.algorithms)}" if net.algorithms else None,
             f"topology file {net.topology_file}" if net.topology_file else None,
             f"channel paths {', '.join(f'{k} x{n}' for k, n in net.paths.items())}" if net.paths else None]
    if any(facts):
        console.print("  " + text("; ".join(f for f in facts if f), 1000), soft_wrap=True)
    for line in net.gdr_disabled[:3]:
        console.print(f"  GDR disabled: {text(line)}", soft_wrap=True)
    causes = [c for c, on in (("NCCL_IB_DISABLE=1 was set", net.ib_disabled_by_env),
                              ("libibverbs could not be loaded", net.libibverbs_missing),
                              ("NCCL found no IB device", net.no_ib_device)) if on]
    if causes:
        console.print(f"  why not IB: {'; '.join(causes)}")
    console.print()


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _lammps(run: LammpsRun, console: Console) -> None:
    rate = (f"{run.ns_per_day:.3f} ns/day" if run.ns_per_day is not None
            else f"{run.tau_per_day:.1f} tau/day" if run.tau_per_day is not None else "")
    speed = ("no timesteps/s (a run of 0 steps or no time)" if run.timesteps_per_s is None else
             f"{run.timesteps_per_s:.3f} timesteps/s, {(run.atom_steps_per_s or 0) / 1e6:.3f} Matom-step/s")
    console.print(
        f"[bold]{text(run.source)}[/]: LAMMPS {text(run.version or '(version not logged)')}, "
        f"{run.atoms:,} atoms, {run.steps} steps on {run.procs} procs in {run.loop_time_s:.4g} s: {speed}"
        + (f", {rate}" if rate else ""),
        soft_wrap=True,
    )
    if run.breakdown:
        table = RichTable("section", "avg s", "% total", box=None, pad_edge=False)
        for name, sec in run.breakdown.items():
            table.add_row(text(name), _fmt(sec.avg_s), _fmt(sec.total_pct))
        console.print(table)


FLIGHT_SITES = 8  # members shown per process group's finding (those behind first); the rest counted


def flight_lines(flight: Any) -> list[str]:
    """The Flight Recorder's analysis (gpuval.diagnosis.flight.FlightAnalysis) for people: the root ranks, then per
    process group its first collective where the ranks disagree (operation, sizes, dtypes) and its members, those
    behind first, each with its state and call site."""
    from gpuval.diagnosis.job_records import rank_list

    roots = rank_list(flight.root_ranks) or "none"
    missing = f"; no dump of {flight.no_dump_total} rank(s): {rank_list(flight.no_dump)}" if flight.no_dump_total \
        else ""
    lines = [f"  flight recorder: root rank(s) {roots}{text(missing)}"]
    for finding in [*flight.findings, *flight.stuck]:
        lines.append(f"  flight recorder{' (root)' if finding.root else ''}: {text(finding.why, 600)}")
        shape = ", ".join(filter(None, [f"input sizes {finding.input_sizes}" if finding.input_sizes else "",
                                        " ".join(finding.dtypes)]))
        lines.append(f"    {text(finding.op)} #{finding.seq}" + (f": {text(shape)}" if shape else ""))
        sites = sorted(finding.sites, key=lambda s: (s.rank not in finding.behind, s.rank))
        lines += [f"    {text(site.describe(), 600)}" for site in sites[:FLIGHT_SITES]]
        if len(sites) > FLIGHT_SITES:
            lines.append(f"    and {len(sites) - FLIGHT_SITES} more member(s)")
    return lines


def diagnosis_lines(diag: Any) -> list[str]:
    """A job's diagnosis for people (gpuval.diagnosis.job_diagnosis.JobDiagnosis): one summary line (what --watch
    prints each time), then each part, the suspects (the job's links where communication is slow: no node), the
    re-test and the notes. Node events that say the same on several nodes are one line."""
    nodes = sorted(set(diag.node_of.values()) | set(diag.probed))
    comm = diag.comm
    links = ["the job's links"] if comm is not None and comm.suspect is not None else []
    named = ", ".join([s.node for s in diag.suspects] + links) or "none"
    lines = [text(f"job {diag.job_id} on {diag.engine}: {diag.world} ranks on {len(nodes)} nodes; suspects: {named}")]
    if diag.straggler is not None:
        lines.append("  straggler: " + text(diag.straggler.reason, 600))
    if comm is not None:
        lines.append("  communication: " + text(comm.reason, 600))
    if diag.hang is not None:
        lines.append("  hang: " + text(diag.hang.reason, 600))
        lines += [f"    {text(note, 600)}" for note in diag.hang.notes]
    if diag.flight is not None:
        lines += flight_lines(diag.flight)
    lines += [f"  NCCL network on {text(t.node)}: {t.status.value}: {text(t.reason)}" for t in diag.transport]
    said: dict[str, list[str]] = {}
    for node, events in sorted(diag.events.items()):
        what = events.problem or (f"{events.total} Xid/SXid event(s) since the job started, "
                                  f"{events.ecc_total} of them memory (ECC)")
        said.setdefault(what, []).append(node)
    lines += [f"  driver events on {text(', '.join(where))}: {text(what)}" for what, where in said.items()]
    for s in diag.suspects:
        at = ", ".join(filter(None, [f"rank(s) {', '.join(map(str, s.ranks))}" if s.ranks else "",
                                     ", ".join(s.gpus)]))
        lines.append(f"  suspect {text(s.node)}" + (f" ({text(at)})" if at else "") + ": " + text("; ".join(s.why), 800))
    if comm is not None and comm.suspect is not None:
        lines.append(f"  suspect {comm.suspect.kind}: {text(comm.suspect.why, 800)}")
    if diag.exclusion is not None:
        moved = ", ".join(diag.exclusion.nodes)
        lines.append(f"  exclude {text(moved or 'nothing')}: {text(diag.exclusion.summary(), 1200)}")
    if diag.retest is not None:
        what = " of the job's links" if diag.retest.links else ""
        lines.append(f"  re-test{what} {text(diag.retest.run_id)}: {diag.retest.status.value}: "
                     f"{text(diag.retest.reason)}")
        for n in diag.retest.nodes:
            lines.append(f"    {text(n.node)} ({n.role}): {n.status.value}: {text(n.reason)}; {text(n.action)}"
                         + (f" ({text(n.detail)})" if n.detail else ""))
        lines += [f"    link {text(k.link)}: {k.status.value}: {text(k.reason)}" for k in diag.retest.failed_links]
        lines += [f"    {text(note)}" for note in diag.retest.notes]
    lines += [f"  note: {text(note)}" for note in diag.notes]
    return lines
