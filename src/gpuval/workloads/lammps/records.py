"""THE LAMMPS Result factory: one finished run (a LammpsRun read from log.lammps) as a Result record, for runs
gpuval made (a sweep here, rank 0 of a job) and logs it imports. `where` is always given."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuval.results import Metric, Result, Status, Where
from gpuval.workloads.lammps.log import LammpsRun

_LOG_METRICS = (("timesteps_per_s", "timesteps/s"), ("atom_steps_per_s", "atom-step/s"), ("loop_time_s", "s"),
                ("tau_per_day", "tau/day"), ("ns_per_day", "ns/day"))


def efficiency(base: LammpsRun, run: LammpsRun) -> float:
    """Strong-scaling parallel efficiency against the smallest rank count: speed-up / rank ratio."""
    return ((run.timesteps_per_s or 0.0) / (base.timesteps_per_s or 1.0)) * (base.procs / run.procs)


def log_metrics(run: LammpsRun) -> list[Metric]:
    """The figures of a run as metrics: one set of names and units for runs gpuval made and logs it imports."""
    return [Metric(name=key, value=float(value), unit=unit) for key, unit in _LOG_METRICS
            if isinstance(value := getattr(run, key), (int, float))]


def lammps_record(run: LammpsRun, *, name: str, where: Where, run_id: str, started: datetime,
                  params: dict[str, Any], base: LammpsRun | None = None, warning: str = "",
                  finished: datetime | None = None) -> Result:
    """The Result of one run: the log's figures, and in a sweep speed-up and efficiency against its `base`. WARN
    with `warning` (e.g. oversubscribed cores: the figures understate), ERROR when the log holds no figure."""
    metrics = log_metrics(run)
    if base is not None and run.timesteps_per_s and base.timesteps_per_s:
        metrics += [Metric(name="speedup", value=run.timesteps_per_s / base.timesteps_per_s, unit="x"),
                    Metric(name="parallel_efficiency", value=efficiency(base, run), unit="ratio")]
    status, reason = (Status.WARN, warning) if warning else (Status.PASS, "")
    if not metrics:
        status, reason = Status.ERROR, "the log has no Performance line: the run did not finish"
    return Result(
        run_id=run_id, kind="lammps", name=name, started_at=started, finished_at=finished or datetime.now(timezone.utc),
        where=where, params=params, metrics=metrics, status=status, reason=reason, data=run.to_json(),
    )
