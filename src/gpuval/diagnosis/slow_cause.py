"""Why a straggler is slow, from what its step records carry beside the times (gpuval.hooks.sensors): its GPU's
NVML reading and its host's load, set against the ranks' in the same windows (the straggler's flagged ones; the ranks' median, which one outlier does not
move).

In this order, the first that holds:

1. "GPU throttled (<reason>)": a clock event reason held its GPU's clocks down for more of the window than the
   other ranks' GPUs (the driver's counters where it keeps them, else the reasons mask at the window's end), by
   more than the others' noise band and RELATIVE_FLOOR of the window; or its SM clock is under theirs by more than
   RELATIVE_FLOOR with no reason given. A busy GPU of a healthy job is power capped too: only more than its peers
   counts.
2. "host side (CPU contention)": its host has more runnable tasks than CPUs, or its hypervisor steals more than
   RELATIVE_FLOOR of the CPU time, beyond the other ranks' hosts (ranks on one host share both: no difference).
3. "GPU slower at full clocks": a GPU rank, not throttled, its SM clock within RELATIVE_FLOOR of the others'.
4. "host side (off CPU)": a rank without a GPU reading that used no more CPU time than the others while computing
   longer: most of its extra time it was off a CPU (stopped, held by a CPU quota, waiting in its own code for I/O
   or a data loader). Neither the run queue nor steal shows a stopped or quota-throttled process: it is not
   runnable. (A GPU rank waiting on a slower GPU is off a CPU too, which is why this is for CPU ranks only.)

Otherwise no label, and why: no reading, or nothing that differs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Mapping

from gpuval.diagnosis.stats import OUTLIER_Z, RELATIVE_FLOOR, band
from gpuval.hooks.record import HELD_KEYS, StepRecord
from gpuval.node.sampler import SLOWDOWN_REASONS

BUSY_CPUS = 1.0  # runnable tasks per CPU beyond which some wait for one
OFF_CPU = 0.5  # of its extra compute time off a CPU: mostly not computing on one


@dataclass(frozen=True)
class Cause:
    """A straggler's label ('' where none) and the evidence, one line."""

    label: str
    why: str


Window = Mapping[int, StepRecord]  # one of the straggler's flagged windows: its rows by rank
Figure = Callable[[StepRecord], "float | None"]
NAN = float("nan")


class Peers:
    """The ranks' figures per window, each computed once however many stragglers a job has (thousands cost linear
    time): per window and figure, the ranks' median and noise half-width. The straggler is among the ranks: the
    median stands against one rank's outlier, and its own figure is compared with it."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], tuple[float, float]] = {}

    def of(self, window: Window, name: str, figure: Figure) -> tuple[float, float]:
        key = (id(window), name)
        if key not in self._cache:
            values = [v for r in window.values() if (v := figure(r)) is not None]
            noise = band(values, OUTLIER_Z, 0.0) if values else None
            self._cache[key] = (noise.center, noise.width) if noise else (NAN, NAN)
        return self._cache[key]

    def compare(self, rank: int, windows: list[Window], name: str, figure: Figure) -> tuple[float, float, float]:
        """(the straggler's median figure, the ranks' median, their noise half-width) over its windows; NaNs where
        either was not read."""
        mine = [v for w in windows if rank in w and (v := figure(w[rank])) is not None]
        centres = [c for w in windows if not math.isnan((c := self.of(w, name, figure))[0])]
        if not mine or not centres:
            return NAN, NAN, NAN
        return statistics.median(mine), statistics.median(c for c, _ in centres), \
            statistics.median(width for _, width in centres)


def _held_share(bit: int, key: str | None) -> Callable[[StepRecord], float | None]:
    """The share of a record's window that reason `bit` held the GPU's clocks: its counter where the record has one,
    else 1 or 0 from the mask at the window's end; None without a GPU reading."""
    def share(r: StepRecord) -> float | None:
        g = r.gpu_now
        if g is None:
            return None
        counted = g.held().get(key or "", 0.0) / max(r.t1 - r.t0, 1e-9)
        masked = 1.0 if g.reasons is not None and g.reasons & bit else 0.0
        return min(1.0, max(counted, masked))
    return share


