"""`gpuval import FILE...`: nccl-tests logs, LAMMPS logs, NCCL debug logs and gpuval JSON Lines into the store."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import (
    baseline_files, baseline_option, console, db_option, err_console, handle_errors, print_json, profile_option,
)
from gpuval.errors import EXIT_CANNOT_RUN


def import_(
    files: List[Path] = typer.Argument(..., help="Job outputs: nccl-tests text or -J JSON, log.lammps, NCCL_DEBUG "
                                       "logs, gpuval results .jsonl."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id for the records read from logs "
                                         "[default: one new id for this import]; JSON Lines keep their own."),
    host: Optional[str] = typer.Option(None, "--host", help="Host the logs come from [default: what the log "
                                       "names, else the file's name]."),
    sku: Optional[str] = typer.Option(None, "--sku", help="VM size of that host (e.g. Standard_ND96asr_v4)."),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    db: Optional[str] = db_option(),
    as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
) -> None:
    """Bring job outputs into the results store (a record already stored is kept once)."""
    from gpuval.baselines import baseline_source
    from gpuval.cli.render import inert
    from gpuval.results import new_run_id
    from gpuval.results.store import open_store
    from gpuval.workloads.ingest import Origin, import_file

    store = open_store(db)
    origin = Origin(run_id=run_id or "import-" + new_run_id(), host=host, sku=sku,
                    baselines=baseline_source(baseline_files(baseline, profile)))
    done = [import_file(path, origin, sink=store.add) for path in files]  # stored a batch at a time, as read
    stored = sum(item.count for item in done)
    failed = [item for item in done if item.error]
    if as_json:
        print_json({
            "database": store.url, "stored": stored,
            "files": [{"path": str(i.path), "records": i.count, "run_ids": sorted(i.run_ids), "skipped": i.skipped,
                       "error": i.error} for i in done],
        })
    else:
        for item in done:
            if item.error:
                continue
            what = ", ".join(f"{n} x {k}" for k, n in sorted(item.kinds.items())) or "nothing to store"
            console.print(f"{inert(str(item.path))}: {inert(what)}")
            for line in item.skipped:
                console.print(f"  [yellow]skipped[/] {inert(line)}")
        runs = sorted({r for item in done for r in item.run_ids})
        console.print(f"stored {stored} records in {inert(store.url)} (run{'s' if len(runs) > 1 else ''} "
                      f"{inert(', '.join(runs)) or '-'})")
    for item in failed:
        err_console.print(f"[bold red]error:[/] {inert(item.error or '')}", soft_wrap=True)
    if failed:
        raise typer.Exit(EXIT_CANNOT_RUN)


def register(app: typer.Typer) -> None:
    app.command("import", no_args_is_help=True)(handle_errors(import_))
