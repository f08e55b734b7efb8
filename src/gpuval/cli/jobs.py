"""`gpuval jobs status|logs|wait|cancel|diagnose JOB --on ENGINE`: follow a job on any engine, and find the node
that makes a running job slow or stuck (`diagnose`; `probe` is what diagnose runs inside the job on each node,
hidden: nobody types it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

import typer

from gpuval.cli._common import (
    ON_HELP, OPT_HELP, RESULTS_HELP, baseline_files, baseline_option, command_group, console, err_console,
    handle_errors, parse_options, print_json, profile_option, writable_file,
)

if TYPE_CHECKING:
    from gpuval.diagnosis.job_diagnosis import JobDiagnosis, Retest
    from gpuval.engines.base import Engine
    from gpuval.fleet.act.retests import RetestRequest
    from gpuval.fleet.run.outcome import RoundLog

jobs_app = command_group("Follow jobs: status, logs, wait, cancel; diagnose a slow or stuck one.")


def _engine(on: str, opt: Optional[List[str]]) -> Engine:
    """The engine, which says on standard error what it did not use (a job record that is not the live job's)."""
    from gpuval.cli.render import inert
    from gpuval.engines import get_engine

    engine = get_engine(on, parse_options(opt))
    engine.say = lambda note: err_console.print(f"note: {inert(note)}", soft_wrap=True)
    return engine


def status(job: str = typer.Argument(..., help="Job id, as `gpuval submit` printed it."),
           on: str = typer.Option(..., "--on", help=ON_HELP),
           opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """The job's state: pending, running, succeeded, failed, cancelled or unknown; a failed job's with the lines of
    its output that say why, and where the output is."""
    from gpuval.cli.render import job_failure_lines, job_status_line

    engine = _engine(on, opt)
    found = engine.explain(engine.status(job))
    if as_json:
        print_json(found.model_dump(mode="json"))
    else:
        console.print(job_status_line(found))
        for line in job_failure_lines(found):
            console.print(line, soft_wrap=True)


def logs(job: str = typer.Argument(..., help="Job id."),
         on: str = typer.Option(..., "--on", help=ON_HELP),
         opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
         follow: bool = typer.Option(False, "--follow", "-f", help="Print the output as the job writes it, until "
                                     "the job ends (Azure ML: its live stream)."),
         as_json: bool = typer.Option(False, "--json", help="Print {job_id, engine, output} as JSON.")) -> None:
    """The job's output (all processes' stdout and stderr, as the engine keeps it)."""
    import sys

    engine = _engine(on, opt)
    if as_json:
        print_json({"job_id": job, "engine": engine.name, "output": engine.logs(job)})
    elif follow:
        engine.follow(job, sys.stdout)
    else:
        sys.stdout.writelines(engine.log_lines(job))  # line by line: a big job's output is never one string


def wait(job: str = typer.Argument(..., help="Job id."),
         on: str = typer.Option(..., "--on", help=ON_HELP),
         opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
         timeout: Optional[float] = typer.Option(None, "--timeout", help="Give up after this many seconds."),
         as_json: bool = typer.Option(False, "--json", help="Print the status and parsed results as JSON."),
         results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP)) -> None:
    """Wait for the job to end, then print its state and the results read from its output."""
    from gpuval.cli.render import print_outcome
    from gpuval.workloads.base import collect

    engine = _engine(on, opt)
    outcome = collect(engine, job, engine.wait(job, timeout), results)
    print_outcome(outcome, console, as_json)
    raise typer.Exit(outcome.exit_code)


def cancel(job: str = typer.Argument(..., help="Job id."),
           on: str = typer.Option(..., "--on", help=ON_HELP),
           opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print {job_id, engine, cancelled} as JSON.")) -> None:
    """Ask the engine to stop the job."""
    engine = _engine(on, opt)
    engine.cancel(job)
    if as_json:
        print_json({"job_id": job, "engine": engine.name, "cancelled": True})
    else:
        console.print(f"{engine.name} job {job}: cancel requested")


def diagnose(
    job: str = typer.Argument(..., help="A running job you may start a process in: Slurm, only your own (Slurm "
                              "refuses a step in another user's job, to root too); Kubernetes, one in a namespace "
                              "where you may exec into pods (NAMESPACE/KIND/NAME)."),
    on: str = typer.Option(..., "--on", help=ON_HELP + " (azureml cannot reach inside a job: refused)"),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write the HTML page here [default: "
                                          "reports/job-RUN.html in gpuval's data directory]."),
    watch: bool = typer.Option(False, "--watch", help="Diagnose again every --interval seconds while the job "
                               "runs, for at most --watch-for seconds; the last diagnosis is the one kept."),
    interval: float = typer.Option(30.0, "--interval", min=1.0, help="With --watch: seconds between diagnoses."),
    watch_for: float = typer.Option(600.0, "--watch-for", min=1.0, help="With --watch: stop after this long."),
    stall: float = typer.Option(60.0, "--stall", min=1.0, help="Seconds without progress of any rank that make "
                                "the job hung."),
    sku: Optional[str] = typer.Option(None, "--sku", help="VM size of the job's nodes: its InfiniBand HCAs make "
                                      "TCP sockets a failure, its all_reduce band judges the job's bus bandwidth, "
                                      "and the re-test judges against its figures."),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    ras: bool = typer.Option(True, "--ras/--no-ras", help="Ask NCCL RAS on each node (NCCL 2.24+)."),
    stacks: bool = typer.Option(True, "--stacks/--no-stacks", help="Read each rank's Python stacks (py-spy, "
                                "else the rank's own faulthandler dump)."),
    flight: bool = typer.Option(True, "--flight/--no-flight", help="Get each rank's PyTorch Flight Recorder dump "
                                "where the ranks of a node made no progress for --stall seconds."),
    node_timeout: float = typer.Option(10.0, "--node-timeout", min=1.0, help="Seconds each node may take for "
                                       "one rank's stacks and for RAS."),
    exclude: bool = typer.Option(False, "--exclude", help="Move the job off the nodes its diagnosis nominates, "
                                 "before any --retest (Slurm: requeue it without them; Kubernetes: keep its pods off "
                                 "them); where the engine may not, print the exclude list and how to send it again."),
    retest: bool = typer.Option(False, "--retest", help="Re-test the suspects with known-good partners (a fleet "
                                "check) and drain each suspect that fails it; the only way diagnose changes a node."),
    links: bool = typer.Option(False, "--links", help="With --retest: re-test the job's links (what a communication "
                               "slowdown nominates: its nodes, with partners from outside the job), which names the "
                               "node or the link."),
    partners: Optional[str] = typer.Option(None, "--partners", help="With --retest: the partners, a node list "
                                           "[default: idle nodes outside the job, else the job's own other nodes "
                                           "once it has ended]."),
    size: Optional[str] = typer.Option(None, "--size", help="With --retest: message size of its tests [default: "
                                       "the fleet check's]."),
    cut: float = typer.Option(0.03, "--cut", help="With --retest: shortfall judged slow (as `fleet check --cut`)."),
    queue_timeout: float = typer.Option(3600.0, "--queue-timeout", help="With --retest: seconds its tests may wait "
                                        "for their nodes (the job's own nodes are free once it ends)."),
    max_samples: int = typer.Option(128, "--max-samples", min=1, help="With --retest: the most samples per test "
                                    "where the measured noise calls for more (as `fleet check --max-samples`)."),
    poll: float = typer.Option(10.0, "--poll", help="With --retest: seconds between job status polls (as `fleet "
                               "check --poll`)."),
    drain: bool = typer.Option(True, "--drain/--no-drain", help="With --retest: drain (Slurm) or taint "
                               "(Kubernetes) a suspect that fails its re-test."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the probe each node would run; send nothing."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Find the node that makes a running job slow or stuck: its stragglers (gpuval.hooks' step records), a hang
    and the ranks it waits for (each rank's state and stacks, NCCL RAS), each node's NCCL network and driver events
    since the job started. Its symptoms only nominate nodes; --retest gives the verdict, --exclude moves the job off
    them. Exit 0 diagnosed, 1 a suspect failed its re-test, 2 could not diagnose (the job ended, unknown, out of
    reach), re-test or move the job."""
    from gpuval.baselines import baseline_source
    from gpuval.cli.render import diagnosis_lines
    from gpuval.collectives.sizes import parse_size
    from gpuval.errors import UsageError
    from gpuval.report.job import default_job_report_path, write_job_report
    from gpuval.results import save_results
    from gpuval.results.model import new_run_id
    from gpuval.workloads.diagnose.act import act_exit, exclude as move_off
    from gpuval.workloads.diagnose.records import job_records
    from gpuval.workloads.diagnose.run import (
        DiagnoseRequest, diagnose as run_diagnosis, expected_hcas, render_probes, watch as rewatch,
    )

    engine = _engine(on, opt)
    writable_file(report)
    files = baseline_files(baseline, profile)
    found = baseline_source(files)(sku)
    req = DiagnoseRequest(job, new_run_id(), stall, expected_hcas(found), ras, stacks, node_timeout, baseline=found,
                          flight=flight)
    if links and not retest:
        raise UsageError("--links goes with --retest: it says what the re-test takes (the job's links)")
    again = None
    if retest:  # a bad re-test option is refused before any node is probed, not after the diagnosis
        from gpuval.fleet.act.retests import RetestRequest, check_request

        again = RetestRequest(
            on=on, run_id=req.run_id, options=parse_options(opt), partners=partners, job_id=job, sku=sku,
            baselines=files, size=parse_size(size) if size else None, cut=cut, max_samples=max_samples,
            queue_timeout_s=queue_timeout, poll_s=poll, drain=drain, results=results)
        check_request(again)
    if dry_run:
        for call in render_probes(engine, req):
            typer.echo(call.text(), nl=False)
        return
    say = (lambda line: None) if as_json else (lambda line: console.print(line, soft_wrap=True))
    diag = rewatch(engine, req, interval, watch_for, lambda d: say(diagnosis_lines(d)[0])) if watch \
        else run_diagnosis(engine, req)
    if exclude:  # first: the job goes on without its suspects while they are re-tested
        diag.exclusion = move_off(engine, diag)
    if again is not None:
        diag.retest = _retest(diag, again, links, engine, sku, lambda log: say(f"  re-test {log.describe()}"))
    save_results(job_records(diag), results)
    page = write_job_report(diag, report or default_job_report_path(req.run_id))
    if as_json:
        print_json({**diag.to_json(), "report": str(page)})
    else:
        for line in diagnosis_lines(diag):
            console.print(line, soft_wrap=True)
        console.print(f"report: {page}")
    raise typer.Exit(act_exit(diag))


def _retest(diag: JobDiagnosis, again: RetestRequest, links: bool, engine: Engine, sku: Optional[str],
            on_round: Callable[[RoundLog], None]) -> Retest:
    """The fleet's re-test of what the diagnosis gives it (workloads.diagnose.act.retest_targets: its suspects, or
    with `links` the job's links), as the diagnosis reports it; one that cannot start is said in its place."""
    from dataclasses import replace

    from gpuval.errors import UsageError
    from gpuval.fleet.act.retests import retest_links, retest_suspects
    from gpuval.workloads.diagnose.act import not_retested, retest_targets

    nodes, why = retest_targets(diag, links)
    if not nodes:
        return not_retested(again.run_id, why)
    run = retest_links if links else retest_suspects
    try:
        found = run(replace(again, job_nodes=sorted(diag.probed), suspects=nodes), on_round, engine.site(sku))
    except UsageError as exc:  # no known-good partner: the diagnosis is still shown and kept
        return not_retested(again.run_id, str(exc))
    return found.for_diagnosis(diag.job_id)


def probe(
    job: Optional[str] = typer.Option(None, "--job", help="The job's id as its ranks see it (SLURM_JOB_ID) "
                                      "[default: every rank here]."),
    since: Optional[float] = typer.Option(None, "--since", help="The job's start, Unix seconds: older ranks and "
                                          "events are left out."),
    ras: bool = typer.Option(True, "--ras/--no-ras", help="Ask NCCL RAS here."),
    stacks: bool = typer.Option(True, "--stacks/--no-stacks", help="Read each rank's stacks."),
    flight: bool = typer.Option(True, "--flight/--no-flight", help="Get the ranks' Flight Recorder dumps where none "
                                "made progress for --stall seconds."),
    stall: float = typer.Option(60.0, "--stall", min=1.0, help="Seconds without progress that make a rank hung."),
    timeout: float = typer.Option(10.0, "--timeout", min=1.0, help="Seconds for one rank's stacks and for RAS."),
    uid: Optional[int] = typer.Option(None, "--uid", min=0, help="The job's owner: only this user's ranks are read "
                                      "[default: this process's user]."),
) -> None:
    """What a job's diagnosis asks of this node, printed as `gpuval-probe` lines (run inside the job by
    `gpuval jobs diagnose`)."""
    import sys
    from datetime import datetime, timezone

    from gpuval.workloads.diagnose.probe import probe_lines, probe_node

    start = datetime.fromtimestamp(since, timezone.utc) if since is not None else None
    sys.stdout.writelines(probe_lines(probe_node(job, start, ras=ras, stacks=stacks, timeout_s=timeout, uid=uid,
                                                 flight=flight, stall_s=stall)))


def register(app: typer.Typer) -> None:
    for func in (status, logs, wait, cancel, diagnose):
        jobs_app.command(func.__name__, no_args_is_help=True)(handle_errors(func))
    jobs_app.command("probe", hidden=True)(handle_errors(probe))
    app.add_typer(jobs_app, name="jobs")
