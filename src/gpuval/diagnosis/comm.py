"""Communication fail-slows, from a job's step records (gpuval.hooks.record): a slow link or NIC makes every rank
wait longer in its collectives while no rank computes longer, so the straggler rule sees nobody. In production
studies these are the most common fail-slows (Alibaba's Greyhound, ATC'25: about 40%, compute under 2%).

The rule compares the job with its own past, rank by rank. Each rank's early windows (the first judged windows, at
most RECENT, and never more than half of them) give its reference: the median of its per-step wait, compute and
step, and their spread (median and MAD: gpuval.diagnosis.stats.band). A later window is flagged when every rank
reporting in it waits longer than its reference by more than the noise band and by more than FLOOR of its step,
while its compute stays within the band (or RELATIVE_FLOOR of its step) of its own. A verdict needs persistence, as
the straggler rule's: flagged in at least MIN_WINDOWS of the RECENT windows after the reference and in PERSIST of
them. FLOOR is twice the straggler's floor because this rule compares across time, where a shared machine's load
drifts, and a rank against its peers in one window does not: a healthy job's jitter stays under it.

What it costs: in a flagged window each rank waits longer than it used to by the same time the job's step grew (its
compute is flat); the median rank's rise (window sums) is the window's time lost, summed over the flagged windows
and as a share of the job's step time.

The job's bus bandwidth: where the records carry the bus bytes their collectives move (`xfer`), each window's is
the ranks' bytes over the least wait of any rank (the rank that arrives last waits only for the collectives
themselves), the job's the median over the recent windows; set against the fleet's all_reduce band for the job's
nodes and ranks (Baseline.allreduce_band). That band is measured at its own size: a figure under its limit at
smaller messages judges nothing (smaller messages reach less bus bandwidth), a figure within it does; on DDP the
figure counts only the wait after the last bucket is launched, so it reads high. A link slow from the job's start,
which the job's own past cannot show, is judged by the band where one judges, else said to be not judged.

The rule names no node: the suspect is the job's links, all of them (`LinkSuspect`, kind "links", the job's nodes
as the engine places its ranks); a re-test of those links with known-good partners names the node.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from gpuval.diagnosis.job_records import left_out
from gpuval.diagnosis.stats import OUTLIER_Z, RELATIVE_FLOOR, NoiseBand, band
from gpuval.diagnosis.straggler import MIN_WINDOWS, PERSIST, RECENT, usable
from gpuval.hooks.record import StepRecord
from gpuval.results.model import Status

FLOOR = 2 * RELATIVE_FLOOR  # of a rank's own early step: the least rise in its wait that counts
MIN_RANKS = 2  # a collective needs two ranks; the rule compares each with itself, not with the others
GB = 1e9


@dataclass(frozen=True)
class CommWindow:
    """One judged window of the job: the ranks' medians (per-step wait, compute, step) against their own early
    ones, whether it is flagged, the time the job lost in it (seconds, window sums) and its bus bandwidth (GB/s)."""

    first: int
    last: int
    ranks: int
    wait_s: float
    compute_s: float
    step_s: float
    base_wait_s: float
    base_compute_s: float
    flagged: bool = False
    reference: bool = False  # one of the early windows the ranks are set against
    lost_s: float = 0.0
    busbw_gbps: float | None = None
    xfer_s: float | None = None  # the least any rank waited in the collectives that moved its bytes (window sum)


@dataclass(frozen=True)
class LinkSuspect:
    """What a communication slowdown nominates: the job's links, no node (kind "links"; `nodes`: the job's nodes,
    which a re-test of their links with known-good partners would take)."""

    nodes: list[str]
    why: str
    kind: Literal["links"] = "links"


@dataclass
class BusBandwidth:
    """The job's effective bus bandwidth (GB/s) against the fleet's all_reduce band for its nodes and ranks."""

    outcome: Literal["below band", "within band", "not judged"]
    reason: str
    gbps: float | None = None
    band: str | None = None
    expected_gbps: float | None = None
    message_bytes: float | None = None  # bus bytes per collective, on average


@dataclass
class CommReport:
    """The communication analysis of a job: its outcome (communication slow, none, not judged) with the reason, the
    windows judged, the time lost, the bus bandwidth and, when slow, the links it nominates."""

    outcome: Literal["communication slow", "none", "not judged"]
    reason: str
    windows: list[CommWindow] = field(default_factory=list)
    lost_s: float = 0.0
    lost_fraction: float | None = None
    since_step: int | None = None
    bandwidth: BusBandwidth | None = None
    suspect: LinkSuspect | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Reference:
    """A rank's own early windows: per-step wait, compute and step, with the noise bands of wait and compute."""

    wait: NoiseBand
    compute: NoiseBand
    step: float

    def rose(self, r: StepRecord) -> bool:
        return r.wait_s.med - self.wait.center > max(OUTLIER_Z * self.wait.sigma, FLOOR * self.step)

    def flat(self, r: StepRecord) -> bool:
        return abs(r.compute_s.med - self.compute.center) <= max(OUTLIER_Z * self.compute.sigma,
                                                                 RELATIVE_FLOOR * self.step)

    def lost(self, r: StepRecord) -> float:
        return max(0.0, r.wait_s.sum - r.n * self.wait.center)


