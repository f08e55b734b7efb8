"""A job's diagnosis built from recorded and planned parts, for the tests of the model and of its page: 8 ranks on 4
nodes; rank 5 (node-2) computes 30 ms a step longer; rank 3 (node-1) stopped, the others wait in collective #9, and
RAS's recorded answer (tests/data/nccl-ras/source-dead.json, whose pids the ranks 0-3 have) calls its process dead
and rank 2's communicator aborted; node-2's NCCL runs on sockets where its SKU has InfiniBand (ranks 4-5 have the
pids of that published log) and it logged an ECC Xid. Hostile text rides in a host name and a stack frame."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuval.collectives.nccl_ras import read_json_status
from gpuval.diagnosis.hang import find_hang
from gpuval.diagnosis.job_diagnosis import JobDiagnosis, nominate
from gpuval.diagnosis.job_records import read_job_records
from gpuval.diagnosis.job_transport import transport_per_rank
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.hooks.record import Stats, StepRecord
from gpuval.node.node_events import NodeEvent, NodeEvents, counted
from gpuval.node.pystacks import Frame, Stacks, ThreadStack
from gpuval.node.rank_probe import RankProbe
from gpuval.node.rank_state import Identity, Progress
from tests.conftest import DATA

NODES = {r: f"node-{r // 2}" for r in range(8)}
HOSTILE = "<script>alert(1)</script>"
NOW = 10_000.0
PIDS = {0: 2405061, 1: 2405062, 2: 3487983, 3: 3487984, 4: 11171, 5: 11172, 6: 106, 7: 107}


def _records() -> list[tuple[str, str]]:
    lines = []
    for w in range(6):
        compute = {r: 0.100 + (0.030 if r == 5 else 0.0) + 0.001 * ((r * 7 + w) % 3) for r in range(8)}
        step = max(compute.values()) + 0.005
        for r, c in compute.items():
            record = StepRecord(rank=r, local_rank=r % 2, world=8, host=HOSTILE if r == 0 else NODES[r], pid=PIDS[r],
                                first=w * 20, last=w * 20 + 19, n=20, t0=1000.0 + w, t1=1001.0 + w,
                                step_s=Stats(step * 20, step, step), compute_s=Stats(c * 20, c, c),
                                wait_s=Stats((step - c) * 20, step - c, step - c), gpu=r % 2,
                                bus=f"0000:{0x19 + r % 2:02x}:00.0")
            lines.append((NODES[r], record.to_line()))
    return lines


def _probe(rank: int) -> tuple[str, RankProbe]:
    stopped = rank == 3
    identity = Identity(rank=rank, local_rank=rank % 2, world=8, host=NODES[rank], pid=PIDS[rank], gpu=rank % 2,
                        bus=f"0000:{0x19 + rank % 2:02x}:00.0", started=1.0)
    progress = Progress(step=120, steps_done=120, launched=8 if stopped else 9, completed=8, in_wait=False,
                        step_begun_at=NOW - 300, progress_at=NOW - 240)
    frames = [Frame(function="main", file="train.py", line=44)] if stopped else [
        Frame(function="all_reduce", file="torch/distributed/distributed_c10d.py", line=3252),
        Frame(function=HOSTILE, file="train.py", line=51)]
    stacks = Stacks(source="py-spy", threads=[ThreadStack(thread=str(PIDS[rank]), name="MainThread", state="idle",
                                                          frames=frames)])
    return NODES[rank], RankProbe(identity=identity, progress=progress, state="T" if stopped else "S", stacks=stacks,
                                  read_at=NOW)


def job_diagnosis() -> JobDiagnosis:
    """The case, its suspects nominated."""
    lines = _records()
    sockets = [("node-2", line) for line in (DATA / "nccl-debug" / "socket-no-libibverbs-skypilot.log")
               .read_text().splitlines()]
    records = read_job_records(lines)
    ras = read_json_status((DATA / "nccl-ras" / "source-dead.json").read_text())
    ras.address = "127.0.0.1:28028"
    diag = JobDiagnosis(
        job_id="4242", engine="slurm", since=datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc), world=8,
        node_of=records.node_of, straggler=find_stragglers(records.records, records.node_of),
        hang=find_hang([_probe(r) for r in range(8)], ras=[ras], node_of=records.node_of),
        transport=transport_per_rank(lines + sockets, 8, records),
        events={"node-2": counted([NodeEvent(
            kind="xid", code=94, pci="0000:19:00", at=datetime(2026, 11, 27, 9, 30, tzinfo=timezone.utc),
            text="NVRM: Xid (PCI:0000:19:00): 94, Contained ECC error", ecc="contained ECC error")],
            source="/dev/kmsg"),
            "node-1": NodeEvents(since=None, problem="could not read the kernel log: /dev/kmsg: Permission denied")},
        ras={"node-1": ras}, notes=records.notes)
    diag.suspects = nominate(diag)
    return diag
