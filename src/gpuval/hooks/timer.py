"""The step timer: per rank, how long each step took, how much of it the rank waited in collectives and how much it
computed (the rest), reported every N steps as one step record (gpuval.hooks.record) on the job's output.

In a data-parallel job every rank's step takes the same time, since all wait for the slowest; what differs is the
split: the slow rank computes longest and waits least. So the timer measures the wait:
- DDP (and accelerate, which wraps the model in DDP): `attach(model)` registers a communication hook around DDP's
  own (or the one given). Each bucket's all-reduce is launched when its gradients are ready and DDP waits for all
  of them at the end of backward; the rank's wait is from its last launch (its compute is over) to the end of the
  last all-reduce.
- FSDP (fully_shard, FSDP1), DeepSpeed, tensor- or pipeline-parallel groups: `attach(model)` (or
  `time_collectives()`) times every collective torch.distributed's functions run, in any process group
  (gpuval.hooks.collectives says why this way, and what it does not see).
- A plain loop: `with timer.wait(nbytes=...): dist.all_reduce(...)` around a collective the loop calls.

Each record also carries the bus bytes of the window's collectives where the timer knows them (DDP's buckets, the
collectives it wraps, `wait(nbytes=...)`), the host's load and, on a GPU rank, NVML's reading of its GPU
(gpuval.hooks.sensors): what tells a communication slowdown's bandwidth and a straggler's cause.

Off CUDA the clock is time.perf_counter. On CUDA it is CUDA events on the current stream (launches, completions and
waits are marked on the GPU's timeline, never by stopping the host); each report waits for its window's last event
(one synchronisation per N steps). The timer also keeps the rank's state file current (gpuval.node.rank_state) and
registers a faulthandler signal that dumps the rank's Python stacks to a file beside it: what a hang's diagnosis
reads. Nothing here may break training: a report that cannot be written is dropped.
"""

from __future__ import annotations

import atexit
import faulthandler
import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuval.errors import GpuvalError
from gpuval.hooks.clocks import CudaClock, HostClock, bus_id, cuda_device
from gpuval.hooks.collectives import ALL_REDUCE, CollectiveTiming, Timing, bus_bytes
from gpuval.hooks.record import Stats, StepRecord, Transfer
from gpuval.hooks.sensors import GpuSensor, HostSensor
from gpuval.node.host import job_of
from gpuval.node.rank_state import (COMPLETED, IN_WAIT, LAUNCHED, STACK_SIGNAL, STACKS_SUFFIX, STEPS_DONE, SUFFIX,
                                    Identity, StateWriter, create_own, hooks_dir, process_start)
from gpuval.node.dist_env import detect
from gpuval.node.host import hostname


@dataclass(slots=True)
class _Step:
    """One step's marks: floats off CUDA, CUDA events on it. `waits`: (start, end, bus bytes) of each collective
    waited in where it was called; `launched_bus`: bus bytes of those launched to complete later (DDP's buckets,
    asynchronous calls), waited from the step's last launch to their last completion."""

    begin: Any
    end: Any = None
    waits: list[tuple[Any, Any, int]] = field(default_factory=list)
    last_launch: Any = None
    done: list[Any] = field(default_factory=list)
    launched_bus: int = 0


def _place() -> tuple[int, int, int]:
    """(rank, local rank, world size): torch.distributed's where the program started it, else the launcher's
    variables (gpuval.node.dist_env), else a lone process."""
    try:
        env = detect()
    except GpuvalError:
        env = None
    local = env.local_rank if env else 0
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), local, torch.distributed.get_world_size()
    return (env.rank, local, env.world_size) if env else (0, 0, 1)