def _windows(kept: list[StepRecord]) -> list[list[StepRecord]]:
    """The windows where MIN_RANKS or more ranks report, in step order, each window's rows by rank."""
    by_key: dict[tuple[int, int], list[StepRecord]] = defaultdict(list)
    for r in kept:
        by_key[(r.first, r.last)].append(r)
    return [sorted(by_key[k], key=lambda r: r.rank) for k in sorted(by_key, key=lambda k: (k[1], k[0]))
            if len(by_key[k]) >= MIN_RANKS]


def _references(early: list[list[StepRecord]]) -> dict[int, _Reference]:
    """Each rank's reference from the early windows (a rank with fewer than MIN_WINDOWS of them has none)."""
    rows: dict[int, list[StepRecord]] = defaultdict(list)
    for window in early:
        for r in window:
            rows[r.rank].append(r)
    return {rank: _Reference(band([r.wait_s.med for r in mine], OUTLIER_Z, 0.0),
                             band([r.compute_s.med for r in mine], OUTLIER_Z, 0.0),
                             statistics.median(r.step_s.med for r in mine))
            for rank, mine in rows.items() if len(mine) >= MIN_WINDOWS}


def _busbw(rows: list[StepRecord]) -> tuple[float | None, float | None]:
    """A window's bus bandwidth (GB/s) and the least wait any rank spent moving its bus bytes (every rank must say
    them); (None, None) where they do not."""
    moved = [r.xfer for r in rows if r.xfer is not None and r.xfer.bus_bytes > 0]
    if len(moved) < len(rows):
        return None, None
    seconds = min(x.seconds for x in moved)
    return (statistics.median(x.bus_bytes for x in moved) / seconds / GB if seconds > 0 else None), seconds


def _judge(rows: list[StepRecord], refs: dict[int, _Reference], reference: bool) -> CommWindow:
    """One window against the ranks' references: flagged (never a reference window) when every rank that has one
    waits longer with flat compute."""
    mine = [r for r in rows if r.rank in refs]
    flagged = (not reference and len(mine) >= MIN_RANKS
               and all(refs[r.rank].rose(r) and refs[r.rank].flat(r) for r in mine))
    busbw, xfer_s = _busbw(rows)
    return CommWindow(
        first=rows[0].first, last=rows[0].last, ranks=len(rows),
        wait_s=statistics.median(r.wait_s.med for r in rows), compute_s=statistics.median(r.compute_s.med for r in rows),
        step_s=statistics.median(r.step_s.med for r in rows),
        base_wait_s=statistics.median(refs[r.rank].wait.center for r in mine) if mine else math.nan,
        base_compute_s=statistics.median(refs[r.rank].compute.center for r in mine) if mine else math.nan,
        flagged=flagged, reference=reference,
        lost_s=statistics.median(refs[r.rank].lost(r) for r in mine) if flagged else 0.0, busbw_gbps=busbw,
        xfer_s=xfer_s)


