"""What a fleet check's jobs carry back about NVL72 racks (docs/nvl72.md, "Fleet checks of racks"):

- each node test's NVLink domain, read on the submitting side from the record of the node's `fabric` check (its
  per-GPU fabric registration, node.fabric.FabricInfo): `ClusterUUID.CliqueId` when every registered GPU shares one
  (NVIDIA/nccl#1301: the clique alone is not unique), None otherwise (an HGX node's zeros, no fabric record);
- a rack test's proof that NCCL used multi-node NVLink: each rank of a rack's all_reduce runs NCCL with
  NCCL_DEBUG=INFO into a file of its own (NCCL_DEBUG_FILE, `%p` its pid), reads it back with THE NCCL_DEBUG reader
  after its collectives, and prints one `nvlink` line; the reader tallies them into the test's NvlinkProof.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuval.node.fabric import UUID, ZERO_UUID
from gpuval.results.data import HealthData
from gpuval.results.model import Result
from gpuval.fleet.plan.terms import NvlinkProof

MAX_QUOTE = 500  # characters of an evidence line taken from a node


def domain_of(records: list[Result]) -> str | None:
    """The NVLink domain of a node from its fabric check's record: the one `ClusterUUID.CliqueId` its registered
    GPUs share; None where there is no record, no GPU registered in a domain, or more than one domain (the fabric
    check fails that node)."""
    seen: set[str] = set()
    for record in records:
        if record.name != "fabric" or not isinstance(record.data, HealthData):
            continue
        gpus = record.data.details.get("fabric")
        for info in gpus.values() if isinstance(gpus, dict) else ():
            domain = _domain(info) if isinstance(info, dict) else None
            if domain:
                seen.add(domain)
    return seen.pop() if len(seen) == 1 else None


def _domain(info: dict[str, Any]) -> str | None:
    clique, uuid = info.get("clique_id"), info.get("cluster_uuid")
    if info.get("state") != "completed" or info.get("status") != "success":
        return None
    if type(clique) is not int or not 0 < clique <= 0xFFFFFFFF:
        return None
    if not isinstance(uuid, str) or not UUID.match(uuid) or uuid == ZERO_UUID:
        return None
    return f"{uuid.lower()}.{clique}"


# ---- a rack test's proof ------------------------------------------------------------------------------------------


def proof_env(folder: Path) -> dict[str, str]:
    """What a rack test's rank runs NCCL with: its INIT lines (fabric registration, each communicator's MNNVL, NVLS)
    into a file of its own in `folder` (NCCL expands %h and %p: host and pid)."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": str(folder / "nccl.%h.%p")}


def proof_fields(folder: Path) -> dict[str, Any] | None:
    """This rank's `nvlink` line: what its NCCL log says (None when NCCL wrote none: gloo ranks)."""
    from gpuval.collectives.nccl_debug import read_nccl_network

    logs = sorted(folder.glob(f"nccl.*.{os.getpid()}"))
    if not logs:
        return None
    found = read_nccl_network("\n".join(p.read_text(errors="replace") for p in logs))
    if found is None:
        return {"mnnvl": None, "nvls": None, "unregistered": 0, "evidence": ""}
    return {"mnnvl": found.mnnvl, "nvls": found.nvls, "unregistered": found.fabric_unregistered,
            "evidence": found.mnnvl_evidence or ""}


@dataclass
class NvlinkTally:
    """A rack test's `nvlink` lines so far, one per rank."""

    ranks: int = 0
    mnnvl: int = 0
    nvls: int = 0
    unregistered: int = 0
    evidence: str = ""
    quotes_fall_back: bool = False  # `evidence` is a line of a rank that fell back

    def take(self, doc: dict[str, Any]) -> str:
        """Add one rank's line; returns why it is malformed ('' when taken)."""
        mnnvl, nvls, zero, quote = doc.get("mnnvl"), doc.get("nvls"), doc.get("unregistered"), doc.get("evidence")
        if mnnvl not in (True, False, None) or nvls not in (True, False, None) or type(zero) is not int or zero < 0 \
                or not isinstance(quote, str):
            return "an nvlink line that is not one"
        self.ranks += 1
        self.mnnvl += mnnvl is True
        self.nvls += nvls is True
        self.unregistered += min(zero, 1 << 20)
        fell = mnnvl is not True or nvls is not True or zero > 0
        if quote and (not self.evidence or (fell and not self.quotes_fall_back)):
            self.evidence, self.quotes_fall_back = quote[:MAX_QUOTE], fell
        return ""

    def proof(self) -> NvlinkProof | None:
        """The test's proof (None: no rank's line came back)."""
        if not self.ranks:
            return None
        return NvlinkProof(self.ranks, self.mnnvl, self.nvls, self.unregistered, self.evidence)
