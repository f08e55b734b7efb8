"""`gpuval jobs status|logs|wait|cancel JOB --on ENGINE`: follow a job on any engine."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import (
    ON_HELP, OPT_HELP, RESULTS_HELP, command_group, console, handle_errors, parse_options, print_json,
)

jobs_app = command_group("Follow jobs submitted with `gpuval submit`: status, logs, wait, cancel.")


def _engine(on: str, opt: Optional[List[str]]):  # type: ignore[no-untyped-def]
    from gpuval.engines import get_engine

    return get_engine(on, parse_options(opt))


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


def register(app: typer.Typer) -> None:
    for func in (status, logs, wait, cancel):
        jobs_app.command(func.__name__, no_args_is_help=True)(handle_errors(func))
    app.add_typer(jobs_app, name="jobs")
