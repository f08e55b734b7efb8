"""Which rank holds a data-parallel job back, from its ranks' step records (gpuval.hooks.record).

Every rank's step takes the same time, since all wait for the slowest: the straggler is the rank that computes
longest and so waits least in the collective. Per window of steps (the ranks report the same step ranges), each
rank's median per-step compute is set against the ranks' robust centre and spread (median and MAD:
gpuval.diagnosis.stats.band); a rank is flagged in a window when its compute lies beyond the noise band and beyond
RELATIVE_FLOOR of the step (a difference nobody would act on is not a straggler), and it waits less than the median
rank. A verdict needs persistence: flagged in at least MIN_WINDOWS of the RECENT windows judged and in PERSIST of
them; fewer judged windows than MIN_WINDOWS is "not judged", never "none", and so is no straggler among the ranks
judged where others' records were left out (`left`: what a diagnosis keeps is bounded). A window with fewer than
MIN_RANKS ranks reporting is not judged (two ranks cannot name an outlier), and ranks missing from it are said.

What it costs: in a window the job waits for its slowest rank, so the time lost there is the largest excess compute
of a flagged rank over the ranks' median (sums over the window's steps); summed over the windows, and as a share of
the job's step time. Against the job's own history: a straggler's compute now set against its own compute in its
earliest unflagged windows, where there are MIN_WINDOWS of them.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Literal, Mapping

from gpuval.diagnosis.job_records import absent_ranks, left_out, rank_list
from gpuval.diagnosis.slow_cause import Peers, slow_cause
from gpuval.diagnosis.stats import OUTLIER_Z, RELATIVE_FLOOR, band
from gpuval.hooks.record import StepRecord

MIN_RANKS = 3
MIN_WINDOWS = 3
RECENT = 10
PERSIST = 0.6


@dataclass(frozen=True)
class RankWindow:
    """One rank in one window: per-step medians and window sums (seconds), and whether it was flagged."""

    rank: int
    first: int
    last: int
    n: int
    step_s: float
    compute_s: float
    wait_s: float
    compute_sum: float
    step_sum: float
    flagged: bool = False


@dataclass(frozen=True)
class Straggler:
    """A rank named as the job's straggler: where it ran (the engine's node; the process's own host name and GPU,
    as it claims them), how persistently and by how much it computes longer, and what that cost the job."""

    rank: int
    node: str | None
    host: str
    gpu: int | None
    bus: str | None
    flagged: int
    judged: int
    since_step: int
    compute_s: float
    center_s: float
    wait_s: float
    wait_center_s: float
    lost_s: float
    own_history: float | None = None
    cause: str = ""  # why it is slow (gpuval.diagnosis.slow_cause), '' where its records cannot say
    cause_why: str = ""

    def describe(self) -> str:
        """One line for people."""
        where = self.node or f"{self.host} (as the process says)"
        gpu = f" cuda:{self.gpu}" + (f" ({self.bus})" if self.bus else "") if self.gpu is not None else ""
        history = f"; {self.own_history:.2f}x its own early compute" if self.own_history is not None else ""
        history += f"; {self.cause}: {self.cause_why}" if self.cause else ""
        return (f"rank {self.rank} on {where}{gpu} computes {self.compute_s * 1e3:.4g} ms a step against the ranks' "
                f"{self.center_s * 1e3:.4g} ms and waits {self.wait_s * 1e3:.4g} ms against "
                f"{self.wait_center_s * 1e3:.4g} ms, in {self.flagged} of the last {self.judged} windows (since step "
                f"{self.since_step}){history}")


@dataclass
class StragglerReport:
    """The straggler analysis of a job: its outcome (a straggler named, none, or not judged) with the reason."""

    outcome: Literal["straggler", "none", "not judged"]
    reason: str
    stragglers: list[Straggler] = field(default_factory=list)
    lost_s: float = 0.0
    lost_fraction: float | None = None
    ranks: int = 0
    windows: int = 0
    timeline: list[RankWindow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _newest(records: list[StepRecord]) -> list[StepRecord]:
    """One record per rank and window: each rank's newest process (a restarted rank counts from its restart), and
    of a window reported twice, the later report."""
    latest_pid: dict[int, tuple[float, int]] = {}
    for r in records:
        if r.rank not in latest_pid or r.t1 > latest_pid[r.rank][0]:
            latest_pid[r.rank] = (r.t1, r.pid)
    kept: dict[tuple[int, int, int], StepRecord] = {}
    for r in records:
        if r.pid == latest_pid[r.rank][1]:
            key = (r.rank, r.first, r.last)
            if key not in kept or r.t1 >= kept[key].t1:
                kept[key] = r
    return list(kept.values())


def usable(records: list[StepRecord]) -> list[StepRecord]:
    """The records a rule judges by: each rank's newest process, each window once (`_newest`), every time finite."""
    return [r for r in _newest(records) if all(s.finite() for s in (r.step_s, r.compute_s, r.wait_s))]


