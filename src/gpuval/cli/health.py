"""`gpuval health`: every node check with a verdict, a fault code and a one-line reason; `--quick` for Slurm's
HealthCheckProgram, `--drain` to act on the node in its scheduler, `--prometheus` for node_exporter."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from gpuval.cli._common import (
    RESULTS_HELP, console, err_console, fail, handle_errors, print_json, profile_option, recorded_option, sku_option,
    writable_file,
)
from gpuval.cli._common import ALLOW_BUSY_HELP, baseline_files
from gpuval.errors import EXIT_CANNOT_RUN, UsageError

QUICK_HELP = ("Only read (NVML state and counters, InfiniBand ports, the kernel log) and fold in this node's last "
              "full result; measures nothing: Slurm's HealthCheckProgram, the DaemonSet. Saves its records only "
              "with --results.")
DRAIN_HELP = ("Act on this node in its scheduler: fail drains (Slurm, reason 'gpuval: CODES RUN') or taints "
              "(Kubernetes); pass/warn lifts only gpuval's own drain or taint; error/skipped change nothing.")
NODE_HELP = ("The scheduler's name of this node [default: GPUVAL_NODE_NAME (every gpuval pod has it), else "
             "SLURMD_NODENAME, else the host name].")
SCHEDULER_HELP = "slurm or kubernetes [default: slurm under slurmd or in a job, kubernetes in a pod]."
MAX_AGE_HELP = "--quick: a last full result older than this (7d, 12h, 3600) is reported, not judged [default: 7d]."
MAX_DRAIN_HELP = ("--drain: the most nodes gpuval may hold drained at once, counted cluster-wide in the scheduler: "
                  "N nodes, a share of the cluster's nodes (5%, at least 2), 0 (report, drain nothing) or all (no "
                  "cap); past it the node is not drained and the run says why [default: GPUVAL_MAX_DRAIN, else 5%].")
PROMETHEUS_HELP = "Write the run's records as node_exporter textfile metrics to FILE (*.prom), atomically."


def health(
    sku: Optional[str] = sku_option(),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeat for several)."),
    baseline: Optional[List[Path]] = typer.Option(None, "--baseline", help="Your own baseline YAML (repeatable)."),
    profile: Optional[Path] = profile_option(),
    recorded: Optional[str] = recorded_option(),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Best of N runs for the NCCL bandwidth checks."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of the checks' Result records (with "
                                 "--drain: an object, its results and the node action)."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
    since: Optional[str] = typer.Option(None, "--since", help="Xid window start: 'boot', a span (24h, 30m, 7d) or a "
                                        "time (2026-11-23T10:00, UTC) [default: the last xid pass here, else boot]."),
    dcgm: Optional[int] = typer.Option(None, "--dcgm", min=1, max=3, help="Also run NVIDIA DCGM's dcgmi diag at "
                                       "this level (1, 2 or 3); without dcgmi installed the dcgm_diag check is "
                                       "skipped and says so."),
    quick: bool = typer.Option(False, "--quick", help=QUICK_HELP),
    drain: bool = typer.Option(False, "--drain", help=DRAIN_HELP),
    node: Optional[str] = typer.Option(None, "--node", help=NODE_HELP),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="slurm|kubernetes", help=SCHEDULER_HELP),
    max_age: str = typer.Option("7d", "--max-age", help=MAX_AGE_HELP),
    max_drain: Optional[str] = typer.Option(None, "--max-drain", metavar="N|P%|all", help=MAX_DRAIN_HELP),
    prometheus: Optional[Path] = typer.Option(None, "--prometheus", metavar="FILE", help=PROMETHEUS_HELP),
    allow_busy: bool = typer.Option(False, "--allow-busy", help=ALLOW_BUSY_HELP),
) -> None:
    """Check this node: GPUs, ECC, clocks, PCIe, NVLink, InfiniBand, NCCL transport and bandwidth, topology."""
    from gpuval.cli.render import check_line, health_heading, inert, styled, tally
    from gpuval.engines import node_client
    from gpuval.node.kernel_log import parse_since
    from gpuval.operate import node_state, prometheus as metrics
    from gpuval.operate.brake import site_cap
    from gpuval.results import new_run_id
    from gpuval.workloads.health import last_full
    from gpuval.workloads.health.finish import finish_run
    from gpuval.workloads.health.run import HealthRequest, run_health

    try:
        window = parse_since(since) if since else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def say(line: str) -> None:
        if not as_json:
            console.print(line)

    # Everything that can be refused is refused before the suite runs, not after minutes of measuring.
    age = last_full.parse_age(max_age)
    chosen_node = node_state.check_node(node) if node else None
    client = node_client(scheduler) if drain else None  # the scheduler named, else the one found here
    if max_drain is not None and not drain:
        raise UsageError("--max-drain caps --drain: give both, or neither")
    cap = site_cap(max_drain) if drain else None
    if prometheus:
        writable_file(metrics.check_textfile(prometheus))
    req = HealthRequest(new_run_id(), recorded, sku, tuple(check) if check else None,
                        baseline_files(baseline, profile), results, repeats,
                        quick=quick, node=chosen_node, max_age=age, since=window, dcgm=dcgm, allow_busy=allow_busy,
                        defer_store=drain)
    run = run_health(req, lambda ctx: say(health_heading(ctx)), lambda r: say(check_line(r)))
    done = finish_run(run, client, prometheus, cap)  # the node first, then what was left to save
    for problem in done.problems:
        err_console.print(f"[yellow]warning:[/] {inert(problem)}", soft_wrap=True)
    if as_json:
        rows: Any = [r.model_dump(mode="json") for r in run.records]
        print_json({"results": rows, "node_action": done.action.to_json() if done.action else None,
                    **({"node_action_error": done.action_error} if done.action_error else {}),
                    **({"evidence": str(done.evidence)} if done.evidence else {})} if drain else rows)
    else:
        _summary(run, done.action, tally, styled, say)
        if done.evidence:
            say(f"  [dim]evidence of node {inert(run.node)}: {inert(done.evidence)} (replays as gpuval health "
                "--recorded)[/]")
    if done.action_error:
        raise fail(done.action_error, EXIT_CANNOT_RUN)
    raise typer.Exit(run.exit_code)


def _summary(run: Any, action: Any, tally: Any, styled: Any, say: Any) -> None:
    """The tally, THE node verdict with its exit code, what a full run kept for --quick, what was done to the node."""
    from gpuval.cli.render import inert
    from gpuval.workloads.health import last_full
    from gpuval.workloads.health.finish import BRAKE_RECORD

    verdict = run.verdict
    say("  " + tally(r.status for r in run.records))
    say(f"  verdict: {styled(verdict.status, verdict=True)}: {inert(verdict.reason)} (exit {verdict.exit_code})")
    if run.kept is not None:
        path = last_full.path_for(run.node)
        say(f"  [dim]last full result of node {inert(run.node)} kept for --quick: {run.kept.verdict.value} "
            f"({inert(path)})[/]")
    elif run.kept_note:
        say(f"  [dim]last full result of node {inert(run.node)}: {inert(run.kept_note)}[/]")
    if action is not None:
        say(f"  {action.scheduler} node {inert(action.node)}: [bold]{action.action}[/] ({inert(action.detail)})")
    advice = next((r.data.details.get("advice") for r in run.records if r.name == BRAKE_RECORD), None)
    if advice:
        say(f"  [yellow]drain brake:[/] {inert(advice)}")


def register(app: typer.Typer) -> None:
    app.command("health")(handle_errors(health))
