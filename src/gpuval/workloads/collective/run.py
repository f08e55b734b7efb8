"""What runs for the collective workload: one rank inside any engine's job, or N local ranks spawned here.

Local runs start N copies of this module with torchrun's variables, so a local run and a job on an engine
take the same path. Rank 0 prints the nccl-tests table as it goes, writes the -J document and the Result record
(records.collective_record, with this machine as its `where`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuval.collectives import nccltests_json, nccltests_text
from gpuval.collectives.direct import CommPath
from gpuval.collectives.driver import BenchConfig, DeviceInfo, run_sweep
from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.nccltests_parse import parse_json
from gpuval.collectives.split import groups, split_spec
from gpuval.collectives.table import Table
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EngineError, GpuvalError, UsageError, validation_error
from gpuval.node.dist_env import DistEnv, detect
from gpuval.node.gpus import visible_gpu_count
from gpuval.results import save_results
from gpuval.results.files import write_beside
from gpuval.workloads.base import this_host
from gpuval.workloads.collective.header import (
    check_root, device_info, emit, path_notes, print_header, recorded_env,
)
from gpuval.workloads.collective.rank import BenchRequest, join_bench
from gpuval.workloads.collective.records import collective_record
from gpuval.workloads.collective.split import run_split_rank
from gpuval.workloads.rank_starter import leave
from gpuval.workloads.ranks import (
    culprit_note, first_line, leave_group, rank_exit_code, require_torch, spawn_ranks,
)

MODULE = "gpuval.workloads.collective.run"  # what a spawned rank runs: `python -m MODULE REQUEST.json`


def bench_config(**values: Any) -> BenchConfig:
    """A BenchConfig from flag values; a bad value is a one-line UsageError, and so is a sweep that cannot be
    (-b above -e), before any rank starts."""
    try:
        cfg = BenchConfig(**values)
    except ValidationError as exc:
        raise validation_error(exc) from None
    cfg.sizes()
    return cfg


def default_nprocs() -> int:
    """One rank per visible GPU; 2 on a machine without GPUs."""
    return visible_gpu_count() or 2


def max_local_ranks() -> int:
    """The most ranks gpuval starts on this machine: 4 per CPU core, at least 16 (more is a fork storm, not a
    benchmark; a larger job runs on an engine)."""
    return max(16, 4 * (os.cpu_count() or 1))


def check_nprocs(nprocs: int) -> int:
    """--nprocs is at least 1 and at most max_local_ranks(), checked before anything starts."""
    if nprocs < 1:
        raise UsageError(f"--nprocs must be at least 1 (got {nprocs})")
    if nprocs > max_local_ranks():
        raise UsageError(f"--nprocs {nprocs}: at most {max_local_ranks()} local ranks on this machine "
                         f"({os.cpu_count()} CPUs); run a larger job on an engine (gpuval submit nccl)")
    return nprocs


def _nccl_version(torch: Any, device: Any, path: CommPath | None = None) -> int | None:
    """NCCL's version as nccl-tests writes it (22703): the library nccl4py called, else torch's; None on CPU or
    when torch cannot say. torch returns (major, minor, patch) or, for a build with a suffix, four values: never an
    error in the reporting."""
    if path is not None and path.bindings is not None and path.version:
        return path.version
    if device is None or device.type != "cuda":
        return None
    try:
        major, minor, patch = (int(v) for v in tuple(torch.cuda.nccl.version())[:3])
    except Exception:
        return None
    return major * 10000 + minor * 100 + patch


def run_rank(req: BenchRequest, env: DistEnv) -> Table:
    """Run the sweep as one rank of the job described by `env`; rank 0 reports. With NCCL_TESTS_SPLIT (or
    NCCL_TESTS_SPLIT_MASK) set, each split runs as its own group, a table each (workloads/collective/split.py)."""
    spec = split_spec(os.environ)
    if spec is not None:
        return run_split_rank(req, env, spec)
    torch = require_torch()
    cfg = req.config
    started = datetime.now(timezone.utc)
    lead = env.rank == 0
    check_root(cfg, env.world_size)
    joined = join_bench(torch, env, cfg)
    device, path = joined.device, joined.path
    table = Table(collective=cfg.collective, nranks=env.world_size)
    devices: list[DeviceInfo] = []
    reason = ""
    try:
        gathered: list[Any] = [None] * env.world_size
        torch.distributed.all_gather_object(gathered, device_info(torch, env.rank, device, joined.placed))
        devices = list(gathered)
        check_root(cfg, env.world_size, direct=path.bindings is not None)
        if lead and not req.quiet:
            print_header(cfg, devices, torch.__version__, device, path)
        run_sweep(cfg, env.rank, env.world_size, device, _on_row(req, lead, devices, started), table, path)
        torch.distributed.barrier()  # no rank tears its connections down while a peer finishes the last collective
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the saving short
        reason = f"interrupted after {len(table.rows)} sizes"
        raise
    except GpuvalError as exc:
        reason = str(exc)
        raise
    except Exception as exc:  # a peer died, a timeout: torch's text is long, keep its first line
        # A local launcher names the rank that went away (killed, stopped): that, not this rank, is the cause.
        culprit = culprit_note()
        reason = (f"{culprit}; rank {env.rank} then failed after {len(table.rows)} sizes: {first_line(exc)}"
                  if culprit else f"rank {env.rank}: {first_line(exc)}")
        raise EngineError(reason) from None
    finally:
        if lead:
            _finish(req, table, devices, started, env.launcher, reason, _nccl_version(torch, device, path),
                    path_notes(cfg, device, path, devices))
        leave_group(torch)
    return table


def _on_row(req: BenchRequest, lead: bool, devices: list[DeviceInfo], started: datetime) -> Any:
    """What rank 0 does with each measured row: print it, and keep the rows so far where the launcher finds them
    should this rank die (so a killed rank 0 loses no row either)."""
    if not lead:
        return lambda _row: None
    rows: list[dict[str, Any]] = []

    def on_row(row: Any) -> None:
        if req.progress_path:  # saved before it is printed: a row anyone saw is a row kept, whenever rank 0 dies
            rows.append(row.to_json())
            progress = {"started": started.isoformat(), "devices": [d.to_json() for d in devices], "rows": rows}
            target = Path(req.progress_path)
            write_beside(target.parent, target.name, json.dumps(progress), folder_link=True)
        if not req.quiet:
            emit(nccltests_text.row_line(row))
    return on_row


def _min_bw() -> float | None:
    value = os.environ.get("NCCL_TESTS_MIN_BW")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _finish(req: BenchRequest, table: Table, devices: list[DeviceInfo], started: datetime, launcher: str,
            reason: str, nccl_version: int | None, notes: dict[str, Any] | None = None) -> None:
    """Rank 0's reporting, also after a failure or Ctrl-C: footer, -J document, Result record."""
    cfg = req.config
    if table.rows and not req.quiet:
        for line in nccltests_text.footer_lines(table.total_wrong(), table.average_busbw(), cfg.program, _min_bw()):
            emit(line)
    doc = nccltests_json.document(cfg, devices, table, started, datetime.now(timezone.utc), nccl_version, recorded_env(),
                                  [reason] if reason else [], req.argv, notes)
    for path in (req.json_path, req.report_path):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    if req.record and (table.rows or reason):
        where = this_host(ranks=table.nranks, engine=launcher, sku=req.sku)  # rank 0 runs here: this machine
        record = collective_record(table, where, req.run_id, cfg.model_dump(), started, reason,
                                   hosts=sorted({d.hostname for d in devices}))
        save_results([record], Path(req.results_path) if req.results_path else None)


