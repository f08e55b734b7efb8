"""The health suite: every check in a fixed order (ORDER, the one list), run against a machine. The results are
CheckResults; the health workload (gpuval.workloads.health) turns them into Result records."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator

from gpuval.baselines import baseline_source, check_learned
from gpuval.checks import (  # noqa: F401  (importing them registers their checks)
    bandwidth, counters, dcgm, fabric, fabric_state, gpu_config, gpu_state, ib_perf, imex, limits, load, measure, xid,
)
from gpuval.checks.base import REGISTRY, Check, CheckContext, CheckResult, Measurer, identity_of
from gpuval.errors import UsageError
from gpuval.node.kernel_log import PassMark
from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.results import Status

ORDER = ["gpu_count", "driver", "xid", "ecc", "row_remap", "clock_throttle", "app_clocks", "persistence",
         "pcie_link", "nvlink",
         # what nvidia-smi -q shows beyond those, and whether CUDA starts at all before anything measures
         "temperature", "firmware", "gpu_mode", "cuda_init",
         "h2d_d2h_bandwidth", "gemm_tflops",
         # GPU memory paths and sustained load
         "p2p_bandwidth", "hbm_bandwidth", "gemm_sustained", "clocks_under_load",
         "nccl_allreduce_node", "nccl_ib_loopback", "nccl_transport", "ib_ports", "topology",
         # fabric, counters, limits, perftest and DCGM; xid_during_run last: it covers the whole run
         "fabric", "imex", "power_limit", "pcie_errors", "nvlink_errors", "ib_errors", "peermem", "shm", "memlock",
         "ib_write_bw", "dcgm_diag", "xid_during_run"]


def all_checks() -> list[Check]:
    """Every check, in the order the suite runs them."""
    return [REGISTRY[name] for name in ORDER]


def check_codes() -> set[str]:
    """The fault codes the health checks have: what a health run can re-check (never a fleet's FLEET_* code)."""
    return {c.fault_code for c in all_checks()}


def select(names: Iterable[str] | None) -> list[Check]:
    """The checks named (all when none); an unknown name is a one-line error listing the known ones."""
    wanted = list(names or [])
    unknown = [n for n in wanted if n not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}: known checks are {', '.join(ORDER)}")
    return [c for c in all_checks() if not wanted or c.name in wanted]


@dataclass
class SuiteRun:
    """One run of the suite: the context it ran in and each check's result."""

    ctx: CheckContext
    results: list[CheckResult]

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    @property
    def could_not_run(self) -> bool:
        """Every check errored: the suite could not run at all."""
        return bool(self.results) and all(r.status is Status.ERROR for r in self.results)


def make_context(machine: Machine, sku: str | None, baselines: Iterable[str | Path] = (),
                 measurer: Measurer | None = None, repeats: int = 3, since: datetime | None = None,
                 dcgm_level: int | None = None, xid_mark: PassMark | None = None) -> CheckContext:
    """A context for `machine`: the SKU given (else a recording's own), its baseline if any (with no SKU, the
    one SKU the user's baseline files name). Finding this machine's SKU (GPUVAL_SKU, IMDS) is the caller's.
    `since` starts the xid window, `dcgm_level` asks for dcgmi diag, `xid_mark` keeps the last xid pass."""
    sku = sku or getattr(machine, "sku", None)
    baselines = tuple(baselines)
    baseline = baseline_source(baselines)(sku)
    if baseline is not None and (sku is None or baseline.raw.get("profile")):  # a profile names the node's type
        sku = baseline.sku
    ctx = CheckContext(machine=machine, sku=sku, baseline=baseline, measurer=measurer, repeats=repeats,
                       since=since, dcgm_level=dcgm_level, xid_mark=xid_mark)
    if baselines:  # a learned baseline judges only its own SKU and GPU model: refused before any check runs
        try:
            gpus = [identity_of(g) for g in ctx.inventory().gpus]
        except HardwareUnavailable:  # no driver: the checks say so; no GPU model to hold a file to
            gpus = []
        check_learned(baselines, sku, gpus)
    return ctx


@contextlib.contextmanager
def _watching_xids(ctx: CheckContext, checks: list[Check]) -> Iterator[None]:
    """Watch for Xid events for the whole run when xid_during_run is among the checks; why not, when it cannot."""
    if not any(c.name == "xid_during_run" for c in checks):
        yield
        return
    try:
        watching = ctx.machine.watch_xids()
        ctx.xid_watch = watching.__enter__()
    except HardwareUnavailable as exc:  # no driver (skipped), or no NVML (error)
        ctx.xid_watch_problem = exc
        yield
        return
    except Exception as exc:  # a machine without the method, NVML failing oddly: the check says so, the suite runs
        ctx.xid_watch_problem = HardwareUnavailable(f"{type(exc).__name__}: {exc}")
        yield
        return
    try:
        yield
    finally:
        watching.__exit__(None, None, None)


def run_suite(ctx: CheckContext, checks: list[Check],
              on_result: Callable[[CheckResult], None] = lambda _r: None) -> SuiteRun:
    """Run the checks in order; each result goes to `on_result` as soon as it is known."""
    results = []
    with _watching_xids(ctx, checks):
        for chosen in checks:
            result = chosen.run(ctx)
            results.append(result)
            on_result(result)
    return SuiteRun(ctx, results)
