"""The ranks of a job on this node, as a diagnosis run inside the job's allocation sees them: each rank's state file
(gpuval.node.rank_state: identity, progress), whether its process still runs (and in which state), and its Python stacks
(gpuval.node.pystacks). What it finds speaks only for this node; the caller names the node.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel

from gpuval.node.rank_state import SUFFIX, Identity, Progress, hooks_dir, process_start, read_state
from gpuval.node.pystacks import STATES, Stacks, process_state, process_stacks


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


def _alive(identity: Identity) -> str:
    """The process's state letter, or "gone" when it ended or its pid now belongs to another process."""
    state = process_state(identity.pid)
    if state is None:
        return "gone"
    if identity.proc_start is not None and process_start(identity.pid) != identity.proc_start:
        return "gone"
    return state


def probe_ranks(folder: Path | None = None, job: str | None = None, since: float | None = None,
                stacks: bool = True, timeout_s: float = 10.0) -> list[RankProbe]:
    """Every rank on this node with a state file in `folder` (default: gpuval.node.rank_state.hooks_dir()), of `job`
    when given (ranks that name another job are passed over) and started at or after `since` (Unix seconds: older
    files are other jobs'), sorted by rank; with `stacks`, each running rank's stacks (a stopped one's are tried
    with py-spy, which can read it)."""
    found: list[RankProbe] = []
    for path in sorted((folder or hooks_dir()).glob(f"*{SUFFIX}")):
        read = read_state(path)
        if read is None:
            continue
        identity, progress = read
        if (job and identity.job and identity.job != job) or (since is not None and identity.started < since):
            continue
        state = _alive(identity)
        probe = RankProbe(identity=identity, progress=progress, state=state, read_at=time.time())
        if stacks and state != "gone":
            probe.stacks = process_stacks(identity.pid, identity.signal,
                                          Path(identity.stacks) if identity.stacks else None, timeout_s)
        found.append(probe)
    return sorted(found, key=lambda p: (p.identity.rank, -p.identity.started))
