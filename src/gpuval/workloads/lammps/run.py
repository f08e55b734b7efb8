"""What runs for the LAMMPS workload: a strong-scaling sweep over MPI rank counts here, or one rank of an engine's
MPI job.

Locally, each rank count is one `mpirun -np N lmp ...` in a directory of its own; its log.lammps is read back and
turned into a Result record at once, so a later failure or Ctrl-C loses nothing already measured. Inside a job
(mpirun, `srun --mpi=pmix`, Azure ML's MPI distribution, the MPI Operator) every rank runs `gpuval lammps`, which
writes the input into a private directory and starts `lmp` as its child: the child inherits the rank's MPI
variables and joins the job; rank 0 reads the log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

from gpuval.errors import EngineError, MissingDependency, UsageError
from gpuval.node.dist_env import DistEnv, detect
from gpuval.results import Result, save_results
from gpuval.workloads.base import this_host
from gpuval.workloads.lammps.inputs import Benchmark, Replicas, benchmark_named, write_input
from gpuval.workloads.lammps.log import LammpsRun, parse_runs, unfinished_reason
from gpuval.workloads.lammps.records import lammps_record

ACCELS = ("none", "gpu", "kokkos")
LMP_NAMES = ("lmp", "lmp_mpi")
INSTALL_HINT = ("install it (Debian/Ubuntu: apt-get install lammps; conda: conda install -c conda-forge lammps; "
                "GPU nodes: the NGC image nvcr.io/hpc/lammps) or set LAMMPS_BIN to your lmp executable")


@dataclass(frozen=True)
class LammpsConfig:
    """What to run: which input, how large, with which accelerator package."""

    benchmark: str = "lj"
    scale: Replicas = Replicas()
    accel: str = "none"
    gpus: int = 1  # GPUs per node for -pk gpu N / -k on g N

    def __post_init__(self) -> None:
        benchmark_named(self.benchmark)
        if self.accel not in ACCELS:
            raise UsageError(f"--accel {self.accel!r}: choose one of {', '.join(ACCELS)}")
        if self.gpus < 1:
            raise UsageError(f"--gpus must be at least 1 (got {self.gpus})")

    @property
    def bench(self) -> Benchmark:
        return benchmark_named(self.benchmark)

    @property
    def expected_atoms(self) -> int:
        return self.bench.atoms * self.scale.copies


def find_lmp(env: Mapping[str, str] | None = None) -> str:
    """The LAMMPS executable: LAMMPS_BIN, else lmp or lmp_mpi on PATH; missing is a one-line how-to-get-it."""
    env = os.environ if env is None else env
    path = env.get("PATH", os.defpath)
    explicit = env.get("LAMMPS_BIN")
    if explicit:
        found = shutil.which(explicit, path=path)
        if not found:
            raise MissingDependency(f"LAMMPS_BIN={explicit} is not an executable file; {INSTALL_HINT}")
        return found
    for name in LMP_NAMES:
        found = shutil.which(name, path=path)
        if found:
            return found
    raise MissingDependency(f"LAMMPS is not installed: no {' or '.join(LMP_NAMES)} on PATH; {INSTALL_HINT}")


def find_mpirun(env: Mapping[str, str] | None = None) -> str:
    """mpirun on PATH, or a one-line how-to-get-it."""
    env = os.environ if env is None else env
    found = shutil.which("mpirun", path=env.get("PATH", os.defpath))
    if not found:
        raise MissingDependency("mpirun is not installed: apt-get install openmpi-bin (or load your MPI module)")
    return found


def accel_flags(accel: str, gpus: int) -> list[str]:
    """LAMMPS command-line switches of an accelerator package (one MPI rank per GPU is the usual layout)."""
    if accel == "gpu":
        return ["-sf", "gpu", "-pk", "gpu", str(gpus)]
    if accel == "kokkos":
        return ["-k", "on", "g", str(gpus), "-sf", "kk", "-pk", "kokkos", "newton", "on", "neigh", "half"]
    return []


def lmp_command(lmp: str, cfg: LammpsConfig, input_path: Path | str, log_path: Path | str) -> list[str]:
    """The `lmp` line every rank runs: input, box replicas (bench's -var x/y/z), log, accelerator switches."""
    scale = cfg.scale
    return [lmp, "-in", str(input_path), "-var", "x", str(scale.x), "-var", "y", str(scale.y),
            "-var", "z", str(scale.z), "-log", str(log_path), "-nocite", *accel_flags(cfg.accel, cfg.gpus)]


def mpirun_prefix(mpirun: str, ranks: int, cores: int | None) -> list[str]:
    """`mpirun -np N`, with what root and more ranks than cores need (the latter is flagged in the Result)."""
    args = [mpirun, "-np", str(ranks)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-run-as-root")
    if cores is not None and ranks > cores:
        args.append("--oversubscribe")
    return args


def lammps_job_command(cfg: LammpsConfig, results: str | None = None) -> list[str]:
    """The command each MPI rank of an engine's job runs (the engine starts the ranks: mpirun, srun, Azure ML)."""
    args = ["gpuval", "lammps", "--benchmark", cfg.benchmark, "--scale", str(cfg.scale), "--accel", cfg.accel,
            "--gpus", str(cfg.gpus), "--json"]
    if results:
        args += ["--results", results]
    return args


# ---- one run -----------------------------------------------------------------------------------------------


def read_log(log_path: Path, output: str, code: int, what: str) -> LammpsRun:
    """The finished run in a log LAMMPS just wrote; a crash or a log without a run is an EngineError saying why."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    runs = parse_runs(text, str(log_path))
    if code != 0 or not runs:
        reason = unfinished_reason(output + "\n" + text) if (output or text) else "it printed nothing"
        status = f"exited with code {code}{_signal_note(code)}" if code else "finished without a complete run in its log"
        raise EngineError(f"LAMMPS {what} {status}: {reason} (log: {log_path})")
    return runs[-1]


def _signal_note(code: int) -> str:
    """mpirun passes on 128 + N when a rank died of signal N."""
    try:
        return f" ({signal.Signals(code - 128).name})" if 128 < code < 160 else ""
    except ValueError:
        return ""


def _check(run: LammpsRun, cfg: LammpsConfig, ranks: int) -> None:
    if run.procs != ranks:
        raise EngineError(f"mpirun started {ranks} ranks but LAMMPS ran on {run.procs} procs: this lmp is not built "
                          "with the MPI that mpirun belongs to (a serial build runs one copy per rank)")
    if run.atoms != cfg.expected_atoms:
        raise EngineError(f"LAMMPS ran {run.atoms} atoms where the {cfg.benchmark} input at scale {cfg.scale} has "
                          f"{cfg.expected_atoms}: the input was not read as written")


def run_once(cfg: LammpsConfig, ranks: int, workdir: Path, lmp: str, mpirun: str, timeout_s: float) -> LammpsRun:
    """One `mpirun -np N lmp` in its own directory; returns the run read back from its log.lammps."""
    workdir.mkdir(parents=True, exist_ok=True)
    input_path = write_input(cfg.bench, workdir)
    log_path = workdir / "log.lammps"
    cmd = mpirun_prefix(mpirun, ranks, os.cpu_count()) + lmp_command(lmp, cfg, input_path.name, log_path.name)
    (workdir / "command.txt").write_text(" ".join(cmd) + "\n")
    try:
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"LAMMPS on {ranks} ranks did not finish within {timeout_s:.0f} s (log: {log_path})") from None
    (workdir / "output.txt").write_text(proc.stdout + proc.stderr)
    run = read_log(log_path, proc.stdout + proc.stderr, proc.returncode, f"on {ranks} ranks")
    _check(run, cfg, ranks)
    return run


# ---- records ----------------------------------------------------------------------------------------------


def result_record(cfg: LammpsConfig, run: LammpsRun, base: LammpsRun | None, run_id: str, started: datetime,
                  engine: str, lmp: str) -> Result:
    """The Result of one rank count run here (this machine is its `where`); oversubscribed cores are a warning."""
    cores = os.cpu_count() or 0
    warning = (f"{run.procs} ranks on {cores} cores: oversubscribed, the figures understate"
               if cfg.accel == "none" and run.procs > cores else "")
    params = {"benchmark": cfg.benchmark, "ranks": run.procs, "scale": str(cfg.scale), "accel": cfg.accel,
              "gpus": cfg.gpus if cfg.accel != "none" else 0, "units": run.units,
              "baseline_ranks": base.procs if base else None, "lmp": lmp}
    return lammps_record(run, name=cfg.benchmark, where=this_host(ranks=run.procs, engine=engine), run_id=run_id,
                         started=started, params=params, base=base, warning=warning)


def sweep(cfg: LammpsConfig, ranks: list[int], run_id: str, workdir: Path | None = None,
          results_path: Path | None = None, timeout_s: float = 600.0,
          on_record: Callable[[Result], None] = lambda _r: None) -> list[Result]:
    """Run the benchmark at each rank count (ascending), saving each Result as soon as it is measured."""
    if not ranks or min(ranks) < 1:
        raise UsageError("--ranks needs one or more positive rank counts, e.g. 1,2,4")
    lmp, mpirun = find_lmp(), find_mpirun()
    records: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="gpuval-lammps-") as tmp:
        root = workdir or Path(tmp)
        base: LammpsRun | None = None
        for n in sorted(set(ranks)):
            started = datetime.now(timezone.utc)
            run = run_once(cfg, n, root / f"{cfg.benchmark}-ranks{n}", lmp, mpirun, timeout_s)
            base = base or run
            record = result_record(cfg, run, base, run_id, started, "mpirun", lmp)
            save_results([record], results_path)
            records.append(record)
            on_record(record)
    return records


def run_as_rank(cfg: LammpsConfig, env: DistEnv, run_id: str, results_path: Path | None = None,
                timeout_s: float = 600.0) -> Result | None:
    """Be one rank of an engine's MPI job: start lmp as this rank; rank 0 reads the log and returns the Result."""
    lmp = find_lmp()
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix=f"gpuval-lammps-r{env.rank}-") as tmp:
        input_path = write_input(cfg.bench, Path(tmp))
        log_path = Path(tmp) / "log.lammps"  # only LAMMPS' rank 0 writes it, into rank 0's directory
        try:
            proc = subprocess.run(lmp_command(lmp, cfg, input_path, log_path), cwd=tmp, capture_output=True,
                                  text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EngineError(f"LAMMPS rank {env.rank} did not finish within {timeout_s:.0f} s") from None
        if env.rank != 0:
            if proc.returncode != 0:
                raise EngineError(f"LAMMPS rank {env.rank} exited with code {proc.returncode}: "
                                  f"{unfinished_reason(proc.stdout + proc.stderr)}")
            return None
        run = read_log(log_path, proc.stdout + proc.stderr, proc.returncode, f"rank 0 of {env.world_size}")
        _check(run, cfg, env.world_size)
        record = result_record(cfg, run, None, run_id, started, env.launcher, lmp)
        save_results([record], results_path)
        return record


def default_ranks(cfg: LammpsConfig) -> list[int]:
    """Powers of two up to the GPUs given (accelerated) or the cores of this machine."""
    top = cfg.gpus if cfg.accel != "none" else (os.cpu_count() or 1)
    ranks, n = [], 1
    while n <= top:
        ranks.append(n)
        n *= 2
    return ranks


def run_lammps(cfg: LammpsConfig, ranks: list[int] | None, run_id: str, workdir: Path | None = None,
               results_path: Path | None = None, timeout_s: float = 600.0,
               on_record: Callable[[Result], None] = lambda _r: None) -> list[Result] | None:
    """`gpuval lammps`: without --ranks inside an engine's MPI job (mpirun, srun, Azure ML set the rank
    variables), be one rank of it (None on ranks other than 0: rank 0 reports for the job); else the sweep here
    over `ranks` (default: powers of two up to the cores, or the GPUs)."""
    env = detect() if ranks is None else None
    if env is not None:
        record = run_as_rank(cfg, env, run_id, results_path, timeout_s)
        return None if record is None else [record]
    return sweep(cfg, ranks or default_ranks(cfg), run_id, workdir, results_path, timeout_s, on_record)
