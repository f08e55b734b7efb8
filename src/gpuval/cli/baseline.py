"""`gpuval baseline learn`: a site's own baseline, learned from gpuval's records of its healthy nodes
(docs/baselines.md, "A site's own bands")."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from gpuval.cli._common import command_group, console, db_option, err_console, handle_errors, print_json

baseline_app = command_group("Baselines from gpuval's own records.")

RESULTS_ARG = ("JSON Lines files of gpuval records (health, bench, a fleet check's) [default: the results store, "
               "--db].")
OUTPUT_HELP = ("The baseline file to write (whole or not at all). Where it is a file learned before, the drift from it "
               "is shown; a file there that gpuval did not learn is not overwritten.")
SHOWN_BAD = 5  # unreadable lines named on stderr; the rest are counted


def learn(
    results: Optional[List[Path]] = typer.Argument(None, metavar="RESULTS", help=RESULTS_ARG),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE", help=OUTPUT_HELP),
    since: Optional[str] = typer.Option(None, "--since", help="Only records started after: 30d, 12h, 2w or an ISO "
                                        "date."),
    sku: Optional[str] = typer.Option(None, "--sku", help="Learn the nodes of this VM size."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Learn the nodes of this GPU model (its NVML name, or a "
                                      "packaged model: a100_sxm4_40gb)."),
    driver: Optional[str] = typer.Option(None, "--driver", metavar="BRANCH", help="Learn the nodes of this driver "
                                         "branch (535)."),
    power_limit: Optional[float] = typer.Option(None, "--power-limit", metavar="W", help="Learn the nodes whose "
                                                "GPUs run at this enforced power limit."),
    min_nodes: int = typer.Option(8, "--min-nodes", min=2, help="Nodes a figure needs to be learned."),
    db: Optional[str] = db_option(),
    as_json: bool = typer.Option(False, "--json", help="Print what was learned (the file's content) as JSON."),
) -> None:
    """Learn a baseline (median, spread, warn and fail lines per figure) from the health, bench and fleet records
    of at least --min-nodes nodes of one SKU, GPU model, driver branch and power limit; bad nodes are left out and
    named. The file is an ordinary --baseline file."""
    from datetime import datetime, timezone

    from gpuval import __version__
    from gpuval.baselines.learn import Choice, learn as learn_bands
    from gpuval.baselines.learn_file import document, drift, previous, render, same_kind
    from gpuval.baselines.learn_read import read_files, read_store
    from gpuval.cli._common import writable_file
    from gpuval.cli.render import inert
    from gpuval.results.files import write_beside
    from gpuval.results.query import parse_when

    start = parse_when(since) if since else None
    writable_file(output)
    before = previous(output)  # refused before reading gigabytes: a file there that gpuval did not learn
    bad: list[str] = []
    reading = read_files(results, start, bad.append) if results else read_store(db, start, bad.append)
    for line in bad[:SHOWN_BAD]:
        err_console.print(f"[yellow]warning:[/] {inert(line)} (left out)", soft_wrap=True)
    if len(bad) > SHOWN_BAD:
        err_console.print(f"[yellow]warning:[/] {len(bad) - SHOWN_BAD} more lines that are no record left out")
    learned = learn_bands(reading, Choice(sku, gpu, driver, power_limit, min_nodes))
    if before is not None:
        same_kind(before, learned)
    moved = drift(before, learned) if before is not None else None
    content = document(learned, datetime.now(timezone.utc), __version__, dict(reading.versions), reading.older,
                       moved)
    path = write_beside(output.absolute().parent, output.name, render(content), folder_link=True)
    if as_json:
        print_json(content)
        return
    _summary(content, reading, moved, before.path if before else None, path, inert)


def _summary(content: dict[str, Any], reading: Any, moved: Any, old: str | None, path: Path, inert: Any) -> None:
    """What was learned, left out and moved, in words."""
    block = content["learned"]
    console.print(f"[bold]gpuval baseline learn[/]: {inert(content['description'])}")
    for who, why in block["excluded"].items():
        console.print(f"  [yellow]left out[/] {inert(who)}: {inert(why)}")
    for line in block["dropped"]:
        console.print(f"  [yellow]figure left out[/] {inert(line)}")
    for metric, facts in block["figures"].items():
        band = content["metrics"][metric]
        lines = ", ".join(f"{word} < {band[key]:g}" for key, word in (("warn_below", "warn"), ("fail_below", "fail"))
                          if key in band)
        console.print(f"  {metric:28} {facts['median']:g} {band['unit']} (robust sigma {facts['sigma']:.3g}; "
                      f"{lines}) from {facts['values']} {facts['per']} figures on {facts['nodes']} nodes, "
                      f"{facts['method']}")
    for metric, why in content["left_out"].items():
        console.print(f"  [dim]not learned: {inert(metric)}: {inert(why)}[/]")
    for other in block["other_populations"]:
        console.print(f"  [dim]another population, not learned: {inert(other)}[/]")
    said = [f"{reading.records} records of the checks learned from", block["several_runs"]]
    if reading.could_not_run:
        said.append(f"{sum(reading.could_not_run.values())} records that could not run (ERROR) left out")
    said += sorted(reading.unread)
    console.print("  [dim]" + inert("; ".join(said)) + "[/]")
    if moved is not None:
        console.print(f"  drift from {inert(old)}:")
        for d in moved:
            change = f" ({d.change_pct:+.1f}%)" if d.change_pct is not None else ""
            old_new = " -> ".join("-" if v is None else f"{v:g}" for v in (d.old, d.new))
            console.print(f"    {d.metric:28} {old_new} {d.unit}{change}: {d.words()}")
    console.print(f"wrote {inert(path)}: judge with gpuval health --baseline {inert(path)} (or validate, fleet "
                  "check, report)")


def register(app: typer.Typer) -> None:
    baseline_app.command("learn", no_args_is_help=True)(handle_errors(learn))
    app.add_typer(baseline_app, name="baseline")
