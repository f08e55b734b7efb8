"""THE NCCL_DEBUG reader on multi-node NVLink (MNNVL) lines, from recorded GB200 logs (tests/data/nccl-debug/SOURCE.md:
NVIDIA/nccl#2303, #1769) and NCCL's own format (src/init.cc): which NVLink domain each GPU registered into, and whether
each communicator used multi-node NVLink."""

from __future__ import annotations

from gpuval.collectives.nccl_debug import read_nccl_network
from tests.conftest import DATA

LOGS = DATA / "nccl-debug"
# NCCL's format (src/init.cc: "MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x") with the
# all-zero cluster UUID and clique of a GPU in no NVLink domain (an H100 reports it so: meta-pytorch/torchcomms#1385)
ZERO = "node7:1:1 [0] NCCL INFO MNNVL busId 0x18000 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0"


def test_a_communicator_on_multi_node_nvlink():
    found = read_nccl_network((LOGS / "mnnvl-on-gb200-nccl-issue2303.log").read_text())
    assert found is not None and found.mnnvl is True and (found.mnnvl_on, found.mnnvl_off) == (1, 0)
    assert found.fabric_domains == ["a44167d15423d758.7d6b24c07d32e7b3.2786"] and found.fabric_unregistered == 0
    assert found.mnnvl_evidence is not None and found.mnnvl_evidence.endswith("localRank 0 MNNVL 1")
    assert found.to_json()["mnnvl_on"] == 1


def test_a_communicator_that_fell_back_from_multi_node_nvlink():
    found = read_nccl_network((LOGS / "mnnvl-off-gb200-nccl-issue2303.log").read_text())
    assert found is not None and found.mnnvl is False and (found.mnnvl_on, found.mnnvl_off) == (0, 1)
    assert found.mnnvl_evidence is not None and found.mnnvl_evidence.endswith("localRank 0 MNNVL 0")


def test_every_gpu_of_a_tray_in_one_domain_and_a_gpu_in_none():
    found = read_nccl_network((LOGS / "mnnvl-fabric-gb200-nccl-issue1769.log").read_text())
    assert found is not None and found.fabric_domains == ["3143b15bc2cd192b.28cc9b5473fb5b93.7ffe"]
    assert found.mnnvl is None  # no communicator line in the excerpt: nothing said of its use
    text = (LOGS / "mnnvl-on-gb200-nccl-issue2303.log").read_text() + ZERO + "\n"
    mixed = read_nccl_network(text)
    assert mixed is not None and mixed.fabric_unregistered == 1 and mixed.mnnvl is True
    assert mixed.mnnvl_evidence == ZERO  # the fall back is quoted, not the line that shows MNNVL 1
    alone = read_nccl_network(ZERO)
    assert alone is not None and alone.mnnvl is False and alone.fabric_domains == []


def test_hostile_mnnvl_lines_are_not_read():
    lines = ["x:1:1 [0] NCCL INFO MNNVL busId 0x1 fabric UUID " + "f" * 5000 + ".1 cliqueId 0x1 state 3 healthMask 0x0",
             "x:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 MNNVL 7",
             "x:1:1 [0] NCCL INFO MNNVL busId 0xzz fabric UUID 1.2 cliqueId 0x3 state 3 healthMask 0x0"]
    found = read_nccl_network("\n".join(lines))
    assert found is None or (found.mnnvl is None and found.fabric_domains == [])
