"""The training Result factory: `where` as given, the loss verdict, and the NCCL transport verdict (the one
gpuval.baselines.transport gives) when it warns or fails."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuval.results import Status, Where
from gpuval.workloads.train.records import train_record
from gpuval.workloads.train.worker import TrainReport

NODE = Where(hostname="node-3", ranks=16, engine="slurm")


def _report(**changes: object) -> TrainReport:
    values = dict(world_size=16, launcher="torchrun", backend="nccl", device="cuda:0", samples_per_s=4000.0,
                  step_time_p50_s=0.1, step_time_p95_s=0.12, loss_first=2.3, loss_last=1.1, timed_steps=27,
                  pids=list(range(16)), hosts=["node-3", "node-4"], nccl_transport="P2P, NET/IB (network IB)",
                  transport_status="pass", transport_reason="NCCL 2.19.3 uses IB")
    values.update(changes)
    return TrainReport(**values)


def _record(report: TrainReport):
    return train_record(report, where=NODE, run_id="r", started=datetime.now(timezone.utc), params={"steps": 30})


def test_where_is_the_callers_and_a_healthy_run_passes():
    record = _record(_report())
    assert record.where == NODE and record.status is Status.PASS
    assert record.data.nccl_transport == "P2P, NET/IB (network IB)" and record.data.transport_status == "pass"


def test_sockets_on_a_node_with_hcas_fail_the_run_and_a_flat_loss_fails_first():
    sockets = _report(nccl_transport="NET/Socket (network Socket)", transport_status="fail",
                      transport_reason="NCCL fell back to TCP sockets on a node with HCAs (NCCL_IB_DISABLE=1 is set)")
    record = _record(sockets)
    assert record.status is Status.FAIL and record.reason.startswith("NCCL transport: NCCL fell back to TCP sockets")
    flat = _record(_report(loss_last=2.4, transport_status="fail", transport_reason="sockets"))
    assert flat.status is Status.FAIL and flat.reason.startswith("loss did not go down")
    no_gdr = _record(_report(transport_status="warn", transport_reason="IB without GPUDirect RDMA"))
    assert no_gdr.status is Status.WARN
