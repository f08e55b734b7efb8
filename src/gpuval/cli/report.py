"""`gpuval report`: a run as a self-contained HTML page (and a Markdown summary), verdict per node first."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import baseline_files, baseline_option, console, db_option, handle_errors, print_json, profile_option


def report(
    run: Optional[str] = typer.Option(None, "--run", help="Run id [default: the newest run (of --host)]."),
    since: Optional[str] = typer.Option(None, "--since", help="History shown from this time: 7d, 12h, 2w or an "
                                        "ISO date [default: 30 days before the run]."),
    host: Optional[List[str]] = typer.Option(None, "--host", help="Only these nodes (repeat the option)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="HTML file [default: "
                                          "reports/report-RUN.html in gpuval's data directory]."),
    md: Optional[Path] = typer.Option(None, "--md", help="Also write a Markdown summary to this file."),
    db: Optional[str] = db_option(),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON (the files are written too)."),
) -> None:
    """Write the report of a run, judged by the packaged baselines and your own (--baseline, --profile: a run made
    with them is judged the same here); exit 1 when a node fails, 2 when a node could not run or nothing could be
    judged (the exit contract of every verdict: results.verdict)."""
    from gpuval.baselines import baseline_source
    from gpuval.report.build import default_report_path, prepare, render_html, render_markdown, write_file
    from gpuval.results.query import parse_when
    from gpuval.results.model import Status
    from gpuval.results.store import open_store
    from gpuval.results.verdict import exit_code_of

    source = baseline_source(baseline_files(baseline, profile))
    inp, ctx = prepare(open_store(db), run, parse_when(since) if since else None, list(host or []), source)
    target = output or default_report_path(inp.run_id)
    write_file(target, render_html(inp, ctx))
    if md:
        write_file(md, render_markdown(inp, ctx))
    diag = inp.diagnosis
    if as_json:
        print_json({"report": str(target), "markdown": str(md) if md else None, **diag.to_json()})
    else:
        from gpuval.cli.render import inert, tally

        console.print(f"run {inert(inp.run_id)}: [bold]{diag.status.value.upper()}[/] ({len(diag.nodes)} nodes: "
                      f"{tally(n.status for n in diag.nodes)})")
        for node in diag.nodes[:10]:
            if node.status is not Status.PASS:
                console.print(f"  {node.status.value:5} {inert(node.host)}: {inert(node.summary)}", soft_wrap=True)
        console.print(f"report: {target}" + (f"\nmarkdown: {md}" if md else ""))
    if code := exit_code_of(diag.status):
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("report")(handle_errors(report))
