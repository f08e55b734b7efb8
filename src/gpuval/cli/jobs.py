"""`gpuval jobs status|logs|wait|cancel JOB --on ENGINE`: follow a job on any engine."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, command_group, console, handle_errors, print_json
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED, UsageError

ON_HELP = "Engine: local, slurm, kubernetes or azureml."
OPT_HELP = "Engine option KEY=VALUE (repeat): e.g. namespace=gpu (kubernetes), workspace=ws (azureml)."

jobs_app = command_group("Follow jobs submitted with `gpuval submit`: status, logs, wait, cancel.")


def parse_options(items: Optional[List[str]]) -> dict[str, object]:
    """KEY=VALUE pairs; a value starting with [ or { is read as YAML (lists, maps)."""
    import yaml

    options: dict[str, object] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--opt {item!r}: use KEY=VALUE")
        try:
            options[key] = yaml.safe_load(value) if value[:1] in "[{" else value
        except yaml.YAMLError:
            raise UsageError(f"--opt {item!r}: the value is not valid YAML") from None
    return options


def _engine(on: str, opt: Optional[List[str]]):
    from gpuval.engines import get_engine

    return get_engine(on, parse_options(opt))


def print_status(status, as_json: bool) -> None:
    """One line for people, the JobStatus object for machines."""
    if as_json:
        print_json(status.model_dump(mode="json"))
        return
    code = "" if status.exit_code is None else f", exit code {status.exit_code}"
    detail = f" ({status.detail})" if status.detail else ""
    console.print(f"{status.engine} job {status.job_id}: [bold]{status.state.value}[/] "
                  f"[dim]({status.native_state or '-'} from {status.source or '-'}{code})[/]{detail}")


def finish(engine, job_id: str, status, as_json: bool, results_path: Optional[Path]) -> None:
    """Read the ended job's results, save and print them; exit 1 on a failed check, 2 on a job that did not succeed."""
    from gpuval.results import save_results
    from gpuval.workloads.outcome import collect

    outcome = collect(engine, job_id, status)
    if outcome.results:
        save_results(outcome.results, results_path)
    if as_json:
        print_json({"job": status.model_dump(mode="json"),
                    "results": [r.model_dump(mode="json") for r in outcome.results], "note": outcome.note})
    else:
        print_status(status, False)
        for record in outcome.results:
            best = record.metric("busbw") or (record.metrics[0] if record.metrics else None)
            figure = f"{best.name} {best.value:.2f} {best.unit}" if best and best.value is not None else ""
            console.print(f"  {record.kind} {record.name}: [bold]{record.status.value}[/] {figure} {record.reason}")
        if outcome.note:
            console.print(f"  [dim]{outcome.note}[/]")
    if outcome.failed_check:
        raise typer.Exit(EXIT_FAILED)
    if status.state.value != "succeeded":
        raise typer.Exit(EXIT_CANNOT_RUN)


def status(job: str = typer.Argument(..., help="Job id, as `gpuval submit` printed it."),
           on: str = typer.Option(..., "--on", help=ON_HELP),
           opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """The job's state: pending, running, succeeded, failed, cancelled or unknown."""
    print_status(_engine(on, opt).status(job), as_json)


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
    engine = _engine(on, opt)
    finish(engine, job, engine.wait(job, timeout), as_json, results)


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
