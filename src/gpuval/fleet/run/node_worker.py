"""What runs on the nodes of a fleet check's jobs: the node test (one task per node) and one rank of a pair or
group test. Both print tagged lines (lines.py) and nothing the reader needs on anything else.

The node test: the health suite on this node, then the in-node all_reduce on this node's GPUs (one local rank per
GPU; two gloo ranks on a CPU-only node), `samples` cycles at the test's size. The in-node ranks meet on loopback
(MASTER_ADDR 127.0.0.1, gloo's device on `lo`): an in-node test never depends on the node's network interface, as
NCCL's NVLink/SHM paths do not on a GPU node.

A rank test: one rank of a job the engine started on the test's nodes (srun, torchrun, PyTorchJob); every rank
joins the job's process group once and runs each collective, `samples` cycles at the test's size; rank 0 prints
the figures and the job's nodes by rank. Any rank that fails prints one `error` line naming its node and rank.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.collectives.table import Table
from gpuval.engines.nodes import this_node
from gpuval.errors import EXIT_CANNOT_RUN, EngineError, GpuvalError
from gpuval.node.dist_env import detect
from gpuval.fleet.run.lines import emit, suite_verdict
from gpuval.fleet.run.racks_read import proof_env, proof_fields
from gpuval.fleet.run.worker_request import NodeTestRequest, RankTestRequest, WorkerRequest
from gpuval.workloads.collective.rank import join_bench
from gpuval.workloads.rank_starter import leave
from gpuval.workloads.ranks import first_line, leave_group, require_torch


def samples_of(table: Table) -> list[float]:
    """Per-cycle busbw at the sweep's largest size (GB/s, unrounded): one figure per -N cycle."""
    if not table.rows:
        return []
    largest = max(r.size for r in table.rows)
    return [r.best_busbw() for r in table.rows if r.size == largest]


def sample_config(collective: str, req: WorkerRequest) -> BenchConfig:
    """One size, `samples` cycles, checked (a collective returning wrong data is a failure, not a figure)."""
    from gpuval.workloads.collective.run import bench_config

    return bench_config(collective=collective, min_bytes=req.size, max_bytes=req.size, step_factor=1,
                        iters=req.iters, warmup=req.warmup, check=1, backend=req.backend, timeout_s=req.timeout,
                        cycles=req.samples)


def node_test(req: NodeTestRequest) -> int:
    """The node test of one node (its health suite judged by the packaged baselines and the user's files
    `req.baseline`); returns the exit code (0, or 2 when something could not run)."""
    node = this_node()  # the scheduler's name of this node: what verdicts, drains and exclude lists use
    emit("start", round=req.round, node=node)
    try:
        _node_suite(req.round, node, req.sku, req.run_id, tuple(Path(p) for p in req.baseline))
        _in_node(req, node)
    except (GpuvalError, OSError) as exc:
        emit("error", round=req.round, node=node, rank=None, error=str(exc).splitlines()[0] if str(exc) else "")
        return EXIT_CANNOT_RUN
    return 0


def _node_suite(round_index: int, node: str, sku: str | None, run_id: str, baselines: tuple[Path, ...]) -> None:
    from gpuval.workloads.health.run import HealthRequest, run_health

    booted: list[float] = []  # seconds since the boot, as the machine the suite read says (a recording's own)
    # The submitting side stores the records (from these lines): nothing is written on the node.
    run = run_health(HealthRequest(run_id, sku=sku, baselines=baselines, results=Path(os.devnull), repeats=1),
                     on_context=lambda ctx: booted.extend(_uptime(ctx.machine)))
    for record in run.records:
        emit("health", round=round_index, node=node, record=record.model_dump(mode="json"))
    status, reason = suite_verdict(run.records)
    emit("suite", round=round_index, node=node, status=status.value, reason=reason,
         uptime_s=booted[0] if booted else None)


def _uptime(machine: Any) -> list[float]:
    """The machine's seconds since its boot ([] where it cannot say): what the NVLink debounce after a reboot reads."""
    try:
        return [(machine.now() - machine.boot_time()).total_seconds()]
    except (GpuvalError, OSError, ValueError, TypeError):
        return []


def _in_node(req: NodeTestRequest, node: str) -> None:
    from gpuval.workloads.collective.run import BenchRequest, default_nprocs, run_local

    nprocs = req.procs or default_nprocs()
    cfg = sample_config("all_reduce", req)
    bench = BenchRequest(config=cfg, run_id=req.run_id, quiet=True, record=False, env={"GLOO_SOCKET_IFNAME": "lo"})
    table, code = run_local(bench, nprocs)
    if code or table.total_wrong():
        raise EngineError(f"in-node all_reduce over {nprocs} ranks: {table.total_wrong()} wrong elements"
                          if table.total_wrong() else f"in-node all_reduce over {nprocs} ranks exited {code}")
    emit("samples", round=req.round, node=node, collective="all_reduce", busbw=samples_of(table),
         hosts=[node] * nprocs, ranks=nprocs)


def rank_test(req: RankTestRequest) -> None:
    """One rank of a pair or group test; ends the process (leave) with 0, or 2 after printing its error."""
    node = this_node()  # the scheduler's name of this node: what verdicts, drains and exclude lists use
    env = detect()
    rank = env.rank if env else None
    round_index, test_id = req.round, req.test
    emit("start", round=round_index, test=test_id, node=node, rank=rank)
    code = 0
    torch: Any = None
    folder: Path | None = None
    try:
        if env is None:
            raise EngineError("no launcher variables (RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK)")
        torch = require_torch()
        if req.nvlink:  # an NVL72 rack's test: NCCL's own log of this rank, read after its collectives
            folder = Path(tempfile.mkdtemp(prefix="gpuval-nccl-"))
            os.environ.update(proof_env(folder))
        configs = [sample_config(c, req) for c in req.collectives]
        # as a bench rank joins: where NCCL is called through nccl4py the group is gloo, so the communicator under
        # test is the rank's only NCCL one
        joined = join_bench(torch, env, configs[0])
        hosts: list[Any] = [None] * env.world_size
        torch.distributed.all_gather_object(hosts, node)
        for collective, cfg in zip(req.collectives, configs):
            table = run_sweep(cfg, env.rank, env.world_size, joined.device, lambda _row: None, path=joined.path)
            if table.total_wrong():
                raise EngineError(f"{collective}: {table.total_wrong()} wrong elements: the collective returned "
                                  "incorrect data")
            if env.rank == 0:
                emit("samples", round=round_index, test=test_id, node=node, collective=collective,
                     busbw=samples_of(table), hosts=hosts, ranks=env.world_size)
        if folder is not None and (proof := proof_fields(folder)) is not None:
            emit("nvlink", round=round_index, test=test_id, node=node, rank=rank, **proof)
        torch.distributed.barrier(timeout=timedelta(seconds=req.timeout))
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a peer that died, a timeout, a node that cannot reach the others: say where
        emit("error", round=round_index, test=test_id, node=node, rank=rank, error=first_line(exc))
        code = EXIT_CANNOT_RUN
    finally:
        if torch is not None:
            leave_group(torch)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    leave(code)
