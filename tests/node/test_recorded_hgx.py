"""The recorded bare-metal HGX H100 8-GPU nodes are one machine's `nvidia-smi -q` of all eight GPUs
(tests/data/nvidia-smi/h100x8-565.57.01-thamada-q.txt), GPU by GPU; the variant with a NIC per GPU keeps those GPUs
and adds only the network side and the NUMA layout."""

from __future__ import annotations

import re

import pytest

from gpuval.node.machine import NotRecorded
from gpuval.node.recorded import RecordedMachine
from tests.conftest import DATA

SMI = (DATA / "nvidia-smi" / "h100x8-565.57.01-thamada-q.txt").read_text()
BLOCKS = dict(re.findall(r"^GPU (\S+)\n(.*?)(?=^GPU |\Z)", SMI, re.M | re.S))


def smi(block: str, label: str, after: str = "") -> str:
    """The value of the first `label : value` line of a GPU's block (after the line holding `after`, when given)."""
    text = block[block.index(after):] if after else block
    return re.search(rf"^\s*{re.escape(label)}\s*: (.*)$", text, re.M).group(1).strip()


@pytest.mark.parametrize("name", ["hgx-h100-8gpu", "hgx-h100-8gpu-ib"])
def test_every_gpu_is_what_its_nvidia_smi_printed(name):
    inv = RecordedMachine.load(name).gpu_inventory()
    assert len(inv.gpus) == 8 == int(re.search(r"Attached GPUs\s*: (\d+)", SMI).group(1))
    assert inv.driver_version == re.search(r"Driver Version\s*: (\S+)", SMI).group(1)
    for g, (bus, block) in zip(inv.gpus, BLOCKS.items()):
        assert g.pci_bus_id == bus == smi(block, "Bus Id") and g.uuid == smi(block, "GPU UUID")
        assert f"0x{g.pci_device_id:08X}" == smi(block, "Device Id") and \
            f"0x{g.pci_subsystem_id:08X}" == smi(block, "Sub System Id")
        assert g.name == smi(block, "Product Name") and g.vbios == smi(block, "VBIOS Version")
        assert g.pcie.replays == int(smi(block, "Replays Since Reset"))
        assert (g.pcie.gen_max, f"{g.pcie.width_current}x") == (int(smi(block, "Max", "PCIe Generation")),
                                                                smi(block, "Current", "Link Width"))
        assert f"{g.temperature.gpu_c} C" == smi(block, "GPU Current Temp")
        assert f"{g.temperature.memory_c} C" == smi(block, "Memory Current Temp")
        assert g.temperature.gpu_slowdown_c is None  # R565 prints T.Limit margins, not the limit
        assert (f"{g.power.enforced_w:.2f} W", f"{g.power.default_w:.2f} W") == (
            smi(block, "Current Power Limit"), smi(block, "Default Power Limit"))
        assert (g.fabric.state, g.fabric.status, str(g.fabric.clique_id)) == (
            smi(block, "State", "Fabric").lower(), smi(block, "Status", "Fabric").lower(), smi(block, "CliqueId"))
        assert f"{g.remap_histogram.max} bank(s)" == smi(block, "Max", "Bank Remap Availability Histogram")
        assert (g.clocks.sm_application, g.clocks.sm_default) == (
            int(smi(block, "Graphics", "\n    Applications Clocks\n")[:-4]),
            int(smi(block, "Graphics", "Default Applications Clocks")[:-4]))
        assert smi(block, "Virtualization Mode") == "None" and g.virtualization == "none"
        assert smi(block, "DRAM Uncorrectable") == "0" and g.ecc.dram_volatile_uncorrected == 0
        assert len(g.nvlink_active) == 18 and all(g.nvlink_active)  # the board's 18 links (not in this capture)


def test_the_bare_capture_records_no_numa_and_the_variant_a_nic_beside_each_gpu():
    bare, ib = RecordedMachine.load("hgx-h100-8gpu"), RecordedMachine.load("hgx-h100-8gpu-ib")
    with pytest.raises(NotRecorded, match="no NUMA nodes recorded"):
        bare.numa_nodes()
    assert bare.ib_ports() == [] and [g.numa_node for g in bare.gpu_inventory().gpus] == [None] * 8
    ports = ib.ib_ports()
    assert [(p.hca, p.rate_gbps, p.state, p.numa_node) for p in ports] == [
        (f"mlx5_{i}", 400, "ACTIVE", 0 if i < 4 else 1) for i in range(8)]
    gpus = ib.gpu_inventory().gpus
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.pci_path == p.pci_path for g, p in zip(gpus, ports))  # each HCA behind its GPU's switch (PIX)
    assert gpus[0].cpus[:2] == [0, 1] and gpus[7].cpus[-1] == 223
