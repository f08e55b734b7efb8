"""THE training Result factory: rank 0's TrainReport as a Result record, for runs here and ranks of an engine's
job alike. `where` is always given."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuval.results import Metric, Result, Status, Where
from gpuval.workloads.train.worker import TrainReport


def train_record(report: TrainReport, *, where: Where, run_id: str, started: datetime, params: dict[str, Any],
                 base: TrainReport | None = None) -> Result:
    """The Result of one job size: FAIL when the loss did not go down (gradients or ranks are broken); the NCCL
    transport verdict (gpuval.baselines.transport) when it warns or fails (sockets on a node with HCAs); with a
    `base`, the scaling efficiency against it."""
    metrics = [
        Metric(name="samples_per_s", value=report.samples_per_s, unit="samples/s"),
        Metric(name="step_time_p50_s", value=report.step_time_p50_s, unit="s"),
        Metric(name="step_time_p95_s", value=report.step_time_p95_s, unit="s"),
        Metric(name="loss_first", value=report.loss_first),
        Metric(name="loss_last", value=report.loss_last),
        Metric(name="world_size", value=report.world_size, unit="ranks"),
    ]
    if base is not None:
        eff = report.samples_per_s / (base.samples_per_s * report.world_size / base.world_size)
        metrics.append(Metric(name="scaling_efficiency", value=eff, unit="ratio"))
    status, reason = Status.PASS, ""
    if not report.loss_last < report.loss_first:
        status = Status.FAIL
        reason = f"loss did not go down ({report.loss_first:.4f} -> {report.loss_last:.4f})"
    elif report.transport_status in (Status.WARN, Status.FAIL):
        status, reason = Status(report.transport_status), f"NCCL transport: {report.transport_reason}"
    return Result(
        run_id=run_id, kind="train", name="resnet-synthetic", started_at=started,
        finished_at=datetime.now(timezone.utc), where=where, params=params, metrics=metrics, status=status,
        reason=reason,
        data={"pids": report.pids, "hosts": report.hosts, "device": report.device,
              "nccl_transport": report.nccl_transport, "transport_status": report.transport_status,
              "transport_reason": report.transport_reason, "timed_steps": report.timed_steps},
    )
