"""What a bench rank says before its rows: the checks made before any rank measures, each rank's device line, and
rank 0's header (which path drove NCCL and why, what still differs from nccl-tests, the devices, the columns).
Shared by the unsplit run (run.py) and the per-split run (split.py), which import it and never each other."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from gpuval import __version__
from gpuval.collectives import nccltests_json, nccltests_text
from gpuval.collectives.catalog import collective_named
from gpuval.collectives.differences import differences
from gpuval.collectives.direct import CommPath
from gpuval.collectives.driver import BenchConfig, DeviceInfo
from gpuval.errors import UsageError
from gpuval.node import host
from gpuval.results import dsn


def emit(line: str) -> None:
    """One line of the table on stdout, flushed at once (rows are printed as they are measured)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def check_root(cfg: BenchConfig, nranks: int, direct: bool = True) -> None:
    """-r must name a rank of the job. sendrecv on one rank sends to itself: NCCL does that (nccl-tests'
    sendrecv_perf on one GPU), torch.distributed cannot; `direct` says NCCL is (or may yet be) called through
    nccl4py's bindings, as the ranks decide once they know their device."""
    if collective_named(cfg.collective).rooted and cfg.root >= nranks:
        raise UsageError(f"root rank {cfg.root} does not exist: the job has {nranks} ranks (-r 0..{nranks - 1})")
    if cfg.collective == "sendrecv" and nranks < 2 and not direct:
        raise UsageError("sendrecv needs at least 2 ranks here: one rank sends to itself, which NCCL called through "
                         "nccl4py on a GPU does and torch.distributed cannot")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def device_info(torch: Any, rank: int, device: Any, placed: str | None = None) -> DeviceInfo:
    """This rank's device as nccl-tests' "Using devices" line shows it, and how the rank was placed beside it."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        bus = (getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", 0), getattr(props, "pci_device_id", 0))
        return DeviceInfo(rank, os.getpid(), host.hostname(), device.index, "%04x:%02x:%02x" % bus, props.name, placed)
    return DeviceInfo(rank, os.getpid(), host.hostname(), -1, "cpu", f"{_cpu_model()} (gloo)", placed)


def print_header(cfg: BenchConfig, devices: list[DeviceInfo], torch_version: str, device: Any, path: CommPath,
                 colors: dict[int, int] | None = None) -> None:
    """Rank 0's header: version line, the path that drives the collectives and why, what differs, devices, columns."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    emit(f"# gpuval {__version__}: nccl-tests compatible output, torch {torch_version}, backend {backend}")
    emit(f"# collectives through {path.describe()}")
    for note in differences(cfg, device.type == "cuda", path):
        emit(f"# differs from nccl-tests: {note}")
    emit(f"# Collective test starting: {cfg.program}")
    emit(nccltests_text.config_line(cfg.min_bytes, cfg.max_bytes, cfg.step_factor, cfg.step_bytes, cfg.warmup,
                                    cfg.iters, cfg.agg_iters, cfg.check, cfg.graph))
    emit("#")
    emit("# Using devices")
    for d in devices:
        group = (colors or {}).get(d.rank, 0)  # a split's color, as nccl-tests' Group column
        emit(nccltests_text.device_line(d.rank, group, d.pid, d.hostname, d.device, d.device_hex, d.device_info))
    for d in devices:
        if d.placed is not None:
            emit(f"# placed beside its GPU: rank {d.rank}: {d.placed}")
    emit("#")
    for line in nccltests_text.column_header():
        emit(line)


def path_notes(cfg: BenchConfig, device: Any, path: CommPath | None,
               devices: list[DeviceInfo] | None = None) -> dict[str, Any]:
    """What the -J document says of the path that ran (its `gpuval` object): which, why, what still differs, why a
    side is N/A, and how each GPU rank was placed."""
    if path is None or device is None:
        return {}
    notes: dict[str, Any] = {"collectives_through": path.describe(),
                             "differs_from_nccl_tests": differences(cfg, device.type == "cuda", path)}
    placed = {str(d.rank): d.placed for d in devices or [] if d.placed is not None}
    if placed:
        notes["placed_beside_gpu"] = placed
    coll = collective_named(cfg.collective)
    if path.bindings is None and device.type == "cuda" and coll.in_place_only:
        notes["out_of_place"] = f"N/A: torch.distributed has no out-of-place {coll.name}"
    return notes


def recorded_env() -> list[str]:
    """The settings a rank's -J document records: nccl-tests' variables (and gpuval's), secrets hidden."""
    return dsn.recorded_env(nccltests_json.ENV_PREFIXES)