class StepTimer:
    """Times each step of one rank and prints a step record every `every` steps (and the rest at `close`).

    `stream`: where records go (default: standard error, which every launcher puts in the job's output);
    `device`: what to time on (default: the attached model's device, else CUDA's current device where the program
    initialised CUDA, else the host clock); `state_dir`: the rank's state file's folder (gpuval.node.rank_state);
    `stacks`: register the stack-dump signal; `gpu_bus`: the PCI bus id of the GPU whose NVML reading the records
    carry (default: the CUDA device timed on; a program that drives its GPU without torch names it here). One
    timer per process: its state file and stack dump are named by the process id."""

    def __init__(self, every: int = 50, *, stream: IO[str] | None = None, device: Any = None,
                 state_dir: str | Path | None = None, stacks: bool = True, gpu_bus: str | None = None) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1 (got {every})")
        self.every, self.stream, self.device = every, stream, device
        self._state_dir, self._want_stacks, self._gpu_bus = state_dir, stacks, gpu_bus
        self._identity: Identity | None = None
        self._clock: HostClock | CudaClock = HostClock()
        self._host: HostSensor | None = None
        self._gpu: GpuSensor | None = None
        self._collectives: CollectiveTiming | None = None
        self._nested = 0  # inside a wait or a timed collective: an inner call is the outer one's
        self._state: StateWriter | None = None
        self._stacks: IO[str] | None = None
        self._stacks_path = Path()
        self._steps: list[_Step] = []
        self._current: _Step | None = None
        self._index = 0  # the next step's number
        self._launched, self._completed = itertools.count(1), itertools.count(1)
        self._seq = self._done = self._done_reported = 0
        self._wall0 = 0.0
        self._closed = False

    # ---- the program's calls ------------------------------------------------------------------------------------

    def step(self) -> _StepBlock:
        """Times one training step (forward, backward, optimizer: everything the step waits for): `with
        timer.step():`."""
        return _StepBlock(self)

    def begin(self) -> None:
        """A step starts (for loops where a `with` block does not fit)."""
        if self._identity is None:
            self._start()
        now = time.time()
        if not self._steps:
            self._wall0 = now
        self._current = _Step(self._clock.mark())
        if self._state:
            self._state.step_begun(self._index, now)

    def end(self) -> None:
        """The step that `begin` started ends; every `every` steps, a record is printed."""
        step = self._current
        if step is None:
            return
        step.end = self._clock.mark()
        self._current = None
        self._steps.append(step)
        self._index += 1
        if self._state:
            self._state.count(STEPS_DONE, self._index, time.time())
        if self._host:
            self._host.sample()
        if len(self._steps) >= self.every:
            self._report()

    def wait(self, nbytes: int = 0) -> _WaitBlock:
        """Times a collective the program calls itself (`dist.all_reduce(...)`, a barrier) as waiting: `with
        timer.wait():`; `nbytes`: the bytes it all-reduces over the job's ranks, for the job's bus bandwidth."""
        world = self._identity.world if self._identity else 1
        return _WaitBlock(self, bus_bytes(nbytes, ALL_REDUCE, world))

    def attach(self, model: Any, hook: Any = None, state: Any = None) -> Any:
        """Times a model's collectives; call it once, before the first step; returns the model.

        A DistributedDataParallel model (accelerate's prepared model is one): its gradient all-reduce, wrapping
        `hook` (default: DDP's own all-reduce, torch's default_hooks.allreduce_hook, on the model's process group)
        with `state` as its first argument. Any other (FSDP2's fully_shard, FSDP1, DeepSpeed's engine, a tensor-
        parallel model): every collective of torch.distributed's functions, in any process group
        (`time_collectives`); a communication hook is DDP's alone."""
        from torch.nn.parallel import DistributedDataParallel

        first = next(iter(model.parameters()), None)
        if self.device is None and first is not None:
            self.device = first.device
        if not isinstance(model, DistributedDataParallel):
            if hook is not None:
                raise TypeError(f"a communication hook is DDP's: {type(model).__name__} takes none (its "
                                "collectives are timed where torch.distributed runs them)")
            self.time_collectives()
            return model
        if hook is None:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            hook, state = allreduce_hook, model.process_group
        model.register_comm_hook(_HookState(self, hook, state, model.process_group.size()), _timed_hook)
        return model

    def time_collectives(self) -> None:
        """Time every collective torch.distributed's functions run from this thread, in any process group, until
        `close` (gpuval.hooks.collectives); torch must be imported and its process group made first."""
        if self._collectives is None:
            self._collectives = CollectiveTiming(Timing(lambda: bool(self._nested) or self._closed,
                                                        lambda bus: _WaitBlock(self, bus), self._launched_async))
            self._collectives.install()

    def close(self) -> None:
        """Print the last, partial window, remove the state file and unregister the stack signal."""
        if self._closed:
            return
        self._closed = True
        if self._collectives is not None:
            self._collectives.remove()
        if self._steps:
            self._report()
        for sensor in (self._host, self._gpu):
            if sensor is not None:
                sensor.close()
        if self._state:
            self._state.close()
        if self._stacks is not None:
            faulthandler.unregister(STACK_SIGNAL)
            self._stacks.close()
            self._stacks_path.unlink(missing_ok=True)

    # ---- collectives --------------------------------------------------------------------------------------------

    def _launch(self, mark: bool = True) -> _Step | None:
        """A collective is launched: its sequence number and, for a communication hook's (`mark`), the end of the
        step's compute so far."""
        self._seq = next(self._launched)
        step = self._current
        if step is not None and mark:
            step.last_launch = self._clock.mark()
        if self._state:
            self._state.count(LAUNCHED, self._seq, time.time())
        return step

    def _launched_async(self, bus: int, call: Any) -> Any:
        """An asynchronous collective (`call` launches it and returns its Work): launched now, completed when its
        future is; a Work without a future (a backend that has none) completes at once."""
        step = self._launch()
        if step is not None:
            step.launched_bus += bus
        self._nested += 1
        try:
            work = call()
        finally:
            self._nested -= 1
        try:
            work.get_future().then(lambda _fut: self._complete(step))
        except (AttributeError, RuntimeError):
            self._complete(step)
        return work

    def _complete(self, step: _Step | None) -> None:
        """A launched collective completed (on the thread or stream that completed it)."""
        if step is not None:
            step.done.append(self._clock.mark())
        self._done = next(self._completed)
        if self._state:
            self._state.count(COMPLETED, self._done, time.time())

    # ---- set-up and reports -------------------------------------------------------------------------------------

    def _start(self) -> None:
        cuda = cuda_device(self.device)
        gpu, bus = None, self._gpu_bus
        if cuda is not None:
            torch = sys.modules["torch"]
            self._clock = CudaClock(torch, cuda)
            gpu, bus = cuda.index, bus or bus_id(torch, cuda.index)
        self._host = HostSensor()
        self._gpu = GpuSensor(bus) if bus else None
        if self._gpu:
            self._gpu.start()
        rank, local, world = _place()
        folder = Path(self._state_dir) if self._state_dir else hooks_dir()
        pid = os.getpid()
        signum = self._register_stacks(folder / f"{pid}{STACKS_SUFFIX}") if self._want_stacks else 0
        self._identity = Identity(
            rank=rank, local_rank=local, world=world, host=hostname(), pid=pid,
            job=job_of(os.environ), gpu=gpu, bus=bus,
            started=time.time(), proc_start=process_start(pid), signal=signum,
            stacks=str(folder / f"{pid}{STACKS_SUFFIX}") if signum else "")
        try:
            self._state = StateWriter(folder / f"{pid}{SUFFIX}", self._identity, time.time())
        except OSError as exc:  # the records still go out; a hang's probe finds no state of this rank
            self._state = None
            self._write(f"gpuval.hooks: no rank state file in {folder} ({exc.strerror}): a diagnosis of a hang "
                        "will not see this rank\n")
        atexit.register(self.close)

    def _register_stacks(self, path: Path) -> int:
        """Dump every thread's stack to `path` on STACK_SIGNAL, unless the program handles that signal itself. The
        file is created new in a folder of this user's own (rank_state.create_own): never one planted there."""
        if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
            return 0
        try:
            self._stacks = os.fdopen(create_own(path), "w")
            self._stacks_path = path
            faulthandler.register(STACK_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        except (OSError, RuntimeError, ValueError):
            return 0
        return int(STACK_SIGNAL)

    def _write(self, text: str) -> None:
        """Text on the records' stream; what cannot be written is dropped (nothing here may break training)."""
        try:
            out = self.stream or sys.stderr
            out.write(text)
            out.flush()
        except (OSError, ValueError):
            pass

    def _report(self) -> None:
        steps, self._steps = self._steps, []
        ident = self._identity
        if ident is None:
            return
        self._clock.settle(steps[-1].end)
        times, waits = [], []
        moved, moving = 0, 0.0  # bus bytes, and the seconds waited in the collectives that moved them
        for s in steps:
            total = self._clock.elapsed(s.begin, s.end)
            wait = 0.0
            for a, b, bus in s.waits:
                took = self._clock.elapsed(a, b)
                wait += took
                moved, moving = moved + bus, moving + (took if bus else 0.0)
            if s.last_launch is not None and s.done:
                tail = max(0.0, max(self._clock.elapsed(s.last_launch, d) for d in s.done))
                wait += tail
                moved, moving = moved + s.launched_bus, moving + (tail if s.launched_bus else 0.0)
            times.append(total)
            waits.append(min(max(wait, 0.0), total))
        done, self._done_reported = self._done - self._done_reported, self._done
        record = StepRecord(
            rank=ident.rank, local_rank=ident.local_rank, world=ident.world, host=ident.host, pid=ident.pid,
            first=self._index - len(steps), last=self._index - 1, n=len(steps), t0=self._wall0, t1=time.time(),
            step_s=Stats.of(times), compute_s=Stats.of([t - w for t, w in zip(times, waits)]),
            wait_s=Stats.of(waits), coll=done, seq=self._seq, gpu=ident.gpu, bus=ident.bus, job=ident.job,
            xfer=Transfer(moved, moving) if moved else None, cpu=self._host.window() if self._host else None,
            gpu_now=self._gpu.window() if self._gpu else None)
        self._write(record.to_line())


class _StepBlock:
    """`with timer.step():` (a class, not a generator: a few hundred nanoseconds less a step)."""

    __slots__ = ("timer",)

    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def __enter__(self) -> None:
        self.timer.begin()

    def __exit__(self, *exc: object) -> None:
        self.timer.end()


class _WaitBlock:
    """`with timer.wait():` the collective's own wait is measured here (the step's last launch stays DDP's), with
    the bus bytes it moves."""

    __slots__ = ("timer", "step", "start", "bus")

    def __init__(self, timer: StepTimer, bus: int = 0) -> None:
        self.timer, self.bus = timer, bus

    def __enter__(self) -> None:
        timer = self.timer
        timer._nested += 1
        self.step = timer._current
        timer._launch(mark=False)
        if timer._state:
            timer._state.count(IN_WAIT, 1, time.time())
        self.start = timer._clock.mark()

    def __exit__(self, *exc: object) -> None:
        timer = self.timer
        timer._nested -= 1
        if self.step is not None:
            self.step.waits.append((self.start, timer._clock.mark(), self.bus))
        if timer._state:
            timer._state.count(IN_WAIT, 0, time.time())
        timer._complete(None)


@dataclass(frozen=True)
class _HookState:
    """What the timed communication hook carries: the timer, the hook it wraps with that hook's state, and the
    ranks of DDP's process group (a bucket's bus bytes)."""

    timer: StepTimer
    hook: Any
    state: Any
    ranks: int


def _timed_hook(state: _HookState, bucket):  # type: ignore[no-untyped-def]
    """DDP communication hook: the wrapped hook's collective, its launch and completion marked, the bucket's bus
    bytes counted (its gradients' size; a compressing hook moves fewer). (No annotation on `bucket` or the return:
    DDP refuses a hook whose annotations are not its own types, and here they are strings.)"""
    step = state.timer._launch()
    if step is not None:
        buffer = bucket.buffer()
        step.launched_bus += bus_bytes(buffer.numel() * buffer.element_size(), ALL_REDUCE, state.ranks)
    future = state.hook(state.state, bucket)
    return future.then(lambda fut: _completed(state.timer, step, fut))


def _completed(timer: StepTimer, step: _Step | None, future: Any) -> Any:
    timer._complete(step)
    return future.value()