def exit_code(table: Table) -> int:
    """1 when any element was wrong or NCCL_TESTS_MIN_BW was missed, else 0."""
    min_bw = _min_bw()
    if table.total_wrong() or (min_bw is not None and table.average_busbw() < min_bw * 0.9):
        return EXIT_FAILED
    return 0


# ---- local launcher ----------------------------------------------------------------------------------------


def run_local(req: BenchRequest, nprocs: int) -> tuple[Table, int]:
    """Spawn `nprocs` ranks of this module on this machine; returns rank 0's table and the job's exit code. A rank
    that is killed, fails or stops responding is named (rank, pid, host) within seconds; the rows measured before
    are kept (rank 0 saves them, or this process does when rank 0 itself is the one that died)."""
    check_nprocs(nprocs)
    spec = split_spec({**os.environ, **req.env})  # a split is parsed here, so a bad one is one line before any rank
    gpus = visible_gpu_count()
    direct = req.config.via != "torch" and req.config.backend != "gloo" and gpus > 0  # the ranks decide (run_rank)
    check_root(req.config, min(len(m) for m in groups(spec, nprocs).values()) if spec else nprocs, direct)
    if req.config.backend == "nccl" or (req.config.backend == "auto" and gpus):
        if nprocs > gpus:  # NCCL refuses two ranks on one GPU, deep inside a rank; say it here
            raise UsageError(f"--nprocs {nprocs} needs {nprocs} GPUs for NCCL, and {gpus} are visible "
                             "(one rank per GPU; --backend gloo runs CPU ranks)")
    with tempfile.TemporaryDirectory(prefix="gpuval-bench-") as tmp:
        report, request, progress = Path(tmp) / "report.json", Path(tmp) / "request.json", Path(tmp) / "progress.json"
        ranks_req = req.model_copy(update={"report_path": str(report), "progress_path": str(progress)})
        request.write_text(ranks_req.model_dump_json())
        ended = spawn_ranks(MODULE, request, nprocs, {**req.env, "GPUVAL_RUN_ID": req.run_id}, Path(tmp))
        if not report.exists() and progress.exists() and ended.culprit:  # rank 0 died: save what it measured
            _finish_for_rank0(ranks_req, progress, ended.culprit)
        table = parse_json(json.loads(report.read_text())) if report.exists() else Table()
        table.collective, table.nranks = req.config.collective, nprocs
    if ended.culprit:
        raise EngineError(f"{ended.culprit}; {len(table.rows)} sizes were measured before and kept")
    return table, max(ended.codes)


