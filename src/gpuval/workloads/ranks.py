"""What every rank gpuval runs (bench, train) shares: torch, its device and its place beside it, joining and leaving
the process group, its ending (errors as one line, Ctrl-C 130, `os._exit`), and starting N ranks of a module on
this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping

from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EngineError, GpuvalError, MissingDependency
from gpuval.node.cuda_attrs import FABRIC_HINT, is_system_not_ready
from gpuval.node.dist_env import DistEnv, free_port
from gpuval.node.gpus import cuda_ids, pin_near
from gpuval.node.host import hostname
from gpuval.node.sysfs import LinuxMachine
from gpuval.workloads.rank_starter import StartedRank, start_ranks


def require_torch() -> Any:
    """torch with torch.distributed, or a one-line error saying how to install it."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise MissingDependency("torch is not installed: pip install 'gpuval[torch]' (or torch==2.13.0)") from None
    return torch


def _nvml_gpu_count() -> int:
    """GPUs the driver (NVML) sees, whatever CUDA says; 0 without a driver (asked only when CUDA sees none)."""
    from gpuval.node.nvml import read_inventory

    try:
        return len(read_inventory().gpus)
    except Exception:  # no driver, no library: no GPU for us
        return 0


def cuda_unusable_reason(torch: Any) -> str:
    """Why torch cannot use the GPUs the driver sees: a CPU-only torch build, or CUDA's own initialisation error
    (error 802 "system not yet initialized": the NVSwitch fabric manager is not running)."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch"
    try:
        torch.cuda.init()
    except Exception as exc:  # torch raises RuntimeError with CUDA's text
        text = first_line(exc)
        if is_system_not_ready(text):
            text += f" ({FABRIC_HINT})"
        return text
    return "torch.cuda.is_available() is False"


def rank_device(torch: Any, backend: str, local_rank: int) -> tuple[Any, str]:
    """(device, backend) of a rank: `auto` is nccl where torch sees CUDA GPUs, gloo where the machine has none; a
    machine whose driver sees GPUs that CUDA cannot use is an error saying why, never a silent CPU measurement.
    NCCL rank r drives visible GPU r (modulo their count), gloo ranks run on the CPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if backend == "auto":
        if torch.cuda.is_available():
            backend = "nccl"
        elif visible not in ("", "-1") and (gpus := _nvml_gpu_count()):
            raise MissingDependency(f"the driver sees {gpus} GPU(s) but CUDA cannot use them: "
                                    f"{cuda_unusable_reason(torch)} (--backend gloo measures the CPUs instead)")
        else:
            backend = "gloo"
    if backend != "nccl":
        return torch.device("cpu"), backend
    if not torch.cuda.is_available():
        raise MissingDependency(f"backend nccl needs CUDA GPUs, and torch sees none here ({cuda_unusable_reason(torch)})"
                                "; use --backend gloo")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device, backend


