"""Slurm node state through scontrol: read the node's state and drain reason, then drain or resume it.

Reading is `scontrol show node NAME -o` (one node, one RPC: cheap enough for a HealthCheckProgram on every node,
unlike `sinfo --json`, which returns every node of the cluster). Writing is `scontrol update nodename=NAME
state=drain reason=...` or `state=undrain` (RESUME where Slurm lacks UNDRAIN), each argument one argv element (no
shell), so a reason with spaces is one value. Changing a node's state needs Slurm operator rights: root (slurmd's
HealthCheckProgram, prolog and epilog run as root), SlurmUser, or an account with AdminLevel=Operator.
slurmd runs HealthCheckProgram with SLURMD_NODENAME and no PATH: scontrol is looked up on PATH, else in /usr/bin
and /bin; give its full path (`scontrol=`) where Slurm lives elsewhere.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Sequence

from gpuval.errors import EngineError, MissingDependency
from gpuval.operate.node_state import REASON_PREFIX, NodeAction, drain_reason
from gpuval.results.model import Status

TIMEOUT_S = 20  # each scontrol call; HealthCheckProgram itself is killed by slurmd after 60 s
# scontrol prints the reason as "Reason=TEXT [USER@TIME]"; later fields (Comment=, Extra=) may follow.
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\[\]@]*@[^\[\]]*\])?(?= [A-Z][A-Za-z]*=|$)")
_STATE = re.compile(r"\bState=(\S+)")


@dataclass(frozen=True)
class SlurmNode:
    """A node as scontrol shows it: the state with its flags (IDLE+DRAIN, DOWN+NOT_RESPONDING) and the reason."""

    name: str
    state: str
    reason: str

    @property
    def flags(self) -> set[str]:
        return set(self.state.upper().rstrip("*").split("+"))

    @property
    def drained(self) -> bool:
        """Draining or drained: the DRAIN flag, whatever the base state."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return "DOWN" in self.flags

    @property
    def ours(self) -> bool:
        """Whether gpuval set the reason (NHC's rule: the reason's prefix names its owner)."""
        return self.reason.startswith(REASON_PREFIX)


def parse_node(name: str, line: str) -> SlurmNode:
    """A SlurmNode from `scontrol show node NAME -o` (one line)."""
    state = _STATE.search(line)
    reason = _REASON.search(line)
    return SlurmNode(name=name, state=state.group(1) if state else "UNKNOWN",
                     reason=reason.group(1).strip() if reason else "")


def decide(verdict: Status, node: SlurmNode, hold: str = "") -> tuple[str, str]:
    """("drain" | "resume" | "keep", why): pure, the whole ownership rule in one place. `hold`: why a PASS or WARN
    must not lift gpuval's own drain now."""
    if verdict is Status.FAIL:
        if (node.drained or node.down) and node.reason and not node.ours:
            return "keep", f"already {node.state} with someone else's reason ({node.reason!r}): left as it is"
        return "drain", "failed checks"
    if verdict in (Status.PASS, Status.WARN):
        if node.drained and node.ours and hold:
            return "keep", f"gpuval's drain ({node.reason!r}) kept: {hold}"
        if node.drained and node.ours:
            return "resume", f"healthy again; gpuval's drain ({node.reason!r}) lifted"
        if node.drained:
            return "keep", f"drained by someone else ({node.reason!r}): not resumed"
        return "keep", f"healthy, in service ({node.state})"
    what = "could not run" if verdict is Status.ERROR else "nothing was judged"
    return "keep", f"{what}: node state left as it is ({node.state})"


def _scontrol(scontrol: str, args: list[str]) -> str:
    try:
        proc = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise MissingDependency(f"{scontrol} not found: run on a Slurm node, or give scontrol's full path") from None
    except subprocess.TimeoutExpired:
        raise EngineError(f"scontrol {args[0]} {args[1]}: no answer in {TIMEOUT_S} s (slurmctld down?)") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[0]
        raise EngineError(f"scontrol {' '.join(args[:2])}: {first}")
    return proc.stdout


def read_node(name: str, scontrol: str = "scontrol") -> SlurmNode:
    """The node's state and reason now."""
    return parse_node(name, _scontrol(scontrol, ["show", "node", name, "-o"]).strip())


def _undrain(node: str, scontrol: str) -> None:
    """Lift the drain only: UNDRAIN leaves a DOWN node down (slurmctld's call, not gpuval's), where RESUME would
    also bring it up. Slurm releases without UNDRAIN reject it as an invalid state: RESUME there."""
    try:
        _scontrol(scontrol, ["update", f"nodename={node}", "state=undrain"])
    except EngineError as exc:
        if "Invalid node state" not in str(exc):
            raise
        _scontrol(scontrol, ["update", f"nodename={node}", "state=resume"])


def apply_slurm(verdict: Status, node: str, run_id: str, fault_codes: Sequence[str],
                scontrol: str = "scontrol", hold: str = "") -> NodeAction:
    """Drain, resume or leave one Slurm node (see `decide`)."""
    current = read_node(node, scontrol)
    action, why = decide(verdict, current, hold)
    if action == "drain":
        reason = drain_reason(fault_codes, run_id)
        _scontrol(scontrol, ["update", f"nodename={node}", "state=drain", f"reason={reason}"])
        return NodeAction("slurm", node, verdict, "drained", f"{why}: reason {reason!r}")
    if action == "resume":
        _undrain(node, scontrol)
        return NodeAction("slurm", node, verdict, "resumed", why)
    return NodeAction("slurm", node, verdict, "unchanged", why)