def _row(r: StepRecord, flagged: bool) -> RankWindow:
    return RankWindow(r.rank, r.first, r.last, r.n, r.step_s.med, r.compute_s.med, r.wait_s.med, r.compute_s.sum,
                      r.step_s.sum, flagged)


@dataclass
class _Window:
    """One judged window: its rows by rank, the ranks flagged, and the ranks' centres (computed once: a job with
    thousands of stragglers looks each one up here, never rescanning the rows)."""

    key: tuple[int, int]
    rows: dict[int, StepRecord]
    flagged: set[int]
    compute_center: float
    wait_center: float
    sum_center: float

    def excess(self, rank: int) -> float:
        """The window's time lost to `rank`: its excess compute (window sums) over the ranks' median."""
        return self.rows[rank].compute_s.sum - self.sum_center


def _judge_window(key: tuple[int, int], rows: list[StepRecord]) -> _Window:
    """The ranks flagged in one window: compute beyond the noise band and the floor, waiting less than the median."""
    compute = [r.compute_s.med for r in rows]
    noise = band(compute, OUTLIER_Z, 0.0)
    step = statistics.median(r.step_s.med for r in rows)
    width = max(noise.width, RELATIVE_FLOOR * step)
    wait_center = statistics.median(r.wait_s.med for r in rows)
    flagged = {r.rank for r in rows if r.compute_s.med - noise.center > width and r.wait_s.med < wait_center}
    return _Window(key, {r.rank: r for r in rows}, flagged, statistics.median(compute), wait_center,
                   statistics.median(r.compute_s.sum for r in rows))


