"""`nvidia-smi -q` captures read into recorded GPU fields (tests/data/nvidia-smi/SOURCE.md): R535 and R565 H100,
R555 A100 with the 500 W board, R510 A100 after Xid 63."""

from __future__ import annotations

from gpuval.node.nvidia_smi import read_query
from tests.conftest import DATA

SMI = DATA / "nvidia-smi"


def test_h100_r535_power_ecc_split_fabric_replays():
    [gpu] = read_query((SMI / "h100-535.183.01-gpud.txt").read_text())
    assert gpu["pci_bus_id"] == "00000000:53:00.0" and gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["power"] == {"enforced_w": 700.0, "default_w": 700.0, "min_w": 200.0, "max_w": 700.0}
    assert gpu["fabric"] == {"state": "completed", "status": "success"}
    assert gpu["pcie"] == {"replays": 120}
    ecc = gpu["ecc"]
    assert ecc["sram_volatile_uncorrected"] == 0 and ecc["dram_aggregate_corrected"] == 0
    assert ecc["sram_threshold_exceeded"] is False and ecc["volatile_uncorrected"] == 0


def test_h100_r565_recovery_action_and_clique():
    [gpu] = read_query((SMI / "h100-565.57.01-thamada.txt").read_text())
    assert gpu["recovery_action"] == 0 and gpu["fabric"]["clique_id"] == 0 and gpu["pcie"]["replays"] == 7


def test_a100_has_no_fabric_state_and_its_own_power():
    [gpu] = read_query((SMI / "a100-80gb-500w-555.42.02-thamada.txt").read_text())
    assert "fabric" not in gpu  # Fabric State N/A on A100: the field is unknown, not "not started"
    assert gpu["power"]["enforced_w"] == 500.0


def test_a100_after_xid_63_has_a_pending_remap_and_dram_corrections():
    [gpu] = read_query((SMI / "a100-xid63-remap-pending-mle.md").read_text())
    assert gpu["row_remap"] == {"corrected_rows": 1, "uncorrected_rows": 0, "pending": True, "failure": False}
    assert gpu["ecc"]["dram_volatile_corrected"] == 177 and gpu["ecc"]["sram_volatile_uncorrected"] == 0
