"""`gpuval fleet check --on ENGINE (--nodes N | --nodelist LIST)`: which nodes, or which links, drag the fleet down.

The check plans rounds of tests (every node's own test, then pairs, then the full scale), runs each round as jobs
on the engine, reads every job's output back per node and ends with a verdict per node and per link. `node-test`
and `rank-test` are what those jobs run on the nodes (hidden: nobody types them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from gpuval.cli._common import (
    ON_HELP, OPT_HELP, RESULTS_HELP, baseline_files, baseline_option, command_group, console, handle_errors,
    key_values, parse_options, print_json, profile_option,
)

fleet_app = command_group("Check a fleet of nodes: find the slow or broken nodes and links, and take them out.")


def check(
    on: str = typer.Option(..., "--on", help=ON_HELP + " (azureml cannot place tests on named nodes: refused)"),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Check N nodes the engine has free (Slurm: "
                                        "idle nodes; Kubernetes: Ready nodes of the SKU's instance type)."),
    nodelist: Optional[str] = typer.Option(None, "--nodelist", "-w", help="Check these nodes: a Slurm host list "
                                           "(gpu-[01-64]) or Kubernetes node names, comma-separated."),
    sku: Optional[str] = typer.Option(None, "--sku", help="VM size: the expected busbw at 1, 2 and N nodes and the "
                                      "network preset [default: judged against the other tests only]."),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    wait: bool = typer.Option(False, "--wait", help="Run the rounds here and print the verdicts [default: start the "
                              "check in the background and print its run id and log]."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON (nodes with host and status, "
                                 "links, evidence, exclude list)."),
    drain: bool = typer.Option(False, "--drain", help="Take failing nodes out of the pool: Slurm drain (reason "
                               "'gpuval: ...'), Kubernetes taint and label; at most --max-drain."),
    max_drain: Optional[str] = typer.Option(None, "--max-drain", metavar="N|P%|all", help="The most nodes gpuval "
                                            "may hold drained at once, counted cluster-wide: N nodes, a share of the "
                                            "cluster (5%, at least 2), 0 (report, drain nothing) or all (no cap); a "
                                            "fault code on more of the checked nodes than that is one finding and "
                                            "drains none of them [default: GPUVAL_MAX_DRAIN, else 5%]."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print round 0's job and a pair test's job as the engine "
                                 "would get them; send nothing."),
    size: Optional[str] = typer.Option(None, "--size", help="Message size of every test [default: the size the "
                                       "SKU's figures were measured at, else 1G; 1M on CPU ranks]."),
    iters: Optional[int] = typer.Option(None, "-n", "--iters", min=1, help="Timed iterations per sample [default: "
                                        "20 on GPUs, 5 on CPU ranks]."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="Untimed iterations before each sample "
                                         "[default: 5 on GPUs, 1 on CPU ranks]."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", min=0, help="GPUs per node [default: the "
                                                "SKU's, else 0]."),
    procs_per_node: Optional[int] = typer.Option(None, "--procs-per-node", min=1, help="Ranks per node in pair and "
                                                 "group tests [default: one per GPU, at least one]."),
    node_procs: Optional[int] = typer.Option(None, "--node-procs", min=1, help="Ranks of the in-node all_reduce "
                                             "[default: the node's GPUs, 2 without GPUs]."),
    backend: str = typer.Option("auto", "--backend", help="auto (nccl on GPUs, gloo on CPU), nccl or gloo."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds a test may run before it counts as hung."),
    queue_timeout: float = typer.Option(3600.0, "--queue-timeout", help="Seconds a job may wait in the queue "
                                        "before its tests count as 'could not run'."),
    cut: float = typer.Option(0.03, "--cut", help="Shortfall under the fleet's typical figure judged slow "
                              "(0.03: 3%; raise it on a noisy test rig)."),
    samples: Optional[str] = typer.Option(None, "--samples", help="Samples (-N cycles) per test as SUITE,SCREEN,RETEST: "
                                          "node tests, first pairs, re-tests [default: 32,8,32 on GPUs, 8,4,8 on CPU ranks]."),
    max_samples: int = typer.Option(128, "--max-samples", min=1, help="The most samples per test where the fleet's "
                                    "measured noise calls for more than --samples (bounds a check's time on a noisy "
                                    "test rig; a test left short is judged as not sure, never as a pass)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random pairings (same seed, same results: same rounds)."),
    max_rounds: int = typer.Option(40, "--max-rounds", min=1, help="Stop after this many rounds."),
    switch_label: Optional[str] = typer.Option(None, "--switch-label", help="Kubernetes node label naming each "
                                               "node's switch, for topology-aware pairing [default: random]."),
    rack_label: Optional[str] = typer.Option(None, "--rack-label", help="Kubernetes node label naming each node's "
                                             "NVL72 rack (nvidia.com/gpu.clique) [default: the NVLink domain each "
                                             "node's fabric reports; Slurm: topology/block]."),
    image: Optional[str] = typer.Option(None, "--image", help="Container image of the test jobs."),
    env: Optional[List[str]] = typer.Option(None, "--env", "-x", help="NAME=VALUE for every test job (repeat)."),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    poll: float = typer.Option(10.0, "--poll", help="Seconds between job status polls once a round's jobs are 8 s "
                               "old (polled at 0, 2, 4 and 8 s first; a shorter --poll polls at that pace from "
                               "the start)."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
    run_id: Optional[str] = typer.Option(None, "--run-id", hidden=True),
) -> None:
    """Find the slow or broken nodes and links of a fleet, round by round; exit 1 when a node or link fails."""
    import sys
    from dataclasses import replace

    from gpuval.collectives.sizes import parse_size
    from gpuval.results import new_run_id
    from gpuval.fleet.run.request import CheckRequest, background_env, dry_run as render_first, run_check, start_background
    from gpuval.fleet.plan.terms import FleetConfig

    req = CheckRequest(
        on=on, run_id=run_id or new_run_id(), nodes=nodes, nodelist=nodelist, sku=sku,
        baselines=baseline_files(baseline, profile), options=parse_options(opt),
        size=parse_size(size) if size else None, iters=iters, warmup=warmup, backend=backend, timeout_s=timeout,
        queue_timeout_s=queue_timeout, poll_s=poll, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node,
        node_procs=node_procs, image=image, env=key_values([*(env or []), *background_env()], "--env"),
        switch_label=switch_label, rack_label=rack_label, drain=drain, max_drain=max_drain,
        samples=_samples(samples), config=replace(FleetConfig(), cut=cut, seed=seed, max_rounds=max_rounds,
                                                     max_samples=max_samples),
        results=results,
    )
    if dry_run:  # what is shown hides the jobs' secrets (a password in GPUVAL_DB, *TOKEN*, ...)
        shown = render_first(req)
        if as_json:
            print_json([{"title": title, "engine": r.engine, "files": r.shown} for title, r in shown])
            return
        for title, rendered in shown:
            typer.echo(f"# ==== {title}")
            typer.echo(rendered.shown_text(), nl=False)
        return
    if not wait:
        from gpuval.fleet.run.request import prepare

        prepare(req)  # every option checked here, before the background process starts
        pid, log = start_background(sys.argv[1:], req.run_id)
        if as_json:
            print_json({"run_id": req.run_id, "pid": pid, "log": str(log)})
        else:
            console.print(escape(f"fleet check {req.run_id} runs in the background (pid {pid}); its output: {log}; "
                                 f"its report when it ends: gpuval report --run {req.run_id}"))
        return

    def progress(log: Any) -> None:
        from gpuval.cli.render import inert

        if not as_json:
            console.print(f"  {inert(log.describe())}")  # it quotes lines the nodes printed

    if not as_json:
        console.print(f"[bold]gpuval fleet check[/] {escape(req.run_id)} on {escape(on)}")
    outcome = run_check(req, progress)
    if as_json:
        print_json(outcome.to_json())
    else:
        _print_outcome(outcome)
    raise typer.Exit(outcome.exit_code)


def retest(
    on: str = typer.Option(..., "--on", help="slurm or kubernetes: where the held nodes are."),
    nodelist: Optional[str] = typer.Option(None, "--nodelist", "-w", help="Re-test these of the nodes gpuval holds "
                                           "with a fleet code [default: every one]."),
    partners: Optional[str] = typer.Option(None, "--partners", help="Known-good partners in service (a Slurm host "
                                           "list or node names) [default: 3 free nodes the engine picks]."),
    as_json: bool = typer.Option(False, "--json", help="Print the actions and the checks' verdicts as JSON."),
    env: Optional[List[str]] = typer.Option(None, "--env", "-x", help="NAME=VALUE for every test job (repeat)."),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    queue_timeout: float = typer.Option(3600.0, "--queue-timeout", help="Seconds a job may wait in the queue "
                                        "before its tests count as 'could not run'."),
    poll: float = typer.Option(10.0, "--poll", help="Seconds between job status polls."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Re-test the nodes gpuval holds with FLEET_* codes as they were convicted (the same tests, sizes and samples,
    known-good partners) and lift each drain only when its re-test passes; exit 1 when one fails."""
    from gpuval.cli.render import inert
    from gpuval.fleet.act.retests import RetestRequest, retest_held
    from gpuval.results import new_run_id

    req = RetestRequest(on=on, run_id=new_run_id(), nodelist=nodelist, partners=partners, options=parse_options(opt),
                        env=key_values(env or [], "--env"), queue_timeout_s=queue_timeout, poll_s=poll,
                        results=results)
    done = retest_held(req, lambda log: None if as_json else console.print(f"  {inert(log.describe())}"))
    if as_json:
        print_json(done.to_json())
    else:
        if not done.actions:
            console.print(f"no node held by gpuval with a fleet code ({inert(on)})")
        for action in done.actions:
            console.print(f"  {action.action} {inert(action.node)}: {inert(action.detail)}")
        for note in done.notes:
            console.print(f"note: {inert(note)}")
        console.print(f"[dim]records: run {inert(done.run_id)} (gpuval report --run {inert(done.run_id)})[/]")
    raise typer.Exit(done.exit_code)