def find_stragglers(records: list[StepRecord], node_of: Mapping[int, str] | None = None,
                    left: int = 0) -> StragglerReport:
    """The straggler analysis of a job's step records; `node_of` is the engine's attribution rank -> node
    (gpuval.diagnosis.job_records), without which a rank is placed only by its own host name; `left`: the ranks
    whose records were left out of `records` (then no straggler among the rest is "not judged"). Linear in the
    records: the `world` a record claims is never counted up to, and each straggler is looked up by rank."""
    node_of = node_of or {}
    kept = usable(records)
    if not kept:
        return StragglerReport("not judged", "no step records (is gpuval.hooks' StepTimer in the training loop?)")
    windows: dict[tuple[int, int], list[StepRecord]] = defaultdict(list)
    for r in kept:
        windows[(r.first, r.last)].append(r)
    in_windows = Counter(r.rank for r in kept)  # one record per rank and window after _newest
    report = StragglerReport("not judged", "", ranks=len(in_windows))
    judged: list[_Window] = []
    for key in sorted(windows, key=lambda k: (k[1], k[0])):
        rows = sorted(windows[key], key=lambda r: r.rank)
        if len(rows) < MIN_RANKS:
            report.timeline.extend(_row(r, False) for r in rows)
            continue
        judged.append(_judge_window(key, rows))
        report.timeline.extend(_row(r, r.rank in judged[-1].flagged) for r in rows)
    everywhere = [rank for rank, n in in_windows.items() if n == len(windows)]
    missing = absent_ranks(max(r.world for r in kept), everywhere)
    if missing:
        report.notes.append(f"rank(s) {missing} missing from some windows (not reporting, or gone)")
    report.windows = len(judged)
    if not any(r.wait_s.sum > 0 for r in kept):
        report.reason = ("not judged: no rank measured any collective wait (attach the timer to the DDP model, or "
                         "time the collective with timer.wait())")
        return report
    if len(judged) < MIN_WINDOWS:
        report.reason = (f"not judged: {len(judged)} window(s) with {MIN_RANKS} or more ranks reporting; a verdict "
                         f"needs {MIN_WINDOWS} (no verdict from one noisy window)")
        return report
    recent = judged[-RECENT:]
    need = max(MIN_WINDOWS, math.ceil(PERSIST * len(recent)))
    counts = Counter(rank for window in recent for rank in window.flagged)
    named = sorted(rank for rank, n in counts.items() if n >= need)
    if not named:
        worst = max(counts.values(), default=0)
        found = (f"no rank computes persistently longer (at most {worst} of the last {len(recent)} windows; {need} "
                 "needed)")
        if left:  # a verdict on some ranks is none on the job: the slow one may be among those left out
            report.reason = f"not judged: {left_out(left)}; of the {len(in_windows):,} judged, {found}"
        else:
            report.outcome, report.reason = "none", f"no straggler: {found}"
        return report
    if left:
        report.notes.append(f"judged over the {len(in_windows):,} rank(s) kept: {left_out(left)}")
    peers = Peers()
    report.stragglers = [_straggler(rank, judged, recent, node_of, peers) for rank in named]
    report.lost_s = sum(max((w.excess(rank) for rank in w.flagged.intersection(named)), default=0.0)
                        for w in recent)
    total = sum(statistics.median(r.step_s.sum for r in w.rows.values()) for w in recent)
    report.lost_fraction = report.lost_s / total if total > 0 else None
    share = f" ({report.lost_fraction:.1%} of the job's time)" if report.lost_fraction is not None else ""
    report.outcome = "straggler"
    report.reason = (f"straggler(s): rank(s) {rank_list(named)}; the job lost {report.lost_s:.4g} s to them over "
                     f"steps {recent[0].key[0]}-{recent[-1].key[1]}{share}")
    return report


def _straggler(rank: int, judged: list[_Window], recent: list[_Window], node_of: Mapping[int, str],
               peers: Peers) -> Straggler:
    flagged = [w for w in recent if rank in w.flagged]
    mine = [w.rows[rank] for w in flagged]
    first_flagged = next(i for i, w in enumerate(judged) if rank in w.flagged)
    before = [w.rows[rank] for w in judged[:first_flagged] if rank in w.rows]  # unflagged: before its first flag
    history = None
    if len(before) >= MIN_WINDOWS:
        early = statistics.median(r.compute_s.med for r in before[:RECENT])
        history = statistics.median(r.compute_s.med for r in mine) / early if early > 0 else None
    last = mine[-1]
    cause = slow_cause(rank, [w.rows for w in flagged], peers)
    return Straggler(
        rank=rank, node=node_of.get(rank), host=last.host, gpu=last.gpu, bus=last.bus, flagged=len(flagged),
        judged=len(recent), since_step=flagged[0].key[0],
        compute_s=statistics.median(r.compute_s.med for r in mine),
        center_s=statistics.median(w.compute_center for w in flagged),
        wait_s=statistics.median(r.wait_s.med for r in mine),
        wait_center_s=statistics.median(w.wait_center for w in flagged),
        lost_s=sum(w.excess(rank) for w in flagged), own_history=history, cause=cause.label, cause_why=cause.why)