def _finish_for_rank0(req: BenchRequest, progress: Path, reason: str) -> None:
    """Rank 0's reporting (footer, -J document, Result record) done by the launcher from the rows rank 0 kept."""
    kept = json.loads(progress.read_text())
    fields = ("rank", "pid", "hostname", "device", "device_hex", "device_info")
    devices = [DeviceInfo(**{k: d[k] for k in fields}) for d in kept["devices"]]
    table = Table(collective=req.config.collective, nranks=len(devices) or None, rows=rows_from_json(kept["rows"]))
    _finish(req, table, devices, datetime.fromisoformat(kept["started"]), "local", reason, None)


def run_bench(req: BenchRequest, nprocs: int | None) -> int:
    """`gpuval bench`: without --nprocs inside an engine's job (torchrun, mpirun, srun, Azure ML, Kubeflow set
    the rank variables), be one rank of it and leave; else start `nprocs` ranks here. Returns the exit code."""
    env = detect() if nprocs is None else None
    if env is not None:
        leave(exit_code(run_rank(req, env)))
    _, code = run_local(req, check_nprocs(nprocs) if nprocs is not None else default_nprocs())
    return code


def main(argv: list[str]) -> int:
    """Entry point of a spawned rank: `python -m gpuval.workloads.collective.run REQUEST.json`."""
    req = BenchRequest.model_validate_json(Path(argv[0]).read_text())
    env = detect()
    if env is None:
        print("error: this module is started by gpuval bench --nprocs, with torchrun's variables", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return rank_exit_code(lambda: exit_code(run_rank(req, env)))


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
