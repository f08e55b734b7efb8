"""`gpuval history`: the runs in the results store, newest first, with filters."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuval.cli._common import console, db_option, handle_errors, print_json


def history(
    host: Optional[List[str]] = typer.Option(None, "--host", help="Runs with records of these nodes."),
    kind: Optional[List[str]] = typer.Option(None, "--kind", help="Runs with records of this kind (collective, "
                                             "health, lammps, train)."),
    sku: Optional[str] = typer.Option(None, "--sku", help="Runs on this VM size."),
    since: Optional[str] = typer.Option(None, "--since", help="Runs started after: 7d, 12h, 2w or an ISO date."),
    until: Optional[str] = typer.Option(None, "--until", help="Runs started before: an age or an ISO date."),
    status: Optional[str] = typer.Option(None, "--status", help="Runs with a record of this status "
                                         "(fail, warn, error, pass)."),
    limit: int = typer.Option(20, "--limit", "-n", help="At most this many runs (0: all)."),
    db: Optional[str] = db_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as a JSON array."),
) -> None:
    """List the runs in the results store."""
    from rich.table import Table

    from gpuval.cli.render import inert, styled

    from gpuval.errors import UsageError
    from gpuval.results.model import Status
    from gpuval.results.query import Query, parse_when
    from gpuval.results.store import open_store

    try:
        wanted = Status(status.lower()) if status else None
    except ValueError:
        raise UsageError(f"--status {status!r}: use one of {', '.join(s.value for s in Status)}") from None
    store = open_store(db)
    query = Query(hosts=list(host or []), kinds=list(kind or []), since=parse_when(since) if since else None,
                  until=parse_when(until) if until else None, status=wanted, skus=[sku] if sku else [])
    runs = store.runs(query, limit=limit or None)  # filtered in the database, before the limit
    if as_json:
        print_json([r.to_json() for r in runs])
        return
    if not runs:
        console.print(f"no runs in {inert(store.url)} match")
        return
    view = Table(show_edge=False, pad_edge=False, title=f"runs in {inert(store.url)}", title_justify="left")
    for name, justify in (("run", "left"), ("started (UTC)", "left"), ("nodes", "right"), ("records", "right"),
                          ("kinds", "left"), ("sku", "left"), ("verdict", "left")):
        view.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in runs:
        verdict = r.verdict.value
        detail = ", ".join(f"{n} {s}" for s, n in sorted(r.status_counts.items()) if Status(s) is not Status.PASS)
        view.add_row(inert(r.run_id), f"{r.started_at:%Y-%m-%d %H:%M}", str(r.hosts), str(r.records),
                     inert(",".join(r.kinds)), inert(",".join(r.skus)),  # the store's words: inert text
                     styled(verdict, verdict) + inert(f" ({detail})" if detail else ""))
    console.print(view)


def register(app: typer.Typer) -> None:
    app.command("history")(handle_errors(history))
