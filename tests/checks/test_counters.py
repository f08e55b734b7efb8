"""power_limit, pcie_errors, ecc (SRAM/DRAM), row_remap, fabric and ib_errors judged on real captures: the
nvidia-smi -q outputs of H100 and A100 nodes (read by node/nvidia_smi.py into the recording's GPU fields), SuperBench's
Azure NDv4/NDmv4 nvidia-smi -q -x, GPUd's /sys/class/infiniband of an H100 node read through the real sysfs reader
(tests/data/*/SOURCE.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.nvidia_smi import read_query
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, H100, context, no_imds  # noqa: F401
from tests.node.sysfs_trees import infiniband_tree

SMI = DATA / "nvidia-smi"


def run(name: str, ctx):
    [result] = run_suite(ctx, [REGISTRY[name]]).results
    return result


def captured(name: str):
    """Every GPU of the recording given GPU 0's fields of a real nvidia-smi -q capture (its bus id kept)."""
    [fields] = read_query((SMI / name).read_text())
    fields = {k: v for k, v in fields.items() if k not in ("pci_bus_id", "name")}

    def apply(data: dict[str, Any]) -> None:
        for key, value in fields.items():
            base = data["gpu_defaults"].get(key)
            data["gpu_defaults"][key] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
    return apply


@pytest.mark.parametrize("name", ["h100-535.183.01-gpud.txt", "h100-535.161.08-gpud.txt", "h100-565.57.01-thamada.txt"])
def test_real_h100_captures_on_the_h100_baseline(name):
    ctx = context(H100, captured(name))
    assert run("power_limit", ctx).status is Status.PASS  # 700 W of 700 W
    assert run("fabric", ctx).status is Status.PASS  # Completed / Success
    assert run("ecc", ctx).status is Status.PASS and "SRAM and DRAM counts within limits" in run("ecc", ctx).reason
    assert run("xid", ctx).status is Status.PASS  # recovery action None where R565 prints it


def test_pcie_replays_of_real_h100s():
    """67 and 7 replays since reset pass; GPUd's 120 is over DCGM's 80 per test run: a warn, never a fail."""
    assert run("pcie_errors", context(H100, captured("h100-535.161.08-gpud.txt"))).status is Status.PASS
    assert run("pcie_errors", context(H100, captured("h100-565.57.01-thamada.txt"))).status is Status.PASS
    warned = run("pcie_errors", context(H100, captured("h100-535.183.01-gpud.txt")))
    assert warned.status is Status.WARN and "120 replays is over the warn limit 80" in warned.reason


def test_the_500_w_a100_board_on_each_a100_sku():
    """thamada's A100-SXM4-80GB is the 500 W HGX 4-GPU board: above Azure's 400 W, so no cap on NDmv4."""
    board = captured("a100-80gb-500w-555.42.02-thamada.txt")
    result = run("power_limit", context(A100, lambda d: (board(d), d.update(sku="Standard_ND96amsr_A100_v4"))))
    assert result.status is Status.PASS and result.value == 500.0


def test_a100_after_xid_63():
    """ml-engineering's A100 after Xid 63: 177 DRAM corrections (far under AzNHC's 20000000) and a pending remap."""
    ctx = context(A100, captured("a100-xid63-remap-pending-mle.md"))
    assert run("ecc", ctx).status is Status.PASS
    remap = run("row_remap", ctx)
    assert remap.status is Status.WARN and "pending" in remap.reason


@pytest.mark.parametrize("name, sku", [("ndv4-a100-40gb-superbench.json", "Standard_ND96asr_v4"),
                                       ("ndmv4-a100-80gb-superbench.json", "Standard_ND96amsr_A100_v4")])
def test_azure_a100_power_limits_from_superbench(name, sku):
    """SuperBench's nvidia-smi -q -x of Azure NDv4 / NDmv4: enforced = default = 400 W, the baselines' figure."""
    power = json.loads((SMI / name).read_text())["gpu[0]"]["power_readings"]
    watts = {k: float(power[k].split()[0]) for k in ("enforced_power_limit", "default_power_limit")}

    def apply(data):
        data["gpu_defaults"]["power"] = {"enforced_w": watts["enforced_power_limit"],
                                         "default_w": watts["default_power_limit"]}
        data["sku"] = sku
    result = run("power_limit", context(A100, apply))
    assert result.status is Status.PASS and result.value == 400.0 and result.expected == 400.0


def test_gpud_infiniband_tree_through_the_sysfs_reader(tmp_path: Path):
    """GPUd's H100 tree: every HCA shows 15 buffer overruns and mlx5_1 a saturated link_downed (255): warns; the
    RoCE bond (Ethernet) is not judged; no syslog under that root, so flaps are not read and it says so."""
    root = infiniband_tree(tmp_path / "root")
    (root / "proc").mkdir(parents=True)
    (root / "proc/stat").write_text("btime 1731000000\n")
    result = run("ib_errors", make_context(LinuxMachine(root), "Standard_ND96isr_H100_v5"))
    assert result.status is Status.WARN
    assert "mlx5_1 port 1 link_downed: 255 events is over the warn limit 0" in result.reason
    assert "mlx5_0 port 1 excessive_buffer_overrun_errors: 15 errors" in result.reason
    assert "mlx5_bond_0/1" not in result.details["counters"]