def _sm_clock(r: StepRecord) -> float | None:
    return r.gpu_now.sm_mhz if r.gpu_now else None


def _gpu_throttled(rank: int, windows: list[Window], peers: Peers) -> Cause | None:
    by_bit = {bit: key for key, bit in HELD_KEYS.items()}
    for bit, name in SLOWDOWN_REASONS.items():
        mine, others, width = peers.compare(rank, windows, f"held {bit}", _held_share(bit, by_bit.get(bit)))
        if mine - others > max(width, RELATIVE_FLOOR):  # NaN compares false: no reading, no label
            return Cause(f"GPU throttled ({name})", f"its GPU's clocks were held by {name} for {mine:.0%} of the "
                                                    f"window against the other ranks' {others:.0%}")
    mine, others, _ = peers.compare(rank, windows, "sm", _sm_clock)
    if others - mine > RELATIVE_FLOOR * others:
        return Cause("GPU throttled (clocks down, no reason given)",
                     f"its GPU runs at {mine:.0f} MHz against the other ranks' {others:.0f} MHz and NVML names no "
                     "reason")
    return None


def _host_contended(rank: int, windows: list[Window], peers: Peers) -> Cause | None:
    mine, others, width = peers.compare(rank, windows, "runq", lambda r: r.cpu.runq if r.cpu else None)
    if mine > BUSY_CPUS and mine - others > max(width, RELATIVE_FLOOR * others):
        return Cause("host side (CPU contention)", f"its host has {mine:.3g} runnable tasks per CPU against the "
                                                   f"other ranks' hosts' {others:.3g}")
    mine, others, width = peers.compare(rank, windows, "steal", lambda r: r.cpu.steal if r.cpu else None)
    if mine > RELATIVE_FLOOR and mine - others > max(width, RELATIVE_FLOOR):
        return Cause("host side (CPU contention)", f"its hypervisor steals {mine:.0%} of its host's CPU time "
                                                   f"against the other ranks' hosts' {others:.0%}")
    return None


def _cpu_seconds(r: StepRecord) -> float | None:
    return r.cpu.cpu_s if r.cpu else None


def _off_cpu(rank: int, windows: list[Window], peers: Peers) -> Cause | None:
    """A CPU rank's extra compute against the median rank's, and how much more CPU it used meanwhile."""
    shares = []
    for w in windows:
        me = w.get(rank)
        cpu, _ = peers.of(w, "cpu", _cpu_seconds)
        if me is None or me.cpu is None or me.cpu.cpu_s is None or math.isnan(cpu):
            continue
        extra = me.compute_s.sum - peers.of(w, "compute", lambda r: r.compute_s.sum)[0]
        more_cpu = me.cpu.cpu_s - cpu
        if extra > 0:
            shares.append(1 - max(0.0, more_cpu) / extra)
    if not shares:
        return None
    off = statistics.median(shares)
    if off >= OFF_CPU:
        return Cause("host side (off CPU)", f"it was off a CPU for {off:.0%} of the time it computes longer than "
                                            "the other ranks (stopped, held by a CPU quota, or waiting in its own "
                                            "code), its host's run queue and steal time no higher than theirs")
    return Cause("", f"it used a CPU for {1 - off:.0%} of the time it computes longer: more work, or a slower CPU")


def slow_cause(rank: int, windows: list[Window], peers: Peers | None = None) -> Cause:
    """The label of straggler `rank` from its flagged windows (see the module's docstring); `peers`: the ranks'
    figures, shared by every straggler of a job."""
    peers = peers or Peers()
    has_gpu = any(w[rank].gpu_now is not None for w in windows if rank in w)
    for rule in (_gpu_throttled, _host_contended):
        found = rule(rank, windows, peers)
        if found is not None:
            return found
    if has_gpu:
        mine, others, _ = peers.compare(rank, windows, "sm", _sm_clock)
        if not (math.isnan(mine) or math.isnan(others)):
            return Cause("GPU slower at full clocks", f"its GPU runs at {mine:.0f} MHz as the other ranks' do "
                                                      f"({others:.0f} MHz) with no throttle reason, and computes "
                                                      "longer")
        return Cause("", "its GPU's clocks were not read")
    return _off_cpu(rank, windows, peers) or Cause("", "no GPU reading, and no host figures in its records")
