"""The step timer: per rank, how long each step took, how much of it the rank waited in collectives and how much it
computed (the rest), reported every N steps as one step record (gpuval.hooks.record) on the job's output.

In a data-parallel job every rank's step takes the same time, since all wait for the slowest; what differs is the
split: the slow rank computes longest and waits least. So the timer measures the wait:
- DDP (and accelerate, which wraps the model in DDP): `attach(model)` registers a communication hook around DDP's
  own (or the one given). Each bucket's all-reduce is launched when its gradients are ready and DDP waits for all
  of them at the end of backward; the rank's wait is from its last launch (its compute is over) to the end of the
  last all-reduce.
- A plain loop: `with timer.wait(): dist.all_reduce(...)` around a collective the loop calls.

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
from gpuval.hooks.record import Stats, StepRecord
from gpuval.node.rank_state import (COMPLETED, IN_WAIT, LAUNCHED, STACK_SIGNAL, STACKS_SUFFIX, STEPS_DONE, SUFFIX,
                                    Identity, StateWriter, create_own, hooks_dir, job_of, process_start)
from gpuval.node.dist_env import detect
from gpuval.node.host import hostname



@dataclass(slots=True)
class _Step:
    """One step's marks: floats off CUDA, CUDA events on it."""

    begin: Any
    end: Any = None
    waits: list[tuple[Any, Any]] = field(default_factory=list)
    last_launch: Any = None
    done: list[Any] = field(default_factory=list)


class _HostClock:
    """time.perf_counter: what the host sees is what the rank does (CPU collectives block the host)."""

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed(self, a: float, b: float) -> float:
        return b - a

    def settle(self, mark: float) -> None:
        """Nothing to wait for."""


class _CudaClock:
    """CUDA events on the device's current stream: marks on the GPU's timeline, read once they completed."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device

    def mark(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(self.torch.cuda.current_stream(self.device))
        return event

    def elapsed(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0

    def settle(self, mark: Any) -> None:
        mark.synchronize()


def _cuda_device(device: Any) -> Any | None:
    """The CUDA device to time on: `device` when it is one; with None, the current device where this process has
    already initialised CUDA (torch imported by the program, never by this function); else None (host clock)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_initialized() else None
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return None
    return torch.device("cuda", torch.cuda.current_device() if chosen.index is None else chosen.index)


def _bus_id(torch: Any, index: int) -> str | None:
    props = torch.cuda.get_device_properties(index)
    parts = [getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device")]
    if any(p is None for p in parts):
        return None
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.0"


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
    `stacks`: register the stack-dump signal. One timer per process: its state file and stack dump are named by the
    process id."""

    def __init__(self, every: int = 50, *, stream: IO[str] | None = None, device: Any = None,
                 state_dir: str | Path | None = None, stacks: bool = True) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1 (got {every})")
        self.every, self.stream, self.device = every, stream, device
        self._state_dir, self._want_stacks = state_dir, stacks
        self._identity: Identity | None = None
        self._clock: _HostClock | _CudaClock = _HostClock()
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
        if len(self._steps) >= self.every:
            self._report()

    def wait(self) -> _WaitBlock:
        """Times a collective the program calls itself (`dist.all_reduce(...)`, a barrier) as waiting: `with
        timer.wait():`."""
        return _WaitBlock(self)

    def attach(self, model: Any, hook: Any = None, state: Any = None) -> Any:
        """Times a DistributedDataParallel model's gradient all-reduce (accelerate's prepared model is one): wraps
        `hook` (default: DDP's own all-reduce, torch's default_hooks.allreduce_hook, on the model's process group)
        with `state` as its first argument. Call it once, before the first backward; returns the model."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            raise TypeError(f"attach() takes a DistributedDataParallel model, not {type(model).__name__}: "
                            "for other wrappers time the collective with `with timer.wait():`")
        if hook is None:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            hook, state = allreduce_hook, model.process_group
        if self.device is None:
            self.device = next(model.parameters()).device
        model.register_comm_hook(_HookState(self, hook, state), _timed_hook)
        return model

    def close(self) -> None:
        """Print the last, partial window, remove the state file and unregister the stack signal."""
        if self._closed:
            return
        self._closed = True
        if self._steps:
            self._report()
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

    def _complete(self, step: _Step | None) -> None:
        """A launched collective completed (on the thread or stream that completed it)."""
        if step is not None:
            step.done.append(self._clock.mark())
        self._done = next(self._completed)
        if self._state:
            self._state.count(COMPLETED, self._done, time.time())

    # ---- set-up and reports -------------------------------------------------------------------------------------

    def _start(self) -> None:
        cuda = _cuda_device(self.device)
        gpu = bus = None
        if cuda is not None:
            torch = sys.modules["torch"]
            self._clock = _CudaClock(torch, cuda)
            gpu, bus = cuda.index, _bus_id(torch, cuda.index)
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
        for s in steps:
            total = self._clock.elapsed(s.begin, s.end)
            wait = sum(self._clock.elapsed(a, b) for a, b in s.waits)
            if s.last_launch is not None and s.done:
                wait += max(0.0, max(self._clock.elapsed(s.last_launch, d) for d in s.done))
            times.append(total)
            waits.append(min(max(wait, 0.0), total))
        done, self._done_reported = self._done - self._done_reported, self._done
        record = StepRecord(
            rank=ident.rank, local_rank=ident.local_rank, world=ident.world, host=ident.host, pid=ident.pid,
            first=self._index - len(steps), last=self._index - 1, n=len(steps), t0=self._wall0, t1=time.time(),
            step_s=Stats.of(times), compute_s=Stats.of([t - w for t, w in zip(times, waits)]),
            wait_s=Stats.of(waits), coll=done, seq=self._seq, gpu=ident.gpu, bus=ident.bus, job=ident.job)
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
    """`with timer.wait():` the collective's own wait is measured here (the step's last launch stays DDP's)."""

    __slots__ = ("timer", "step", "start")

    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def __enter__(self) -> None:
        timer = self.timer
        self.step = timer._current
        timer._launch(mark=False)
        if timer._state:
            timer._state.count(IN_WAIT, 1, time.time())
        self.start = timer._clock.mark()

    def __exit__(self, *exc: object) -> None:
        timer = self.timer
        if self.step is not None:
            self.step.waits.append((self.start, timer._clock.mark()))
        if timer._state:
            timer._state.count(IN_WAIT, 0, time.time())
        timer._complete(None)


@dataclass(frozen=True)
class _HookState:
    """What the timed communication hook carries: the timer, and the hook it wraps with that hook's state."""

    timer: StepTimer
    hook: Any
    state: Any


def _timed_hook(state: _HookState, bucket):  # type: ignore[no-untyped-def]
    """DDP communication hook: the wrapped hook's collective, its launch and completion marked. (No annotation on
    `bucket` or the return: DDP refuses a hook whose annotations are not its own types, and here they are strings.)"""
    step = state.timer._launch()
    future = state.hook(state.state, bucket)
    return future.then(lambda fut: _completed(state.timer, step, fut))


def _completed(timer: StepTimer, step: _Step | None, future: Any) -> Any:
    timer._complete(step)
    return future.value()
