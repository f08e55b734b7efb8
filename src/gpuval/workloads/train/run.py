"""What runs for the training workload: the job started here through torchrun or `accelerate launch`, or this
process as one rank of an engine's job.

Local runs hand the ranks a request file and read rank 0's report back; the report's PIDs prove how many real
processes ran (`accelerate launch --cpu --num_processes 2` silently runs one; gpuval uses `--multi_gpu`, which on
a machine without GPUs starts real gloo ranks, and checks).
"""

from __future__ import annotations

import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpuval.errors import EngineError, MissingDependency, UsageError
from gpuval.node.dist_env import DistEnv, detect, free_port
from gpuval.node.unshadowed import child_env, module_argv
from gpuval.results import Result, save_results
from gpuval.workloads.base import this_host
from gpuval.workloads.rank_starter import leave
from gpuval.workloads.train.records import train_record
from gpuval.workloads.train.worker import TrainConfig, TrainReport, TrainRequest, train

LAUNCHERS = ("torchrun", "accelerate")
WORKER = "gpuval.workloads.train.worker"


def launcher_command(launcher: str, nprocs: int, port: int, request: Path) -> list[str]:
    """The local launch line: torchrun, or accelerate's multi-process launcher, each starting `nprocs` workers. The
    launcher and each worker are never shadowed by the working folder (node/unshadowed.py): the launcher starts the
    worker's whole command line (--no-python), not its own `python -m WORKER`."""
    worker = [*module_argv(WORKER), str(request)]
    if launcher == "torchrun":
        return [*module_argv("torch.distributed.run"), "--nnodes", "1", "--nproc_per_node", str(nprocs),
                "--master_addr", "127.0.0.1", "--master_port", str(port), "--no-python", *worker]
    if launcher == "accelerate":
        try:
            import accelerate  # noqa: F401
        except ImportError:
            raise MissingDependency("accelerate is not installed: pip install 'gpuval[train]'") from None
        # --multi_gpu starts real ranks even without GPUs (--cpu would run one); it refuses a single process
        multi = ["--multi_gpu"] if nprocs > 1 else []
        return [*module_argv("accelerate.commands.launch"), *multi, "--num_machines", "1",
                "--num_processes", str(nprocs), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                "--mixed_precision", "no", "--dynamo_backend", "no", "--no_python", *worker]
    raise UsageError(f"--launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")


def train_job_command(cfg: TrainConfig) -> list[str]:
    """The command each rank of an engine's job runs (the engine sets RANK/WORLD_SIZE/MASTER_ADDR, or srun's).
    Rank 0 appends its Result record to the job's output (`--results /dev/stdout`: one line, or pieces that each
    fit the launcher's message, results/pieces.py), as health's and burn's jobs do: a record printed as indented
    JSON over many lines is torn by another node's lines that the launcher writes between them."""
    return ["gpuval", "train", "--steps", str(cfg.steps), "--batch-size", str(cfg.batch_size),
            "--image-size", str(cfg.image_size), "--backend", cfg.backend, "--step-report", str(cfg.step_report),
            "--results", "/dev/stdout"]


def _failure_line(output: str) -> str:
    """A rank's own `error:` line if it printed one, else the launcher's words on the failed rank (torch elastic's
    summary: exitcode, the abort message), else its last line; never a `=====` rule."""
    lines = [line.strip() for line in output.splitlines() if line.strip().strip("=-*")]
    ours = [line for line in lines if line.startswith("error:")]
    if ours:
        return ours[0].removeprefix("error:").strip()[:300]
    telling = [line for line in lines if line.startswith(("terminate called", "exitcode", "RuntimeError"))
               or "Error:" in line]
    return (" | ".join(dict.fromkeys(telling))[:300] if telling else lines[-1][:300] if lines else "no output")


