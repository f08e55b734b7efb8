"""The ranks of a job on this node, as a diagnosis run inside the job's allocation sees them: each rank's state file
(gpuval.node.rank_state: identity, progress), whether its process still runs (and in which state), and its Python stacks
(gpuval.node.pystacks). What it finds speaks only for this node; the caller names the node.

A state file is only a process's claim, and the probe may run as the operator (root) over files a job's user wrote.
So it reads one user's files, `uid`'s (the job's owner as the scheduler names it, else the probe's own uid), from that
user's own folder (gpuval.node.own_folder: a real folder of that uid that no one else may write), each file
regular, not reached through a symlink, of that owner. A record of another node (another host name, or a process
whose environment names another scheduler node: a hooks folder on shared storage, fake nodes sharing one /tmp) is
left to that node's probe, counted in one note. A record is taken as the job's rank only when this node shows it is
one (`distrust`): it names its process's start time, it started within the job's time, and the process it names is
alive, is that user's, started at that time and, where its environment is readable, is in the job diagnosed. Only
such a rank is read by py-spy or signalled for its own dump (gpuval's signal alone, through a pidfd opened before
the checks, so the signal reaches that process or none; the dump read from `<pid>.stacks` of the same folder,
checked the same way). A rank whose process ended, or whose pid another process took, is listed as gone and never
acted on; any other file is passed over with a note the diagnosis shows.
"""

from __future__ import annotations

import itertools
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from gpuval.node.flight_recorder import PLACE_VARS
from gpuval.node.host import hostname, job_of, scheduler_node
from gpuval.node.own_folder import open_in, own_folder
from gpuval.node.pystacks import STATES, DumpRequest, Stacks, process_stacks, process_state
from gpuval.node.rank_state import (SIZE, STACK_SIGNAL, STACKS_SUFFIX, SUFFIX, Identity, Progress, hooks_dir,
                                    parse_state, process_start)

MAX_FILES = 4096  # state files looked at in one folder: a folder flooded with names costs no more
MAX_NOTES = 8  # notes of files passed over, then a count
MAX_ENVIRON = 1 << 20  # bytes of a process's environment read for its job id
MAX_PATH = 4096  # characters of a path kept from a rank's environment (Linux's PATH_MAX)


class RankProbe(BaseModel):
    """One rank found on this node: who it is, how far it got, its process's state and its stacks."""

    identity: Identity
    progress: Progress
    state: str  # the /proc state letter, "gone" when the process ended (its state file stayed: it was killed)
    stacks: Stacks | None = None
    read_at: float = 0.0  # Unix seconds

    @property
    def running(self) -> bool:
        """The process exists and is not stopped, a zombie or dead."""
        return self.state not in ("gone", "T", "t", "Z", "X")

    def describe_state(self) -> str:
        """The process's state in words."""
        return "gone (its process ended without closing the timer)" if self.state == "gone" else \
            STATES.get(self.state, self.state)

    def idle_s(self) -> float:
        """Seconds since the rank last made progress (a step, a collective launched or completed)."""
        return max(self.read_at - self.progress.progress_at, 0.0)


@dataclass
class RankScan:
    """What the probe found in one folder: the ranks, sorted by rank, and notes on the files it passed over (at
    most MAX_NOTES, then how many more)."""

    ranks: list[RankProbe] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)
    more: int = 0
    elsewhere: int = 0  # records of other nodes' ranks
    folder: Path | None = None  # the folder read, once checked as the user's own (None: missing or refused)
    # of each taken rank whose process lives (by pid): what its environment says of where it dumps its Flight
    # Recorder (flight_recorder.PLACE_VARS), read with the checks that took it
    places: dict[int, dict[str, str]] = field(default_factory=dict)

    def note(self, text: str) -> None:
        """A file passed over, said (the first MAX_NOTES in words, the rest counted)."""
        if len(self.passed_over) < MAX_NOTES:
            self.passed_over.append(text)
        else:
            self.more += 1

    def notes(self) -> list[str]:
        """The notes, and the count of the ones left out."""
        return self.passed_over + ([f"{self.more} more state file(s) passed over"] if self.more else []) + (
            [f"{self.elsewhere} state file(s) of other nodes' ranks left to their nodes (a hooks folder on shared "
             "storage)"] if self.elsewhere else [])


@dataclass(frozen=True)
class Scope:
    """The ranks a probe may take: of user `uid`, on host `host` (and scheduler node `node`, where the probe's
    environment names one), of `job` (None: any), started from `since` (None: any time) until `now` (Unix seconds)."""

    uid: int
    host: str
    job: str | None
    since: float | None
    now: float
    node: str | None = None


@dataclass(frozen=True)
class Seen:
    """What this node shows of the process a record names: its state letter (None: no such process), owner, start
    (rank_state.process_start), the job and scheduler node its environment names (None: the environment cannot
    be read, or names no node), and what it says of the Flight Recorder's places (flight_recorder.PLACE_VARS)."""

    state: str | None
    uid: int | None = None
    start: int | None = None
    job: str | None = None
    node: str | None = None
    places: dict[str, str] = field(default_factory=dict)


def look(pid: int) -> Seen:
    """The process `pid` as /proc shows it now."""
    state = process_state(pid)
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        state = None
    if state is None:
        return Seen(None)
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            items = handle.read(MAX_ENVIRON).split(b"\0")
        env = dict(item.decode(errors="replace").split("=", 1) for item in items if b"=" in item)
    except OSError:
        return Seen(state, uid, process_start(pid))
    places = {key: env[key] for key in PLACE_VARS if 0 < len(env.get(key, "")) < MAX_PATH}
    return Seen(state, uid, process_start(pid), job_of(env), scheduler_node(env), places)


