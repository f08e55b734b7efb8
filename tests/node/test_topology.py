"""GPU <-> NIC links and NUMA placement: the bare-metal PCIe switch case from sysfs (a GPU and a NIC under one
switch on different downstream ports), and Azure VMs whose flattened vPCI (NUMA node -1) only the NCCL topology
file explains (Azure/azhpc-images' ndv4-topo.xml and ndv5-topo.xml, packaged with the recordings: see
tests/data/nccl-topo/SOURCE.md)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest

from gpuval.node.machine import Gpu, GpuInventory
from gpuval.node.nccl_topo import classify, parse_topology, read_topology
from gpuval.node.recorded import RecordedMachine
from gpuval.node.sysfs import LinuxMachine
from gpuval.node.topology import gpu_topology
from tests.node.fake_nvml import h100_node, install

TOPO = resources.files("gpuval.node") / "recorded"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _device(root: Path, chain: list[str], numa: int, cpus: str) -> None:
    """A PCI device at the end of a bridge chain, linked from /sys/bus/pci/devices as the kernel does."""
    dev = root / "sys/devices" / Path(*chain)
    _write(dev / "numa_node", str(numa))
    _write(dev / "local_cpulist", cpus)
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    os.symlink(dev, root / "sys/bus/pci/devices" / chain[-1])


def _hca(root: Path, name: str, chain: list[str], numa: int) -> None:
    _device(root, chain, numa, "0-15" if numa == 0 else "16-31")
    port = root / "sys/class/infiniband" / name / "ports/1"
    for key, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "400 Gb/sec (4X NDR)"),
                       ("link_layer", "InfiniBand")):
        _write(port / key, value)
    os.symlink(root / "sys/devices" / Path(*chain), root / "sys/class/infiniband" / name / "device")


@pytest.mark.parametrize(("a", "b", "numa", "expected"), [
    # a bare-metal tree: GPU and NIC under one switch, different downstream ports
    (["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
     ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"], (0, 0), "PIX"),
    (["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"],
     ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0"], (0, 0), "PXB"),
    (["pci0000:00", "0000:00:01.0"], ["pci0000:00", "0000:00:03.0"], (0, 0), "PHB"),
    (["pci0000:00", "0000:00:01.0"], ["pci0000:40", "0000:40:01.0"], (0, 0), "NODE"),
    (["pci0000:00", "0000:00:01.0"], ["pci0000:80", "0000:80:01.0"], (0, 1), "SYS"),
    (["cpu1", "ffff:ff:02.0"], ["cpu1", "ffff:ff:02.0"], (1, 1), "PIX"),  # NCCL topology: same virtual bridge
])
def test_links_are_classified_as_nvidia_smi_topo_does(a, b, numa, expected):
    assert classify(a, b, *numa) == expected


def test_gpu_and_nic_under_one_switch_are_paired_from_sysfs(tmp_path, monkeypatch):
    """Bare metal: sysfs shows the real tree. The old test compared immediate parent ports and never matched."""
    root = tmp_path / "root"
    _write(root / "sys/devices/system/node/node0/cpulist", "0-15")
    _write(root / "sys/devices/system/node/node1/cpulist", "16-31")
    switch = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]
    _device(root, switch + ["0000:02:00.0", "0000:03:00.0"], 0, "0-15")  # the GPU
    _hca(root, "mlx5_0", switch + ["0000:02:01.0", "0000:04:00.0"], 0)  # same switch, other downstream port
    _hca(root, "mlx5_1", ["pci0000:00", "0000:00:03.0", "0000:05:00.0"], 0)  # same root complex only
    _hca(root, "mlx5_2", ["pci0000:80", "0000:80:01.0", "0000:81:00.0"], 1)  # other socket
    machine = LinuxMachine(root, env={})
    gpu = Gpu(0, pci_bus_id="00000000:03:00.0")
    gpu.numa_node, gpu.cpus, gpu.pci_path = machine.pci_device(gpu.pci_bus_id)
    [place] = gpu_topology(machine, GpuInventory("550", "12.4", [gpu]))
    assert place.links == {"mlx5_0": "PIX", "mlx5_1": "PHB", "mlx5_2": "SYS"}
    assert place.nearest_nics == ["mlx5_0"] and place.local_nics == ["mlx5_0", "mlx5_1"] and place.source == "sysfs"


def test_the_azure_topology_files_are_read_as_nccl_reads_them():
    ndv4 = parse_topology((TOPO / "ndv4-topo.xml").read_text(), "ndv4")
    gpus = sorted(d.bus_id for d in ndv4.devices.values() if d.kind == "gpu")
    nics = sorted(d.bus_id for d in ndv4.devices.values() if d.kind == "nic")
    assert gpus == ["0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0", "000b:00:00.0", "000c:00:00.0",
                    "000d:00:00.0", "000e:00:00.0"]
    assert nics == [f"01{i:02x}:00:00.0" for i in range(1, 9)]
    gpu0 = ndv4.device("00000001:00:00.0")  # NVML's spelling
    assert (gpu0.numa_node, gpu0.cpus[0], gpu0.cpus[-1], gpu0.path) == (1, 24, 47, ["cpu1", "ffff:ff:02.0"])
    ndv5 = parse_topology((TOPO / "ndv5-topo.xml").read_text(), "ndv5")
    assert ndv5.device("0008:00:00.0").path == ["cpu0", "ffff:ff:04.0"] and ndv5.device("0104:00:00.0").numa_node == 0


@pytest.mark.parametrize(("sku", "gpu", "nearest"), [
    ("Standard_ND96asr_v4", 0, ["mlx5_ib0", "mlx5_ib1"]),  # two GPUs and two HCAs per bridge on NDv4
    ("Standard_ND96asr_v4", 4, ["mlx5_ib4", "mlx5_ib5"]),
    ("Standard_ND96isr_H100_v5", 3, ["mlx5_ib3"]),  # one HCA beside each GPU on NDv5
])
def test_recorded_azure_nodes_pair_gpus_and_hcas_through_their_topology_file(sku, gpu, nearest):
    """The recordings now carry what sysfs really shows in the VM (one vPCI domain per device): the pairing comes
    from the topology file, as it does on the node."""
    machine = RecordedMachine.load(sku)
    place = gpu_topology(machine, machine.gpu_inventory())[gpu]
    assert place.nearest_nics == nearest and all(place.links[n] == "PIX" for n in nearest)
    assert place.source.startswith("NCCL_TOPO_FILE=")
    far = [n for n, k in place.links.items() if k == "SYS"]
    assert far  # HCAs on the other socket


def test_numa_minus_one_is_taken_from_the_topology_file(tmp_path, monkeypatch):
    """An Azure VM where sysfs says -1 (and lists every CPU as local): the GPU's NUMA node and CPUs come from
    NCCL_TOPO_FILE, and the inventory says so; without the file the NUMA node stays unknown, with no CPUs."""
    root = tmp_path / "root"
    for node, cpus in enumerate(("0-23", "24-47", "48-71", "72-95")):
        _write(root / f"sys/devices/system/node/node{node}/cpulist", cpus)
    for bus in ("0001", "0002", "0003", "0008", "0009", "000a", "000b", "000c"):
        _device(root, [f"pci{bus}:00", f"{bus}:00:00.0"], -1, "0-95")
    _write(root / "opt/microsoft/ndv4-topo.xml", (TOPO / "ndv4-topo.xml").read_text())
    install(monkeypatch, h100_node())
    inv = LinuxMachine(root, env={"NCCL_TOPO_FILE": "/opt/microsoft/ndv4-topo.xml"}).gpu_inventory()
    gpu0 = inv.gpus[0]
    assert (gpu0.numa_node, gpu0.cpus[0], gpu0.cpus[-1]) == (1, 24, 47)
    assert gpu0.numa_source == f"NCCL_TOPO_FILE={root}/opt/microsoft/ndv4-topo.xml (sysfs says -1)"
    assert inv.gpus[3].numa_node is None  # 0008 is not in the NDv4 file
    bare = LinuxMachine(root, env={}).gpu_inventory().gpus[0]
    assert bare.numa_node is None and bare.cpus == [] and bare.numa_source is None


def test_the_topology_file_named_in_nccl_conf(tmp_path):
    root = tmp_path / "root"
    _write(root / "etc/nccl.conf", "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml")
    _write(root / "opt/microsoft/ndv5-topo.xml", (TOPO / "ndv5-topo.xml").read_text())
    topo = read_topology({}, root)
    assert topo is not None and topo.device("000c:00:00.0").numa_node == 1
    assert read_topology({"NCCL_TOPO_FILE": "/nowhere.xml"}, root) is None
