"""Pin plans on real host layouts: SMT hosts keep hyperthread siblings in one rank, an unknown NUMA node is
refused instead of homing every rank on node 0, and the plan says where a NUMA node
came from when sysfs could not tell."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval.errors import UsageError
from gpuval.node.cpus import parse_cpulist
from gpuval.node.machine import Gpu, GpuInventory, NumaNode
from gpuval.node.pinning import plan_bindings, plan_notes, render
from gpuval.node.sysfs import LinuxMachine


def _smt_host(root: Path) -> None:
    """Two sockets of 56 cores with SMT: node0 = 0-55,112-167, CPU n's sibling is n+112 (as the kernel lists it)."""
    for node, cpus in ((0, "0-55,112-167"), (1, "56-111,168-223")):
        path = root / f"sys/devices/system/node/node{node}/cpulist"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cpus + "\n")
    for cpu in range(224):
        core = cpu % 112
        path = root / f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{core},{core + 112}\n")


def test_smt_siblings_stay_with_one_rank(tmp_path):
    _smt_host(tmp_path)
    numa = LinuxMachine(tmp_path, env={}).numa_nodes()
    assert numa[0].cores[:2] == [[0, 112], [1, 113]] and len(numa[0].cores) == 56
    plan = plan_bindings(numa, [0, 0, 0, 0, 1, 1, 1, 1], 8)
    owner = {cpu: b.local_rank for b in plan for cpu in b.cpus}
    for b in plan:
        assert len(b.cpus) == 28  # 14 whole cores
        assert all(owner[cpu % 112] == owner[cpu % 112 + 112] for cpu in b.cpus)  # both threads of each core
    assert plan[0].cpus == list(range(0, 14)) + list(range(112, 126))
    assert plan[2].cpus == list(range(28, 42)) + list(range(140, 154))  # not rank 0's siblings 112-139


def test_unknown_numa_node_is_refused_not_put_on_node_0():
    numa = [NumaNode(i, parse_cpulist(c)) for i, c in enumerate(("0-23", "24-47", "48-71", "72-95"))]
    with pytest.raises(UsageError, match="GPU 2's NUMA node is unknown .*NCCL_TOPO_FILE"):
        plan_bindings(numa, [1, 1, None, 0, 3, 3, 2, 2], 8)
    with pytest.raises(UsageError, match="GPU 0 is on NUMA node 7, which lists no CPUs"):
        plan_bindings(numa, [7], 1)
    single = plan_bindings([NumaNode(0, list(range(16)))], [None, None], 2)  # one node: -1 means that node
    assert [b.cpus for b in single] == [list(range(8)), list(range(8, 16))]


def test_the_plan_says_where_numa_nodes_came_from():
    gpu = Gpu(0, pci_bus_id="0001:00:00.0", numa_node=1,
              numa_source="NCCL_TOPO_FILE=/opt/microsoft/ndv4-topo.xml (sysfs says -1)")
    notes = plan_notes(GpuInventory("550", None, [gpu, Gpu(1, numa_node=0)]))
    assert notes == ["GPU 0 NUMA node 1 from NCCL_TOPO_FILE=/opt/microsoft/ndv4-topo.xml (sysfs says -1)"]
    plan = plan_bindings([NumaNode(0, list(range(24))), NumaNode(1, list(range(24, 48)))], [1, 0], 2)
    text = render(plan, "mpirun", notes)
    assert text.startswith("# GPU 0 NUMA node 1 from NCCL_TOPO_FILE=")
    assert "--mca rmaps_rank_file_physical 1" in text and "rank 0=+n0 slot=24-47" in text
