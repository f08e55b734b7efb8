"""`gpuval compare RUN_A RUN_B`: what changed from A to B, node by node, judged against the noise."""

from __future__ import annotations

from typing import Optional

import typer

from gpuval.cli._common import console, db_option, handle_errors, print_json
from gpuval.errors import EXIT_FAILED


def compare(
    run_a: str = typer.Argument(..., help="The earlier (reference) run id."),
    run_b: str = typer.Argument(..., help="The run to judge against it."),
    show_all: bool = typer.Option(False, "--all", help="List unchanged figures too."),
    db: Optional[str] = db_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Compare two runs; exit 1 when B regressed beyond the noise."""
    from rich.table import Table

    from gpuval.cli.render import inert
    from gpuval.collectives.sizes import format_size
    from gpuval.diagnosis.compare import compare as compare_runs
    from gpuval.diagnosis.stats import HIGHER_IS_BETTER
    from gpuval.errors import UsageError
    from gpuval.results.query import Query
    from gpuval.results.store import open_store

    store = open_store(db)
    a = store.results(Query(run_ids=[run_a]))
    b = store.results(Query(run_ids=[run_b]))
    for run_id, records in ((run_a, a), (run_b, b)):
        if not records:
            raise UsageError(f"no run {run_id!r} in {store.url}: see gpuval history")
    hosts = sorted({r.where.hostname for r in a + b})
    history = store.metric_points(Query(hosts=hosts), HIGHER_IS_BETTER)
    result = compare_runs(a, b, history)
    if as_json:
        print_json(result.to_json())
    else:
        shown = [c for c in result.changes if show_all or c.verdict != "same" or c.host == "*"]
        view = Table(show_edge=False, pad_edge=False, title=inert(f"{run_a} -> {run_b}"), title_justify="left")
        for name in ("node", "test", "metric", "size", "A", "B", "change", "noise", "verdict"):
            view.add_column(name, justify="right" if name in ("A", "B", "change", "noise", "size") else "left")
        colors = {"regressed": "bold red", "improved": "green", "same": "dim"}
        for c in shown:
            view.add_row("all nodes (median)" if c.host == "*" else inert(c.host), inert(f"{c.kind} {c.name}"),
                         inert(c.metric), format_size(c.size_bytes) if c.size_bytes else "", f"{c.a:.4g}",
                         inert(f"{c.b:.4g} {c.unit}"),
                         f"{c.change_pct:+.1f}%", f"+-{c.noise_pct:.1f}% ({c.noise_from})",
                         f"[{colors[c.verdict]}]{c.verdict}[/]")
        console.print(view)
        for label, hosts_only in (("only in " + run_a, result.only_a), ("only in " + run_b, result.only_b)):
            if hosts_only:
                console.print(inert(f"{label}: {', '.join(hosts_only)}"))
        hidden = len(result.changes) - len(shown)
        console.print(f"verdict: [bold]{result.verdict}[/]" + (f" ({hidden} unchanged figures hidden; --all "
                                                               "lists them)" if hidden else ""))
    if result.verdict == "regressed":
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    app.command("compare", no_args_is_help=True)(handle_errors(compare))
