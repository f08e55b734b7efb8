"""The 1 x H200 VM recordings are the real run's values: the GPU's state as its nvidia-smi -q printed it, the busy
variant's other process as nvidia-smi listed it, and the figures gpuval took."""

from __future__ import annotations

import re

import pytest
import yaml

from gpuval.errors import UsageError
from gpuval.node.recorded import RecordedMachine, recorded_data
from tests.conftest import DATA

SMI = (DATA / "nvidia-smi" / "h200-580.159.04-gpuval-run.txt").read_text()


def smi(label: str, after: str = "") -> str:
    """The value of the first `label : value` line (after the line holding `after`, when given)."""
    text = SMI[SMI.index(after):] if after else SMI
    return re.search(rf"^\s*{re.escape(label)}\s*: (.*)$", text, re.M).group(1).strip()


def test_the_h200_recording_is_what_its_nvidia_smi_printed():
    m = RecordedMachine.load("h200-vm")
    inv = m.gpu_inventory()
    [g] = inv.gpus
    assert inv.driver_version == smi("Driver Version") and inv.cuda_version == smi("CUDA Version")
    assert g.name == smi("Product Name") and g.uuid == smi("GPU UUID") and g.vbios == smi("VBIOS Version")
    assert g.pci_bus_id == smi("Bus Id") and f"{g.memory_total_mib} MiB" == smi("Total", "FB Memory Usage")
    assert (g.pcie.gen_max, g.pcie.gen_current) == (int(smi("Max", "PCIe Generation")), int(smi("Current",
                                                                                                "PCIe Generation")))
    assert f"{g.pcie.width_current}x" == smi("Current", "Link Width")
    assert g.pcie.replays == int(smi("Replays Since Reset"))
    assert f"{g.power.default_w:.2f} W" == smi("Default Power Limit")
    assert f"{g.power.min_w:.2f} W" == smi("Min Power Limit")
    hist = g.remap_histogram
    assert [f"{n} bank(s)" for n in (hist.max, hist.high, hist.partial, hist.low, hist.none)] == [
        smi(k, "Bank Remap Availability Histogram") for k in ("Max", "High", "Partial", "Low", "None")]
    assert smi("Unrepairable Memory") == "No" and g.unrepairable_memory is False
    assert f"{g.temperature.gpu_c} C" == smi("GPU Current Temp") and f"{g.temperature.memory_c} C" == smi(
        "Memory Current Temp")
    assert smi("Virtualization Mode") == "Pass-Through" and g.virtualization == "pass_through"
    assert smi("Compute Mode") == "Default" and g.compute_mode == "default"
    assert smi("SW Power Capping") == "0 us" and g.clock_event_counters.sw_power_cap_s == 0.0
    assert (g.clocks.sm_application, g.clocks.mem_max) == (int(smi("Graphics", "\n    Applications Clocks\n")[:-4]),
                                                          int(smi("Memory", "Max Clocks")[:-4]))
    assert smi("Device Id") == "0x233510DE" and smi("Sub System Id") == "0x18BF10DE"  # the GPU-model keys
    assert m.cuda_start().devices == 1 and m.gpu_activity([0]).processes == []


def test_the_busy_variant_is_the_same_machine_with_the_other_process_and_its_figures():
    idle, busy = recorded_data("h200-vm"), recorded_data("h200-vm-busy")
    assert busy["gpus"] == idle["gpus"] and busy["driver_version"] == idle["driver_version"]
    [other] = RecordedMachine(busy).gpu_activity([0]).processes
    # run2-console.txt: nvidia-smi --query-compute-apps while the other process ran: "1255, python3, 1002 MiB"
    assert (other.gpu, other.pid, other.name, other.used_memory_mib) == (0, 1255, "python3", 1002)
    # run1's noisy neighbour: every GEMM and HBM figure about half; the copy engines not shared
    assert busy["measurements"]["hbm_triad_gbps"] == 2116.58 and busy["measurements"]["gemm_sustained_bf16_tflops"] \
        == 309.605
    assert busy["measurements"]["d2h_gbps"] == idle["measurements"]["d2h_gbps"]  # kept from the machine it is based on
    assert RecordedMachine(busy).gpu_activity([1]).processes == []  # only the GPUs asked about


def test_a_recording_of_processes_with_an_unknown_field_is_one_line(tmp_path):
    data = recorded_data("h200-vm")
    data["processes"] = [{"gpu": 0, "pid": 7, "command": "python3"}]
    with pytest.raises(UsageError, match=r"processes\[0\]: unknown field\(s\) command"):
        RecordedMachine(data).gpu_activity([0])
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump({"based_on": "h200-vm", "description": "x", "gpu_utilization_pct": {0: 97}}))
    seen = RecordedMachine.load(str(path)).gpu_activity([0])
    assert (seen.loads[0].gpu_pct_mean, seen.loads[0].gpu_pct_min) == (97, 97) and seen.processes == []
    assert seen.attributable  # recorded in the host's PID namespace unless it says `pid_namespace: own`
