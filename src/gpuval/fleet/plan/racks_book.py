"""What the fleet planner knows of NVL72 racks (docs/nvl72.md, "Fleet checks of racks"): which trays make each rack,
where that came from, the NVLink domain each tray's node test read, and where each rack stands.

A rack is an NVLink domain: 18 compute trays whose GPUs registered into one `ClusterUUID.CliqueId` (NVIDIA/nccl#1301:
the clique alone is not unique; NVIDIA/topograph builds Slurm blocks from exactly these two fields). The site may
name the racks (a Kubernetes node label, `--rack-label`; a Slurm topology/block block); otherwise the trays' own
domains, read by their node tests' fabric check, are the racks. Plain data: the rules are racks.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from gpuval.fleet.plan.terms import BusbwExpectation, Evidence, Standing

RACK_PURPOSES = ("rack", "rack-pair", "rack-retest")  # the tests racks.py plans, weighs and takes in


@dataclass(frozen=True)
class RackSpec:
    """What the check knows of its racks before it starts: `given` (node -> rack) and where from (`source`: "the
    node label ...", "Slurm topology/block"; empty: the trays' fabric domains), the trays an NVLink domain holds
    (`trays`: 18 for NVL72, from the baseline; None: not known, no rack is judged by its size) and the rack band at
    the test size (`band`: None, judged against the other racks only)."""

    given: Mapping[str, str] = field(default_factory=dict)
    source: str = ""
    trays: int | None = None
    band: BusbwExpectation | None = None


class RackStage(str, Enum):
    """Where a rack stands."""

    WAITING = "waiting"        # its all_reduce is to run (once its trays' node tests are in)
    SPLIT = "split"            # its all_reduce did not pass: its trays are tested in pairs inside the rack
    PASSED = "passed"          # its all_reduce passed: the trays in it are cleared
    FAILED = "failed"          # a finding about the rack as a whole: no tray in it is convicted for it
    NOT_JUDGED = "not judged"  # its all_reduce has nothing to be judged by, or proof of NVLink is missing
    NOT_RUN = "not run"        # its all_reduce could not run max_not_run times


@dataclass
class Rack:
    """One rack: its trays (the checked nodes of it, in the check's order), its domain (what most of its trays
    report), its stage, the tests of it, and the standing of its own verdict."""

    name: str
    trays: list[str]
    domain: str | None = None
    stage: RackStage = RackStage.WAITING
    evidence: list[Evidence] = field(default_factory=list)
    standing: Standing | None = None  # its verdict once it has one (a finding, a pass)
    size: Standing | None = None  # a rack of the wrong size
    not_run: int = 0
    split_round: int | None = None  # the round its in-rack pairs first ran
    pair_means: list[float] = field(default_factory=list)  # its own in-rack pairs' means (GB/s)


@dataclass
class RackBook:
    """Every rack of the check, and what the node tests said of each tray."""

    spec: RackSpec = field(default_factory=RackSpec)
    domains: dict[str, str | None] = field(default_factory=dict)  # node -> its NVLink domain (None: none)
    uptime: dict[str, float] = field(default_factory=dict)  # node -> seconds since its boot, at its node test
    settling: dict[str, str] = field(default_factory=dict)  # node -> why its node test runs again after settling
    settled: dict[str, str] = field(default_factory=dict)  # node -> NVLink came up after the settle time
    racks: dict[str, Rack] = field(default_factory=dict)
    of: dict[str, str] = field(default_factory=dict)  # node -> its rack's name
    misplaced: dict[str, str] = field(default_factory=dict)  # tray -> why its domain is not its rack's
    rack_means: list[float] = field(default_factory=list)  # each rack's all_reduce mean (GB/s): the racks' centre
    good_pairs: list[float] = field(default_factory=list)  # pairs of two known-good trays of a rack that passed

    def rack(self, node: str) -> Rack | None:
        """The rack of `node`, None for a node in none (an HGX node)."""
        name = self.of.get(node)
        return self.racks.get(name) if name is not None else None

    def same_rack(self, a: str, b: str) -> bool:
        """Whether two nodes are trays of one rack (one NVLink domain between them)."""
        return a in self.of and self.of.get(a) == self.of.get(b)
