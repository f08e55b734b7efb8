"""`gpuval nodes`: what gpuval holds drained or tainted (or lifted into a re-test window), why, since when, with what
evidence, and what lifts it."""

from __future__ import annotations

from typing import Optional

import typer

from gpuval.cli._common import console, handle_errors, print_json


def nodes(
    on: Optional[str] = typer.Option(None, "--on", help="slurm or kubernetes [default: the scheduler found here]."),
    context: Optional[str] = typer.Option(None, "--context", help="Kubernetes: the kubeconfig context (the "
                                          "engine's option `context`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the nodes as a JSON array."),
) -> None:
    """List the nodes gpuval holds out of service, with why and what lifts each; exit 0 (none is an empty list)."""
    from rich.table import Table

    from gpuval.checks.suite import check_codes
    from gpuval.cli.render import inert
    from gpuval.engines import node_client
    from gpuval.operate.held import held_nodes
    from gpuval.workloads.health.last_full import state_dir
    from gpuval.workloads.health.run import quick_checks

    client = node_client(on, {"context": context} if context else None)  # --on checked here
    quick, health, state = {c.fault_code for c in quick_checks(None)}, check_codes(), state_dir()
    found = held_nodes(client)
    if as_json:
        print_json([h.to_json(state, quick, health) for h in found])
        return
    if not found:
        console.print(f"no node held out of service by gpuval ({client.scheduler})")
        return
    view = Table(show_edge=False, pad_edge=False, title=f"held by gpuval ({client.scheduler})", title_justify="left")
    for name in ("node", "codes", "action", "run", "since", "evidence", "lifted by"):
        view.add_column(name)
    for h in found:
        row = h.to_json(state, quick, health)  # the one row, as --json prints it
        view.add_row(inert(h.node), inert(" ".join(h.codes)), inert(" ".join(h.actions)), inert(h.run_id),
                     f"{h.since:%Y-%m-%d %H:%M}" if h.since else "", inert(row["evidence"]), inert(row["lifts"]))
    console.print(view)


def register(app: typer.Typer) -> None:
    app.command("nodes")(handle_errors(nodes))