def first_line(exc: BaseException) -> str:
    """torch and gloo errors run to many lines and advice; keep what happened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" This is typically")[0]


def join(torch: Any, env: DistEnv, backend: str, timeout_s: float) -> tuple[Any, str]:
    """This rank's (device, backend), once it has joined the job's process group on that backend."""
    device, backend = rank_device(torch, backend, env.local_rank)
    join_group(torch, env, device, backend, timeout_s)
    return device, backend


def share_cores(torch: Any, env: DistEnv) -> None:
    """One intra-op thread per rank where several ranks share this node and the user set no OMP_NUM_THREADS, as
    torchrun does for its workers: each rank's torch otherwise starts a thread per core, and N ranks' threads spin
    against each other on N times too few cores (2 gloo ranks on 2 cores: 2.4 times the CPU of a whole `gpuval bench
    -b 1M -e 1M -N 16 --nprocs 2`, benchmarks/rank_start.py)."""
    if env.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def join_group(torch: Any, env: DistEnv, device: Any, backend: str, timeout_s: float) -> None:
    """Join the job's process group on `backend` (gloo beside NCCL called through nccl4py: its communicator is
    then the rank's only NCCL one); a rendezvous that fails is one EngineError line (torch raises RuntimeError /
    DistNetworkError with many lines)."""
    start_heartbeat(env.rank)
    share_cores(torch, env)
    bound = {"device_id": device} if backend == "nccl" else {}  # NCCL binds this rank's GPU at once
    try:
        torch.distributed.init_process_group(backend, init_method=env.init_method, rank=env.rank,
                                             world_size=env.world_size, timeout=timedelta(seconds=timeout_s), **bound)
    except Exception as exc:
        raise EngineError(f"rank {env.rank} could not join {env.init_method}: {first_line(exc)}") from None


def place_near_gpu(torch: Any, device: Any, machine: LinuxMachine | None = None) -> str | None:
    """Pin this rank beside its GPU, as a launcher binding ranks does for nccl-tests: its CPUs the GPU's local
    ones, its host memory from the GPU's NUMA node (sysfs of the GPU's PCI device; `machine` a LinuxMachine, this
    one by default). Returns how it was placed, in words; None on a CPU rank (no GPU to be near)."""
    if device.type != "cuda":
        return None
    bus, _ = cuda_ids(torch.cuda.get_device_properties(device))
    if bus is None:
        return "not placed (CUDA names no PCI bus id for this GPU)"
    numa, cpus, _ = (machine or LinuxMachine()).pci_device(bus)
    return pin_near(cpus, numa)


def leave_group(torch: Any) -> None:
    """Tear the process group down; one already torn down by the failure being reported is fine."""
    try:
        torch.distributed.destroy_process_group()
    except Exception:
        pass


def rank_exit_code(work: Callable[[], int]) -> int:
    """Run one spawned rank's work and return its exit code: errors print one line on stderr and give 2 (exit 1
    stays "a check failed"), Ctrl-C gives 130 (what the rank measured was saved on the way out)."""
    try:
        return work()
    except GpuvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:  # the top of a process: an unexpected failure is "could not run", never exit 1
        if os.environ.get("GPUVAL_DEBUG"):
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc} (GPUVAL_DEBUG=1 shows where)", file=sys.stderr)
        return EXIT_CANNOT_RUN


# ---- hung and killed ranks ----------------------------------------------------------------------------------
# Local ranks share a folder (GPUVAL_RANKS_DIR): each rank touches `hb-RANK` every HEARTBEAT_S from a thread of its
# own, which stops when the process is stopped (SIGSTOP), frozen or gone. The launching process watches the files
# and the exit codes; the first rank killed by a signal, ending badly, or silent for HANG_S is the culprit. It says
# so in `culprit` (rank 0 reads it into its record and -J document), kills the culprit, and the healthy ranks fail
# at once on the closed connection instead of waiting out the collective timeout.

RANKS_DIR_ENV = "GPUVAL_RANKS_DIR"
HEARTBEAT_S = 0.5
HANG_S = 10.0
INTERRUPTED = 130  # a rank's exit code after Ctrl-C (rank_exit_code)
GRACE_S = 10.0  # after a culprit is named, what the other ranks get to save what they measured and end


def start_heartbeat(rank: int) -> None:
    """Touch this rank's heartbeat file every HEARTBEAT_S, from a daemon thread, when a local launcher watches."""
    folder = os.environ.get(RANKS_DIR_ENV)
    if not folder:
        return
    path = Path(folder) / f"hb-{rank}"

    def beat() -> None:
        while True:
            try:
                path.touch()
            except OSError:
                return
            time.sleep(HEARTBEAT_S)

    threading.Thread(target=beat, name="gpuval-heartbeat", daemon=True).start()


def culprit_note(wait_s: float = 3.0) -> str | None:
    """What the launcher found wrong with another rank (a rank that failed because a peer went away asks here
    before it reports), waiting up to `wait_s` for it; None outside a local launch or when nothing was found."""
    folder = os.environ.get(RANKS_DIR_ENV)
    if not folder:
        return None
    path = Path(folder) / "culprit"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return path.read_text().strip() or None
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass
class RankRun:
    """How N local ranks ended: their exit codes and, when one failed first, which one and why."""

    codes: list[int]
    culprit: str | None = None