def run_local(cfg: TrainConfig, nprocs: int, launcher: str, timeout_s: float = 600.0) -> TrainReport:
    """Launch `nprocs` ranks on this machine and return rank 0's report, checked to come from `nprocs` processes."""
    if nprocs < 1:
        raise UsageError(f"--nprocs must be at least 1 (got {nprocs})")
    with tempfile.TemporaryDirectory(prefix="gpuval-train-") as tmp:
        request = Path(tmp) / "request.json"
        report_path = Path(tmp) / "report.json"
        request.write_text(TrainRequest(config=cfg, launcher=launcher, report_path=str(report_path),
                                             nprocs=nprocs).model_dump_json())
        env = child_env()
        env.setdefault("NCCL_DEBUG", "INFO")  # read back for the transport in use (GPU runs only)
        env.setdefault("NCCL_DEBUG_FILE", str(Path(tmp) / "nccl.%h.%p.log"))
        # torchrun's own default, here for accelerate and one rank too, from the ranks' start (ranks of every other
        # launcher take one thread as they join: workloads.ranks.share_cores)
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = launcher_command(launcher, nprocs, free_port(), request)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{launcher} with {nprocs} ranks did not finish within {timeout_s:.0f} s") from None
        if proc.returncode != 0 or not report_path.exists():
            raise EngineError(f"{launcher} with {nprocs} ranks failed (exit {proc.returncode}): "
                              f"{_failure_line(proc.stderr + proc.stdout)}")
        report = TrainReport.model_validate_json(report_path.read_text())
    if report.world_size != nprocs or len(set(report.pids)) != nprocs:
        raise EngineError(f"{launcher} was asked for {nprocs} processes but the job ran {report.world_size} "
                          f"rank(s) in {len(set(report.pids))} process(es)")
    return report


def result_record(cfg: TrainConfig, report: TrainReport, base: TrainReport | None, run_id: str,
                  started: datetime, engine: str) -> Result:
    """The Result of one job size run here or as rank 0 of a job (this machine is its `where`)."""
    params = {**cfg.model_dump(), "launcher": report.launcher, "backend": report.backend,
              "baseline_world_size": base.world_size if base else None}
    return train_record(report, where=this_host(ranks=report.world_size, engine=engine), run_id=run_id,
                        started=started, params=params, base=base)


def sweep(cfg: TrainConfig, sizes: list[int], launcher: str, run_id: str, results_path: Path | None = None,
          timeout_s: float = 600.0, on_record: Callable[[Result], None] = lambda _r: None) -> list[Result]:
    """Train at each job size (ascending); each Result is saved as soon as it is measured."""
    records, base = [], None
    for n in sorted(set(sizes)):
        started = datetime.now(timezone.utc)
        report = run_local(cfg, n, launcher, timeout_s)
        record = result_record(cfg, report, base if base is not None else (report if len(set(sizes)) > 1 else None),
                               run_id, started, launcher)
        base = base or report
        save_results([record], results_path)
        records.append(record)
        on_record(record)
    return records


def run_in_job(cfg: TrainConfig, env: DistEnv, run_id: str, results_path: Path | None = None) -> Result | None:
    """Train as one rank of an engine's job; rank 0 saves and returns the Result."""
    started = datetime.now(timezone.utc)
    report = train(cfg, env)
    if report is None:
        return None
    record = result_record(cfg, report, None, run_id, started, env.launcher)
    save_results([record], results_path)
    return record


def run_train(cfg: TrainConfig, sizes: list[int] | None, launcher: str, run_id: str, results_path: Path | None = None,
              timeout_s: float = 600.0,
              on_record: Callable[[Result], None] = lambda _r: None) -> tuple[list[Result], bool]:
    """`gpuval train`: without --nprocs inside an engine's job (torchrun, srun, mpirun, Azure ML, Kubeflow set the
    rank variables), be one rank of it (ranks other than 0 leave here: rank 0 reports for the job); else train
    here at each size of `sizes` (default 2 ranks). Returns the records and whether this process is a rank of a
    job (then it ends with workloads.rank_starter.leave, once it has printed them)."""
    env = detect() if sizes is None else None
    if env is None:
        return sweep(cfg, sizes or [2], launcher, run_id, results_path, timeout_s, on_record), False
    record = run_in_job(cfg, env, run_id, results_path)
    if record is None:
        leave(0)
    return [record], True
