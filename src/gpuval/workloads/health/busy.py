"""Before, while and after a measuring check measures: is another process using the GPUs, may CUDA start, does the
compute mode let gpuval measure? A figure taken while another job runs GEMMs is that job's leftover share (the
first H200 run: HBM triad 2117 of 4383 GB/s, sustained GEMM 310 of 669 TFLOPS); judged, it blames the hardware
(HBM_SLOW "a memory clock or HBM stack fault"), and `--drain` drains a healthy node that is merely busy.

`MeasuringGuard.wrap` gives the measuring checks (GUARDED, and `gpuval burn`) a measurer that, at the check's first
measurement, reads what else runs on its GPUs (machine.gpu_activity: NVML's processes other than gpuval's own, each
GPU's load over about a second) and, after the check, reads it again; a sustained load also reads the processes
while it runs (LoadFigure.appeared). What the reads say follows workloads.health.activity. Busy before: not
measured, ERROR with fault code GPU_BUSY naming pid, name and memory (or the load seen). Busy meanwhile or after:
measured, ERROR GPU_BUSY with the figure reported. `allow_busy` measures and reports the figure, not judged
(skipped). A graphics process under its floor is a WARN (GPU_SHARED) on the first check that measured beside it;
what is only said (an MPS server with no client, pids that cannot be attributed here) is said on that check too.
A check that measures nothing (one GPU: no pair) is never asked about and keeps its own verdict.

CUDA that cannot start is said once, by cuda_init (or, where the suite did not run it, by the first check that
would measure, with cuda_init's verdict and fault code); every later measuring check says only that it was not
measured and why in a few words. A compute mode that refuses gpuval's processes (Exclusive Process, Prohibited) is
an ERROR (fault code COMPUTE_MODE) before anything is measured.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any, Callable

from gpuval.checks.base import REGISTRY, Check, CheckContext, CheckResult
from gpuval.checks.figures import LoadRun
from gpuval.checks.gpu_config import blocking_mode
from gpuval.errors import GpuvalError
from gpuval.node.machine import GpuActivity, HardwareUnavailable
from gpuval.results.model import Status
from gpuval.workloads.health.activity import Reading, describe, read_activity

# The checks whose figures another load changes (nccl_transport reads which transport NCCL chose, ib_write_bw
# the HCAs, dcgm_diag runs DCGM's own process checks: none of them is a figure of the GPU's speed)
GUARDED = ("h2d_d2h_bandwidth", "gemm_tflops", "p2p_bandwidth", "hbm_bandwidth", "gemm_sustained",
           "clocks_under_load", "nccl_allreduce_node", "nccl_ib_loopback", "burn")
GPU_BUSY = "GPU_BUSY"
GPU_SHARED = "GPU_SHARED"
COMPUTE_MODE = "COMPUTE_MODE"
ALLOW_HINT = "--allow-busy measures and reports without judging"


class Refused(GpuvalError):
    """A measurement the guard did not let run (busy GPU, compute mode, CUDA that cannot start): its fault code."""

    def __init__(self, fault_code: str, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.fault_code, self.reason, self.details = fault_code, reason, details


def appeared_during(run: LoadRun) -> list[str]:
    """Processes that started on a GPU while a sustained load ran on it (its sampler's reads), in words."""
    return [f"GPU {p.gpu} used by {describe(p, True)} from part-way through the load"
            for f in run.alone + run.together for p in f.appeared]


class _Watching:
    """The check's measurer, asked through the guard: the first measurement reads the GPUs' activity first; a
    sustained load's processes that started meanwhile are kept."""

    def __init__(self, guard: "MeasuringGuard", ctx: CheckContext, real: Any) -> None:
        self.guard, self.ctx, self.real = guard, ctx, real
        self.measured = False
        self.before: Reading = Reading()
        self.appeared: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.real, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.measured:
                self.before = self.guard.before(self.ctx)
            self.measured = True
            got = method(*args, **kwargs)
            if isinstance(got, LoadRun):
                self.appeared += [a for a in appeared_during(got) if a not in self.appeared]
            return got
        return call


class MeasuringGuard:
    """Wraps the measuring checks of one run (`allow_busy`: measure a busy GPU, report, do not judge)."""

    def __init__(self, allow_busy: bool = False) -> None:
        self.allow_busy = allow_busy
        self.cuda: CheckResult | None = None  # cuda_init's verdict, once known
        self.cuda_said = False
        self.held: dict[int, set[int]] | None = None  # pids on each GPU at the first read, before gpuval's context
        self.said: set[str] = set()  # sharing and notes already said on an earlier check of this run

    def wrap(self, checks: list[Check]) -> list[Check]:
        """The checks, the measuring ones guarded and cuda_init's verdict kept for them."""
        return [replace(c, func=self._guarded(c.func)) if c.name in GUARDED
                else replace(c, func=self._keep_cuda(c.func)) if c.name == "cuda_init" else c for c in checks]

    def _keep_cuda(self, func: Callable[[CheckContext, Check], CheckResult]) -> Callable[..., CheckResult]:
        def run(ctx: CheckContext, me: Check) -> CheckResult:
            self.cuda, self.cuda_said = func(ctx, me), True
            return self.cuda
        return run

    def _gpus(self, ctx: CheckContext) -> list[Any]:
        try:
            return [g for g in ctx.inventory().gpus if not g.mig_current]
        except HardwareUnavailable:
            return []

    def _cuda_refusal(self, ctx: CheckContext) -> None:
        """Refused when CUDA cannot start: cuda_init's own verdict the first time it is said, a pointer after."""
        if self.cuda is None:
            self.cuda = REGISTRY["cuda_init"].run(ctx)
        # no device at all (failed, hidden by a variable, or a CUDA driver library that does not go with the kernel
        # driver): nothing can be measured. Fewer devices than GPUs (cuda_init's fail) still measures those it has.
        failed = self.cuda.status is Status.FAIL and not self.cuda.value
        blocked = self.cuda.status is Status.ERROR and "cause" in self.cuda.details
        if not failed and not blocked:  # started, not asked, or could not tell: measure
            return
        if not self.cuda_said:
            self.cuda_said = True
            raise Refused(self.cuda.fault_code, self.cuda.reason.removeprefix("could not run: "),
                          status=self.cuda.status)
        raise Refused(self.cuda.fault_code, "not measured: CUDA cannot start here (cuda_init says why)")

    def before(self, ctx: CheckContext) -> Reading:
        """Refused (CUDA, compute mode, or a busy GPU) before the first measurement; what the GPUs' activity said
        when allowed."""
        self._cuda_refusal(ctx)
        gpus = self._gpus(ctx)
        mode = blocking_mode(gpus)
        if mode:
            raise Refused(COMPUTE_MODE, f"{mode}: not measured (nvidia-smi -c DEFAULT lets gpuval measure)")
        reading, details = self.activity(ctx, gpus, before=True)
        if reading.busy and not self.allow_busy:
            raise Refused(GPU_BUSY, f"{'; '.join(reading.busy)}: not measured, a figure taken now is a share of the "
                                    f"GPU, not its speed ({ALLOW_HINT})", **details)
        return reading

    def activity(self, ctx: CheckContext, gpus: list[Any], before: bool) -> tuple[Reading, dict[str, Any]]:
        """What the GPUs' activity says (nothing, where nothing could tell) and the details to record. The run's
        first read is taken before gpuval opens a context: every pid listed then is another job's."""
        try:
            seen: GpuActivity = ctx.machine.gpu_activity([g.index for g in gpus])
        except (HardwareUnavailable, AttributeError) as exc:  # a machine that cannot tell: measure as before
            return Reading(), {"activity_unknown": str(exc)}
        first = self.held is None
        if self.held is None:
            self.held = {}
            for p in seen.processes:
                self.held.setdefault(p.gpu, set()).add(p.pid)
        return read_activity(seen, before, self.held, first), {
            "processes": [asdict(p) for p in seen.processes], "loads": {g: asdict(v) for g, v in seen.loads.items()},
            "pid_namespace": "host" if seen.attributable else "own"}

    def _guarded(self, func: Callable[[CheckContext, Check], CheckResult]) -> Callable[..., CheckResult]:
        def run(ctx: CheckContext, me: Check) -> CheckResult:
            real = ctx.measurer
            if real is None:
                return func(ctx, me)
            watching = _Watching(self, ctx, real)
            ctx.measurer = watching
            try:
                result = func(ctx, me)
            except Refused as refused:
                status = refused.details.pop("status", Status.ERROR)
                prefix = "" if status is Status.FAIL else "could not run: "
                return CheckResult(me.name, status, refused.fault_code, reason=prefix + refused.reason,
                                   details=refused.details)
            finally:
                ctx.measurer = real
            if not watching.measured:
                return result
            after, details = self.activity(ctx, self._gpus(ctx), before=False)
            seen = Reading(watching.before.busy or watching.appeared or after.busy,
                           watching.before.shared + after.shared, watching.before.notes + after.notes)
            return self._judged(result, seen, details)
        return run

    def _unsaid(self, words: list[str]) -> list[str]:
        fresh = [w for w in dict.fromkeys(words) if w not in self.said]
        self.said.update(fresh)
        return fresh

    def _judged(self, result: CheckResult, seen: Reading, details: dict[str, Any]) -> CheckResult:
        """A result measured while another process used the GPUs: never judged (ERROR GPU_BUSY; with allow_busy,
        reported, skipped); a result that could not run keeps its error. Beside a graphics process under its floor
        a pass is a WARN (GPU_SHARED), said once per run, as are the notes."""
        if result.status is Status.ERROR:
            return result
        busy = "; ".join(dict.fromkeys(seen.busy))
        if busy and self.allow_busy:
            return replace(result, status=Status.SKIPPED, details={**result.details, **details},
                           reason=f"{busy}: reported, not judged (--allow-busy); on an idle GPU the bands would say: "
                                  f"{result.reason}")
        if busy:
            return replace(result, status=Status.ERROR, fault_code=GPU_BUSY, details={**result.details, **details},
                           reason=f"could not run: {busy} while it measured: not judged, a share of the GPU is not its "
                                  f"speed ({ALLOW_HINT}): {result.reason}")
        shared, notes = self._unsaid(seen.shared), self._unsaid(seen.notes)
        if not shared and not notes:
            return result
        said = "; ".join(shared + notes)
        if shared and result.status is Status.PASS:
            return replace(result, status=Status.WARN, fault_code=GPU_SHARED, details={**result.details, **details},
                           reason=f"{said}: {result.reason}")
        return replace(result, details={**result.details, **details}, reason=f"{result.reason}; {said}")
