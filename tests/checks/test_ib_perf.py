"""ib_write_bw end to end through the real sysfs reader and the real loopback runner: GPUd's H100 InfiniBand tree
under a test root, and a stand-in ib_write_bw on PATH (a real process acting as perftest's server and client,
printing SuperBench's published loopback sweep). The H100 band against AzNHC's published per-HCA figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuval.baselines import load_baseline
from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import no_imds  # noqa: F401
from tests.node.sysfs_trees import infiniband_tree
from tests.node.tools import fake_tool, only_on_path

SWEEP = DATA / "perftest" / "ib_write_bw-all-sizes-superbench.log"


def _perftest(bin_dir: Path) -> None:
    """Client prints SuperBench's -a sweep (its 65536-byte row: 21167.79 MB/s = 177.6 Gb/s) once its server runs."""
    fake_tool(bin_dir, "ib_write_bw", f"""case "$*" in
  *localhost*) [ -e "{bin_dir}/up.$4" ] || {{ echo " Couldn't connect to localhost"; exit 1; }}
               echo "$@" >> "{bin_dir}/clients"; cat "{SWEEP}";;
  *) : > "{bin_dir}/up.$4"; sleep 0.2;;
esac""")


def test_host_memory_loopback_through_each_active_hca(tmp_path: Path, monkeypatch):
    """ND40rs_v2's band is host memory at 65536 bytes (AzNHC check_ib_bw_non_gdr 78 65536): no GPU needed."""
    only_on_path(monkeypatch, tmp_path / "bin")
    _perftest(tmp_path / "bin")
    ctx = make_context(LinuxMachine(infiniband_tree(tmp_path / "root")), "Standard_ND40rs_v2")
    [result] = run_suite(ctx, [REGISTRY["ib_write_bw"]]).results
    assert result.status is Status.PASS, result.reason
    assert "8 HCAs" in result.reason and "host memory, 65536 bytes" in result.reason
    assert result.value == pytest.approx(21167.79 * 8 * 2**20 / 1e9) and result.expected == 78
    clients = (tmp_path / "bin/clients").read_text().splitlines()
    assert len(clients) == 8 and all("-s 65536" in c and "--use_cuda" not in c for c in clients)
    assert sorted(re.search(r"-d (\S+)", c).group(1) for c in clients) == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]  # not the RoCE bond


def test_gpudirect_loopback_needs_the_gpus(tmp_path: Path, monkeypatch):
    """H100's band reads from GPU memory: without a driver here the check says so instead of measuring host memory."""
    only_on_path(monkeypatch, tmp_path / "bin")
    _perftest(tmp_path / "bin")
    ctx = make_context(LinuxMachine(infiniband_tree(tmp_path / "root")), "Standard_ND96isr_H100_v5")
    [result] = run_suite(ctx, [REGISTRY["ib_write_bw"]]).results
    assert result.status is Status.SKIPPED and "no NVIDIA driver" in result.reason


def test_not_installed_here(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    ctx = make_context(LinuxMachine(infiniband_tree(tmp_path / "root")), "Standard_ND96isr_H100_v5")
    [result] = run_suite(ctx, [REGISTRY["ib_write_bw"]]).results
    assert result.status is Status.SKIPPED and "ib_write_bw (perftest, linux-rdma/perftest) is not installed" in result.reason


def test_h100_band_against_aznhc_published_runs():
    """AzNHC's health.log of an ND96isr_H100_v5: eight HCAs at 392.82-393.01 Gb/s pass; its conf's 380 warns below."""
    log = (DATA / "perftest" / "aznhc-health-log-nd96isr_h100_v5.txt").read_text()
    figures = [float(x) for x in re.findall(r"IB BW=([\d.]+) Gbps", log)]
    assert len(figures) == 8 and min(figures) == 392.82
    base = load_baseline("Standard_ND96isr_H100_v5")
    assert all(base.judge("ib_write_bw_gdr_gbps", f).status is Status.PASS for f in figures)
    assert base.judge("ib_write_bw_gdr_gbps", 379.9).status is Status.WARN
    assert base.judge("ib_write_bw_gdr_gbps", 360.9).status is Status.FAIL


def test_each_hca_reads_from_the_gpu_beside_it():
    """On the recorded ND96asr_v4 (ndv4-topo.xml pairs each HCA with one GPU) the GDR loopback of mlx5_ibN reads
    from that GPU, named by PCI bus id (perftest's --use_cuda_bus_id: CUDA's device order cannot mislead it)."""
    from tests.checks.cases_hardware import _perftest
    from tests.health_support import A100, context

    [result] = run_suite(context(A100, _perftest()), [REGISTRY["ib_write_bw"]]).results
    assert result.status is Status.PASS
    assert result.details["gpus"] == {f"mlx5_ib{i}": bus for i, bus in enumerate(
        ["0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0", "000b:00:00.0", "000c:00:00.0",
         "000d:00:00.0", "000e:00:00.0"])}
