"""`gpuval validate`: the main job. This machine's health checks, the all_reduce sweep, one verdict, a report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, print_json, sku_option, writable_file
from gpuval.cli._common import ALLOW_BUSY_HELP, baseline_files, baseline_option, profile_option


def validate(
    nprocs: Optional[int] = typer.Option(None, "--nprocs", help="Local ranks [default: one per GPU, 2 without GPUs]."),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes",
                                           help="Largest all_reduce size [GPU: the size of the baseline's band for "
                                           "this node and these ranks, else 1G; CPU 64M]."),
    sku: Optional[str] = sku_option(),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
    report: Optional[Path] = typer.Option(None, "--report", help="Write the HTML report here "
                                          "[default: reports/report-RUN.html in gpuval's data directory]."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (status, reason, checks, sweep, "
                                 "report)."),
    prometheus: Optional[Path] = typer.Option(None, "--prometheus", metavar="FILE", help="Write the run's records "
                                              "(checks and sweep) as node_exporter textfile metrics to FILE (*.prom)."),
    allow_busy: bool = typer.Option(False, "--allow-busy", help=ALLOW_BUSY_HELP),
) -> None:
    """Validate this machine: every health check, then the all_reduce sweep, judged against the SKU's baseline,
    then an HTML report. Exit 0 pass or warn, 1 any fail, 2 something that applies could not run."""
    from gpuval.cli.render import check_line, health_heading, validate_summary
    from gpuval.collectives.sizes import format_size, parse_size
    from gpuval.operate import prometheus as metrics
    from gpuval.results.sink import default_results_path, end_of, run_records
    from gpuval.workloads.validate import run_validate

    from gpuval.workloads.collective.run import check_nprocs

    if nprocs is not None:
        check_nprocs(nprocs)  # 0 is an error, as for bench, never "the default"
    writable_file(results)
    writable_file(report)
    if prometheus:  # refused before the run; the run's records are those appended to the results file
        writable_file(metrics.check_textfile(prometheus))
    log = results or default_results_path()
    start = end_of(log)
    say = (lambda *_a, **_k: None) if as_json else console.print
    contexts = []

    def heading(ctx) -> None:  # type: ignore[no-untyped-def]
        contexts.append(ctx)
        say(health_heading(ctx))

    def sweep(top: int, ranks: int, gpus: int) -> None:
        ctx = contexts[0]
        if ctx.baseline is None:
            say(f"  no baseline for SKU {ctx.sku or 'unknown'}: the sweep is reported, not judged")
        say(f"\n[bold]gpuval validate[/]: all_reduce 8 B .. {format_size(top)} over {ranks} local ranks "
            f"({'nccl, ' + str(gpus) + ' GPUs' if gpus else 'gloo on CPU, no NVIDIA GPU found'})"
            + (": one rank, a smoke test (busbw is 0 by definition: not judged)" if ranks == 1 else ""))

    outcome = run_validate(nprocs, parse_size(maxbytes) if maxbytes else None, sku, baseline_files(baseline, profile),
                           results, report,
                           quiet=as_json, on_context=heading, on_result=lambda r: say(check_line(r)), on_sweep=sweep,
                           allow_busy=allow_busy)
    if prometheus:
        metrics.write_textfile(run_records(log, outcome.run_id, start), prometheus)  # the ranks' records too
    if as_json:
        print_json(outcome.to_json())
    else:
        for line in validate_summary(outcome):
            console.print(line, soft_wrap=True)
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("validate")(handle_errors(validate))
