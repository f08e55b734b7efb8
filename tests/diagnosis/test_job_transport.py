"""Each node's NCCL network in a job, from published NCCL_DEBUG=INFO logs (tests/data/nccl-debug/SOURCE.md) as the
lines of two nodes: sockets where the SKU has InfiniBand fail that node with its ranks named (by pid, from the step
records), IB passes, sockets with the HCAs unknown are not judged, and a node whose lines name no network is said."""

from __future__ import annotations

from gpuval.diagnosis.job_records import JobRecords
from gpuval.diagnosis.job_transport import transport_per_rank
from gpuval.hooks.record import Stats, StepRecord
from gpuval.results.model import Status
from tests.conftest import DATA

LOGS = DATA / "nccl-debug"


def _lines(node: str, name: str) -> list[tuple[str, str]]:
    return [(node, line) for line in (LOGS / name).read_text().splitlines()]


def _records() -> JobRecords:
    stats = Stats(1.0, 0.1, 0.1)
    records = [StepRecord(rank=r, local_rank=r % 4, world=8, host="x", pid=pid, first=0, last=9, n=10, t0=0.0, t1=1.0,
                          step_s=stats, compute_s=stats, wait_s=stats) for r, pid in ((2, 11171), (3, 11172))]
    return JobRecords(records, {2: "sock-node", 3: "sock-node"})


def test_sockets_where_the_sku_has_infiniband_fail_the_node_and_name_its_ranks():
    lines = _lines("ib-node", "ib-roce-dgxh100.log") + _lines("sock-node", "socket-no-libibverbs-skypilot.log")
    lines.append(("quiet-node", "NCCL version 2.19.3+cuda12.3"))
    lines.append(("no-nccl-node", "epoch 1 loss 0.3"))
    ib, quiet, sock = transport_per_rank(lines, 8, _records())
    assert (ib.node, ib.status, ib.transport, ib.nccl_version) == ("ib-node", Status.PASS, "IB", "2.19.3")
    assert (sock.node, sock.status, sock.transport) == ("sock-node", Status.FAIL, "Socket")
    assert "fell back to TCP sockets on a node with HCAs" in sock.reason and "libibverbs" in sock.reason
    assert [(r.rank, r.pid, r.device, r.transport) for r in sock.ranks] == [(2, 11171, 2, "Socket"),
                                                                          (3, 11172, 3, "Socket")]
    assert quiet.status is Status.SKIPPED and "name no NCCL network" in quiet.reason


def test_sockets_are_judged_only_where_the_hcas_are_known():
    lines = _lines("sock-node", "socket-ib-disabled-azureml.log") + _lines("cpu-node", "socket-ib-disabled-azureml.log")
    verdicts = transport_per_rank(lines, {"cpu-node": 0, "sock-node": None})
    assert [(t.node, t.status) for t in verdicts] == [("cpu-node", Status.PASS), ("sock-node", Status.SKIPPED)]
    assert verdicts[1].ranks[0].rank is None  # no step records: the pid stays unnamed