class _Watch:
    """The launcher's watch over its ranks: exit codes in the order they came, heartbeats."""

    def __init__(self, procs: list[StartedRank], folder: Path, hang_s: float) -> None:
        self.procs, self.folder, self.hang_s = procs, folder, hang_s
        self.started = time.monotonic()
        self.run = RankRun([])
        self.deadline: float | None = None

    def _who(self, rank: int) -> str:
        return f"rank {rank} of {len(self.procs)} (pid {self.procs[rank].pid} on {hostname()})"

    def _blame(self, rank: int, why: str) -> None:
        if self.run.culprit is None:
            self.run.culprit = f"{self._who(rank)} {why}"
            try:
                (self.folder / "culprit").write_text(self.run.culprit + "\n")
            except OSError:
                pass
        if self.deadline is None:
            self.deadline = time.monotonic() + GRACE_S

    def _ended_badly(self) -> None:
        bad = [(r, p.returncode) for r, p in enumerate(self.procs) if p.returncode not in (None, 0, EXIT_FAILED)]
        signalled = [(r, c) for r, c in bad if c < 0]
        for rank, code in signalled[:1] or bad[:1]:
            why = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with code {code}"
            proc = self.procs[rank]
            self._blame(rank, f"lost its starter (pid {proc.starter.pid}), which {why}" if proc.lost else why)

    def _silent(self) -> None:
        now = time.time()
        for rank, proc in enumerate(self.procs):
            if proc.poll() is not None:
                continue
            try:
                age = now - (self.folder / f"hb-{rank}").stat().st_mtime
            except OSError:  # not beating yet (not forked, or still joining)
                continue
            if age > self.hang_s:
                self._blame(rank, f"stopped responding: no heartbeat for {age:.0f} s (stopped, frozen or hung)")
                proc.kill()  # its peers then fail at once on the closed connection, and save what they measured
                return

    def _raise_if_interrupted(self) -> None:
        """A rank that ended on Ctrl-C (before this process saw its own, or only the ranks got it): the run was
        interrupted, no rank failed. As if this process had been: KeyboardInterrupt (the rest stopped, exit 130)."""
        if any(p.returncode == INTERRUPTED for p in self.procs):
            raise KeyboardInterrupt

    def wait(self) -> RankRun:
        last_beat_check = 0.0
        while any(p.poll() is None for p in self.procs):
            self._raise_if_interrupted()
            if self.run.culprit is None:
                self._ended_badly()
                if self.run.culprit is None and time.monotonic() - last_beat_check > HEARTBEAT_S:
                    last_beat_check = time.monotonic()
                    self._silent()
            if self.deadline is not None and time.monotonic() > self.deadline:
                for p in self.procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.05)
        self._raise_if_interrupted()
        if self.run.culprit is None:
            self._ended_badly()
        self.run.codes = [p.returncode for p in self.procs]
        return self.run


def spawn_ranks(module: str, request: Path, nprocs: int, env: Mapping[str, str], folder: Path,
                hang_s: float = HANG_S) -> RankRun:
    """Start `nprocs` ranks of `module` (its `main([REQUEST])`) here with torchrun's variables (a local run takes the
    same path as a rank of an engine's job), forked from one process that imported torch once (rank_starter);
    rank 0 keeps the terminal, the others are quiet. `folder` is theirs to share (heartbeats, the culprit, the
    starter's word on each rank). Returns how they ended, once all have."""
    job_env = dict(os.environ, **env, WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()))
    job_env[RANKS_DIR_ENV] = str(folder)
    starter, procs = start_ranks(module, request, nprocs, job_env, folder)
    try:
        return _Watch(procs, folder, hang_s).wait()
    except KeyboardInterrupt:
        _stop_interrupted(procs)
        raise
    finally:
        try:
            starter.wait(timeout=GRACE_S)  # it ends once it has reaped the last rank
        except subprocess.TimeoutExpired:
            starter.kill()


def _stop_interrupted(procs: list[StartedRank]) -> None:
    """After Ctrl-C: ranks in the terminal's process group got it too; signal only those still running after a
    moment (the parent alone was interrupted), then give rank 0 time to save what it measured."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