def wanted(identity: Identity, scope: Scope) -> bool:
    """The record is of the job and its time (others' are passed over without a word: other jobs share the
    node). A record that names no job is no job's."""
    return (scope.job is None or identity.job == scope.job) and (scope.since is None or identity.started >= scope.since)


def elsewhere(identity: Identity, seen: Seen, scope: Scope) -> bool:
    """The record is another node's rank's: it names another host, or its live process's environment names another
    scheduler node than the probe's."""
    return identity.host != scope.host or (alive(identity, seen) and None not in (seen.node, scope.node)
                                           and seen.node != scope.node)


def alive(identity: Identity, seen: Seen) -> bool:
    """The process the record names still runs: that pid, started at the time the record names."""
    return seen.state is not None and identity.proc_start is not None and seen.start == identity.proc_start


def distrust(identity: Identity, seen: Seen, scope: Scope) -> str:
    """Why a wanted record may not be taken as the job's rank on this node ('' when it may). A record whose process
    is gone may be taken (it is listed as gone and never acted on)."""
    if identity.started > scope.now:
        return "says its rank started in the future"
    if identity.proc_start is None:
        return "names no process start time, so its process cannot be told from another"
    if not alive(identity, seen):
        return ""
    if seen.uid != scope.uid:
        return f"names process {identity.pid}, which is uid {seen.uid}'s, not the job's user's ({scope.uid})"
    if scope.job is not None and seen.job is not None and seen.job != scope.job:
        return f"names process {identity.pid}, which is in job {seen.job!r}, not {scope.job}"
    return ""


@contextmanager
def _pidfd(pid: int) -> Iterator[int | None]:
    """A pidfd of `pid` (None where there is no such process or the kernel has no pidfds)."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _stacks(folder: int, identity: Identity, pidfd: int | None, uid: int, timeout_s: float) -> Stacks:
    """A taken rank's stacks: py-spy, else its own dump, asked for only with gpuval's signal, through the pidfd,
    from `<pid>.stacks` of the checked folder (and of the same owner)."""
    pid = identity.pid
    if not identity.signal:
        return process_stacks(pid, None, timeout_s)
    if identity.signal != STACK_SIGNAL or pidfd is None:
        return process_stacks(pid, None, timeout_s, "its stack-dump signal was not sent: " + (
            f"its record names signal {identity.signal}, not gpuval's" if pidfd is not None else "no pidfd of it"))
    try:
        dump = open_in(folder, f"{pid}{STACKS_SUFFIX}", uid)
    except OSError as exc:
        return process_stacks(pid, None, timeout_s, f"its stacks file {pid}{STACKS_SUFFIX}: {exc.strerror}")
    try:
        return process_stacks(pid, DumpRequest(pidfd, identity.signal, dump), timeout_s)
    finally:
        os.close(dump)


def _take(folder: int, name: str, scope: Scope, stacks: bool, timeout_s: float, scan: RankScan) -> None:
    """One state file of the folder: taken as a rank (its stacks read where asked), passed over with a note, or
    (another job's, older, not a state file at all) left out."""
    try:
        with os.fdopen(open_in(folder, name, scope.uid), "rb") as handle:
            read = parse_state(handle.read(SIZE))
    except OSError as exc:
        scan.note(f"{name} passed over: {exc.strerror}")
        return
    if read is None or not wanted(read[0], scope):
        return
    identity, progress = read
    with _pidfd(identity.pid) as pidfd:
        seen = look(identity.pid)
        if elsewhere(identity, seen, scope):
            scan.elsewhere += 1
            return
        why = distrust(identity, seen, scope)
        if why:
            scan.note(f"{name} passed over: it {why}")
            return
        state = seen.state if alive(identity, seen) and seen.state else "gone"
        probe = RankProbe(identity=identity, progress=progress, state=state, read_at=time.time())
        if state != "gone":
            scan.places[identity.pid] = seen.places
        if stacks and state != "gone":
            probe.stacks = _stacks(folder, identity, pidfd, scope.uid, timeout_s)
            if process_start(identity.pid) != identity.proc_start:  # py-spy reads by pid: it must still be the rank
                probe.stacks = Stacks(source="", problem=f"process {identity.pid} ended while its stacks were read")
    scan.ranks.append(probe)


def probe_ranks(folder: Path | None = None, job: str | None = None, since: float | None = None,
                stacks: bool = True, timeout_s: float = 10.0, uid: int | None = None) -> RankScan:
    """Every rank on this node with a state file in `folder` (default: user `uid`'s hooks folder,
    gpuval.node.rank_state.hooks_dir), of `job` when given (ranks that name another job, or none, are passed over)
    and started at or after `since` (Unix seconds: older files are other jobs'), taken as the module says for user
    `uid` (default: this process's); with `stacks`, each running rank's stacks (a stopped one's are tried with
    py-spy, which can read it)."""
    owner = os.geteuid() if uid is None else uid
    where = folder or hooks_dir(uid=owner)
    scan = RankScan()
    try:
        fd = own_folder(where, owner)
    except FileNotFoundError:
        return scan
    except OSError as exc:
        scan.note(f"{where} passed over: {exc.strerror}")
        return scan
    scan.folder = where
    try:
        with os.scandir(fd) as entries:
            names = sorted(itertools.islice((e.name for e in entries if e.name.endswith(SUFFIX)), MAX_FILES))
        scope = Scope(owner, hostname(), job, since, time.time(), scheduler_node(os.environ))  # now: every file listed
        for name in names:
            _take(fd, name, scope, stacks, timeout_s, scan)
    finally:
        os.close(fd)
    scan.ranks.sort(key=lambda p: (p.identity.rank, -p.identity.started))
    return scan