def _samples(text: Optional[str]) -> tuple[int, int, int] | None:
    """--samples 32,8,32 -> the planner's sample counts (suite, screen, re-test); None: the devices' defaults."""
    from gpuval.errors import UsageError

    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
        raise UsageError(f"--samples {text!r}: give three counts of at least 1, SUITE,SCREEN,RETEST (e.g. 32,8,32)")
    suite, screen, retest = (int(p) for p in parts)
    return suite, screen, retest


def _print_outcome(outcome: Any) -> None:
    """The verdicts; every value a node printed (names, reasons, fault codes) inert: text, never markup nor a
    terminal control."""
    from gpuval.cli.render import inert, styled, tally
    from gpuval.results.model import Status, severity

    found = outcome.verdicts
    console.print(f"verdict {styled(outcome.status, verdict=True)} after {found.rounds} rounds: "
                  f"{tally(v.status for v in found.nodes.values())} nodes")
    shown = [v for v in found.nodes.values() if v.status is not Status.PASS]
    for v in sorted(shown, key=lambda v: -severity(v.status)):  # fail, error, warn, skipped
        codes = " ".join(outcome.codes.get(v.subject) or [])
        console.print(f"  {styled(v.status, f'{v.status.value.upper():7}')} {inert(f'{v.subject:20}')} "
                      f"{inert(codes)}  [dim]{inert(v.reason)}[/]")
    passed = len(found.nodes) - len(shown)
    if passed:
        console.print(f"  {styled('pass', 'PASS   ')} {passed} other node{'s' if passed != 1 else ''}")
    for kind, items in (("links", found.links.values()), ("switch uplinks", found.uplinks.values()),
                        ("groups", found.groups)):
        bad = [v for v in items if v.status not in (Status.PASS, Status.SKIPPED)]
        if bad:
            console.print(f"{kind} not passing:")
            for v in bad:
                console.print(f"  {styled(v.status, f'{v.status.value.upper():7}')} {inert(v.subject)}  "
                              f"[dim]{inert(v.reason)}[/]")
    for note in found.notes:
        console.print(f"note: {inert(note)}")
    if outcome.failed:
        console.print(f"exclude ({outcome.engine}): [bold]{inert(outcome.exclude)}[/]")
    for action in outcome.actions:
        console.print(f"  {action.action} {inert(action.node)}: {inert(action.detail)}")
    console.print(f"[dim]records: run {inert(outcome.run_id)} (gpuval report --run {inert(outcome.run_id)})[/]")


WORKER = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def node_test(ctx: typer.Context) -> None:
    """A fleet check's node test on this node (what the check's jobs run: its flags are a NodeTestRequest's)."""
    from gpuval.fleet.run.node_worker import NodeTestRequest, node_test as run

    raise typer.Exit(run(NodeTestRequest.parse(ctx.args)))


def rank_test(ctx: typer.Context) -> None:
    """One rank of a fleet check's pair or group test (what the check's jobs run: its flags are a
    RankTestRequest's)."""
    from gpuval.fleet.run.node_worker import RankTestRequest, rank_test as run

    run(RankTestRequest.parse(ctx.args))


def register(app: typer.Typer) -> None:
    fleet_app.command("check", no_args_is_help=True)(handle_errors(check))
    fleet_app.command("retest")(handle_errors(retest))
    fleet_app.command("node-test", hidden=True, context_settings=WORKER)(handle_errors(node_test))
    fleet_app.command("rank-test", hidden=True, context_settings=WORKER)(handle_errors(rank_test))
    app.add_typer(fleet_app, name="fleet")