def find_comm_slow(records: list[StepRecord], node_of: Mapping[int, str] | None = None,
                   baseline: Any = None, left: int = 0) -> CommReport:
    """The communication analysis of a job's step records; `node_of`: the engine's rank -> node (the job's nodes);
    `baseline`: the job's nodes' SKU baseline (gpuval.baselines.Baseline), whose all_reduce band judges its bus
    bandwidth (None: not judged); `left`: the ranks whose records were left out of `records` (then a rise not
    found in the rest is "not judged": those ranks' links may be the slow ones)."""
    nodes = sorted(set((node_of or {}).values()))
    kept = usable(records)
    windows = _windows(kept)
    if not kept or not any(r.wait_s.sum > 0 for r in kept):
        return CommReport("not judged", "not judged: no rank measured any collective wait (no step records, or no "
                                        "collective timed)")
    world = max(r.world for r in kept)
    early_count = min(RECENT, len(windows) // 2)
    refs = _references(windows[:early_count])
    judged = [_judge(w, refs, i < early_count) for i, w in enumerate(windows)]
    recent = [w for w in judged if not w.reference][-RECENT:]
    bandwidth = judge_bandwidth(recent or judged, kept, baseline, len(nodes), world)
    report = CommReport("not judged", "", windows=judged, bandwidth=bandwidth)
    if early_count < MIN_WINDOWS or len(recent) < MIN_WINDOWS:
        report.reason = (f"not judged against the job's own past: {len(windows)} window(s) with {MIN_RANKS} or more "
                         f"ranks; the rule needs {2 * MIN_WINDOWS} (its early ones, then its recent ones)")
    else:
        _verdict(report, recent, nodes, left)
    if report.outcome != "communication slow" and bandwidth.outcome == "below band":
        _slow_from_start(report, recent or judged, bandwidth, nodes)
    elif report.outcome != "communication slow":
        report.reason += f"; bus bandwidth {bandwidth.reason}"
    return report


def _verdict(report: CommReport, recent: list[CommWindow], nodes: list[str], left: int) -> None:
    need = max(MIN_WINDOWS, math.ceil(PERSIST * len(recent)))
    flagged = [w for w in recent if w.flagged]
    if len(flagged) < need:
        found = (f"every rank's wait rose with flat compute in {len(flagged)} of the last {len(recent)} windows "
                 f"({need} needed)")
        if left:
            report.reason = f"not judged: {left_out(left)}; of the ranks judged, {found}"
        else:
            report.outcome, report.reason = "none", f"not communication slow: {found}"
        return
    report.lost_s = math.fsum(w.lost_s for w in flagged)
    total = math.fsum(w.step_s * (w.last - w.first + 1) for w in recent)  # per-step medians times the steps
    report.lost_fraction = report.lost_s / total if total > 0 else None
    report.since_step = flagged[0].first
    first = flagged[0]
    share = f" ({report.lost_fraction:.1%} of the job's time)" if report.lost_fraction is not None else ""
    report.outcome = "communication slow"
    report.reason = (f"communication slow: every rank waits {first.wait_s * 1e3:.4g} ms a step against its own "
                     f"early {first.base_wait_s * 1e3:.4g} ms while computing {first.compute_s * 1e3:.4g} ms "
                     f"against {first.base_compute_s * 1e3:.4g} ms, in {len(flagged)} of the last {len(recent)} "
                     f"windows (since step {first.first}); the job lost {report.lost_s:.4g} s to it{share}")
    report.suspect = _links(nodes, "every rank waits longer in its collectives while none computes longer")


def _slow_from_start(report: CommReport, recent: list[CommWindow], bw: BusBandwidth, nodes: list[str]) -> None:
    """A job whose bus bandwidth is under the band from its start: slow, with the time lost against the band's
    expected figure."""
    expected = bw.expected_gbps
    lost = 0.0
    if expected:  # the time spent moving the bytes, less what it takes at the band's expected bandwidth
        lost = math.fsum(max(0.0, w.xfer_s * (1 - w.busbw_gbps / expected)) for w in recent
                         if w.busbw_gbps and w.xfer_s)
    report.outcome, report.lost_s = "communication slow", lost
    report.reason = f"communication slow: bus bandwidth {bw.reason}" + (
        f"; the job lost about {lost:.4g} s to it against the band's expected {expected:g} GB/s" if expected else "")
    report.suspect = _links(nodes, "the job's bus bandwidth is under its fleet's band")


def _links(nodes: list[str], why: str) -> LinkSuspect:
    return LinkSuspect(nodes, f"the job's links ({', '.join(nodes) or 'no node placed'}): {why}; no node is named "
                              "by this rule alone: a re-test of the job's links with known-good partners names it")


def judge_bandwidth(windows: list[CommWindow], kept: list[StepRecord], baseline: Any, nodes: int,
                    world: int) -> BusBandwidth:
    """The job's bus bandwidth over `windows` (the median of theirs) against the all_reduce band of its nodes and
    ranks; what keeps it from being judged is said."""
    figures = [w.busbw_gbps for w in windows if w.busbw_gbps is not None]
    if not figures:
        return BusBandwidth("not judged", "not judged: no record carries the bytes its collectives move (DDP's "
                                          "hook, the timed process group and timer.wait(nbytes=...) give them)")
    gbps = statistics.median(figures)
    per_coll = [r.xfer.bus_bytes / r.coll for r in kept if r.xfer is not None and r.coll > 0]
    message = statistics.median(per_coll) if per_coll else None
    band_found = baseline.allreduce_band(nodes, world) if baseline is not None and nodes else None
    shown = f"{gbps:.4g} GB/s"
    if band_found is None:
        why = ("no SKU baseline or profile given (--sku, --profile)" if baseline is None else
               f"no all_reduce band for {nodes} node(s) and {world} ranks on {baseline.sku}")
        return BusBandwidth("not judged", f"{shown}, not judged: {why}", gbps, message_bytes=message)
    judged = band_found.judge(gbps)
    size = band_found.size_bytes
    band_bus = size * 2 * (world - 1) / world if size else None
    found = BusBandwidth("within band", f"{shown} against {band_found.name}: {judged.reason}", gbps,
                         band_found.name, band_found.expected, message)
    if judged.status in (Status.FAIL, Status.WARN):
        if band_bus is not None and (message is None or message < band_bus):
            found.outcome = "not judged"
            found.reason = (f"{shown}, not judged: under {band_found.name}'s limit, but its collectives move "
                            f"{_size(message)} each against the band's {_size(band_bus)} (smaller messages reach "
                            "less bus bandwidth)")
        else:
            found.outcome = "below band"
    return found


def _size(nbytes: float | None) -> str:
    if nbytes is None:
        return "an unknown size"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"
