"""`gpuval exporter`: serve the latest gpuval results as Prometheus metrics (each host's newest run per kind)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuval.cli._common import console, handle_errors


def exporter(
    port: int = typer.Option(9478, "--port", "-p", min=1, max=65535, help="TCP port of /metrics."),
    address: str = typer.Option("0.0.0.0", "--address", help="Address to listen on (127.0.0.1: this host only)."),
    results: Optional[Path] = typer.Option(None, "--results", help="JSON Lines file to read [default: gpuval's "
                                           "data directory, or GPUVAL_RESULTS]."),
    db: Optional[str] = typer.Option(None, "--db", help="Read the results store at this URL instead (e.g. the "
                                     "fleet's PostgreSQL), asked again at most every 15 s."),
    once: bool = typer.Option(False, "--once", help="Print the metrics once and exit (what a scrape would get)."),
) -> None:
    """Serve the latest results as Prometheus metrics (gpuval_check_status, gpuval_check_value, ...)."""
    from gpuval.operate import prometheus
    from gpuval.results.sink import default_results_path

    source = prometheus.store_source(db) if db else prometheus.jsonl_source(results or default_results_path())
    if once:
        typer.echo(prometheus.exposition(source()), nl=False)
        return
    _, thread = prometheus.serve(source, port, address)
    shown = f"[{address}]" if ":" in address else address
    console.print(f"serving gpuval metrics on http://{shown}:{port}/metrics (Ctrl-C stops)")
    try:
        while thread.is_alive():
            thread.join(1.0)
    except KeyboardInterrupt:
        console.print("stopped")


def register(app: typer.Typer) -> None:
    app.command("exporter")(handle_errors(exporter))
