"""`gpuval exporter`: serve the latest gpuval results as Prometheus metrics (each host's newest run per kind)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuval.cli._common import console, handle_errors
from gpuval.operate.prometheus import MAX_HOSTS


def exporter(
    port: int = typer.Option(9478, "--port", "-p", min=1, max=65535, help="TCP port of /metrics."),
    address: str = typer.Option("127.0.0.1", "--address", help="Address to listen on (0.0.0.0: every interface, "
                                "for a Prometheus on another host)."),
    results: Optional[Path] = typer.Option(None, "--results", help="JSON Lines file to read [default: gpuval's "
                                           "data directory, or GPUVAL_RESULTS]."),
    db: Optional[str] = typer.Option(None, "--db", help="Read the results store at this URL instead (e.g. the "
                                     "fleet's PostgreSQL), asked again at most every 15 s."),
    idle_timeout: float = typer.Option(10.0, "--idle-timeout", min=0.1, max=300, help="Seconds a connection may "
                                       "stay silent (sending its request, reading the answer) before it is closed."),
    max_hosts: int = typer.Option(MAX_HOSTS, "--max-hosts", min=1, help="Hosts kept; records of further hosts are "
                                  "dropped and counted (gpuval_exporter_dropped_records_total)."),
    once: bool = typer.Option(False, "--once", help="Print the metrics once and exit (what a scrape would get)."),
) -> None:
    """Serve the latest results as Prometheus metrics (gpuval_check_status, gpuval_check_value, ...)."""
    from gpuval.operate.exporter import Exporter, Server, Source, StoreSource
    from gpuval.results.sink import JsonlReader, default_results_path

    source: Source = StoreSource(db) if db else JsonlReader(results or default_results_path())
    metrics = Exporter(source, max_hosts)
    if once:
        typer.echo(metrics.exposition().decode(), nl=False)
        return
    server = Server(metrics, address, port, idle_timeout)
    shown = f"[{address}]" if ":" in address else address
    console.print(f"serving gpuval metrics on http://{shown}:{port}/metrics (Ctrl-C stops)")
    console.file.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")


def register(app: typer.Typer) -> None:
    app.command("exporter")(handle_errors(exporter))
