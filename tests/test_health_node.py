"""node/: sysfs under an injected root, this machine's real sysfs, IMDS from a local server, baselines as data."""

from __future__ import annotations

import http.server
import os
import threading
import time
from pathlib import Path

import pytest

from gpuval.checks.baselines import NoBaseline, find_baseline, load_baseline, packaged_skus
from gpuval.checks.suite import all_checks, make_context, run_suite
from gpuval.errors import UsageError
from gpuval.node import host
from gpuval.node.cpus import cpu_mask, format_cpulist, parse_cpulist, parse_hex_mask
from gpuval.node.imds import detect_sku, imds_vm_size
from gpuval.node.machine import NoGpuDriver
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.health_support import no_imds  # noqa: F401


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def ndv4_sysfs(tmp_path: Path) -> Path:
    """A sysfs tree laid out as the kernel does on ND96asr_v4 (two HCAs, four NUMA nodes, a kmsg file)."""
    root = tmp_path / "root"
    for node, cpus in enumerate(("0-23", "24-47", "48-71", "72-95")):
        _write(root / f"sys/devices/system/node/node{node}/cpulist", cpus)
    for hca, bus, numa, state, rate in (("mlx5_ib0", "0101:00:00.0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)"),
                                        ("mlx5_ib1", "0102:00:00.0", 1, "1: DOWN", "10 Gb/sec (4X SDR)")):
        dev = root / "sys/devices/LNXSYSTM:00/pci" / bus
        _write(dev / "numa_node", str(numa))
        _write(dev / "local_cpulist", "24-47")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(dev, root / "sys/bus/pci/devices" / bus)
        port = root / "sys/class/infiniband" / hca / "ports/1"
        _write(port / "state", state)
        _write(port / "phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled")
        _write(port / "rate", rate)
        _write(port / "link_layer", "InfiniBand")
        os.symlink(dev, root / "sys/class/infiniband" / hca / "device")
    (root / "dev/infiniband").mkdir(parents=True)
    (root / "dev/infiniband/uverbs0").write_text("")
    _write(root / "dev/kmsg", "6,1020,5162,-;NVRM: Xid (PCI:0001:00:00): 79, pid=0, GPU has fallen off the bus.")
    return root


def test_sysfs_reader_on_an_injected_tree(ndv4_sysfs: Path):
    m = LinuxMachine(ndv4_sysfs)
    assert [(n.id, n.cpus[0], n.cpus[-1]) for n in m.numa_nodes()] == [(0, 0, 23), (1, 24, 47), (2, 48, 71), (3, 72, 95)]
    ports = m.ib_ports()
    assert [(p.hca, p.state, p.rate_gbps, p.numa_node, p.pci_bus_id) for p in ports] == [
        ("mlx5_ib0", "ACTIVE", 200.0, 1, "0101:00:00.0"), ("mlx5_ib1", "DOWN", 10.0, 1, "0102:00:00.0")]
    assert m.rdma_device_files() == ["uverbs0"]
    assert m.kernel_log() == ["NVRM: Xid (PCI:0001:00:00): 79, pid=0, GPU has fallen off the bus."]
    assert m.pci_device("00000101:00:00.0")[:2] == (1, list(range(24, 48)))


def test_ib_ports_check_on_the_injected_tree(ndv4_sysfs: Path):
    ctx = make_context(LinuxMachine(ndv4_sysfs), "Standard_ND96asr_v4")
    result = next(c for c in all_checks() if c.name == "ib_ports").run(ctx)
    assert result.status is Status.FAIL and "mlx5_ib1 port 1 is DOWN" in result.reason


def test_this_machine_real_sysfs_skips_gpu_checks_without_traceback():
    """The real path: NVML finds no driver here, sysfs is this sandbox's own."""
    machine = LinuxMachine()
    with pytest.raises(NoGpuDriver):
        machine.gpu_inventory()
    nodes = machine.numa_nodes()
    assert nodes and all(n.cpus for n in nodes)
    run = run_suite(make_context(machine, None), all_checks())
    assert {r.status for r in run.results} <= {Status.SKIPPED, Status.PASS, Status.ERROR}
    gpu_checks = [r for r in run.results if r.name not in ("ib_ports",)]
    assert all(r.status is Status.SKIPPED and "no NVIDIA driver" in r.reason for r in gpu_checks)
    where = host.where()
    assert where.gpu_count == 0 and where.gpu_model is None


class _Imds(http.server.BaseHTTPRequestHandler):
    delay = 0.0
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        self.hits.append(self.path)
        time.sleep(self.delay)
        ok = self.headers.get("Metadata") == "true" and "vmSize" in self.path
        self.send_response(200 if ok else 400)
        self.end_headers()
        self.wfile.write(b"Standard_ND96isr_H100_v5" if ok else b"Bad request")

    def log_message(self, *args):
        pass


@pytest.fixture
def imds_server():
    servers = []
    hits: list[str] = []

    def start(delay: float = 0.0) -> str:
        handler = type("H", (_Imds,), {"delay": delay, "hits": hits})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text"

    start.hits = hits  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_imds_from_a_local_server(imds_server):
    url = imds_server()
    assert imds_vm_size(url) == "Standard_ND96isr_H100_v5"
    assert detect_sku(None, url) == "Standard_ND96isr_H100_v5"
    assert detect_sku("Standard_ND96asr_v4", url) == "Standard_ND96asr_v4"  # --sku overrides


def test_imds_timeout_is_short_and_quiet(imds_server):
    url = imds_server(delay=3.0)
    start = time.monotonic()
    assert imds_vm_size(url, timeout=1.0) is None
    assert time.monotonic() - start < 2.5
    assert imds_vm_size("http://127.0.0.1:9/closed") is None


def test_where_names_the_sku_imds_reports_asking_once_per_process(imds_server, monkeypatch):
    """bench/lammps/train records get their SKU from where(): the same detection as `gpuval health` (a local IMDS
    stand-in here), asked once per process; GPUVAL_SKU and the caller's SKU still win."""
    monkeypatch.setenv("GPUVAL_IMDS_ENDPOINT", imds_server())
    assert host.where(gpu_count=0).sku == "Standard_ND96isr_H100_v5"
    assert host.where(ranks=8, engine="slurm", gpu_count=0).sku == "Standard_ND96isr_H100_v5"
    assert len(imds_server.hits) == 1
    assert host.where(gpu_count=0, sku="Standard_ND96asr_v4").sku == "Standard_ND96asr_v4"
    monkeypatch.setenv("GPUVAL_SKU", "Standard_ND40rs_v2")
    assert host.where(gpu_count=0).sku == "Standard_ND40rs_v2"


def test_where_without_imds_has_no_sku():
    assert host.where(gpu_count=0).sku is None  # conftest: IMDS is a closed port on 127.0.0.1


def test_nvml_not_supported_is_absent_other_errors_are_kept():
    """The classification of real nvidia-ml-py exceptions (NVML itself cannot run without a GPU): "not supported"
    reads as None, a permission or unknown error is kept per field so checks say "could not read"."""
    import pynvml

    from gpuval.node.nvml import NvmlReadError, _GpuReads
    from gpuval.node.nvml import optional as _opt

    def raising(code):
        def call():
            raise pynvml.NVMLError(code)
        return call

    assert _opt(raising(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert _opt(raising(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)) is None
    with pytest.raises(NvmlReadError, match="could not read NVLink state: NVML says Insufficient Permissions"):
        _opt(raising(pynvml.NVML_ERROR_NO_PERMISSION), "NVLink state")
    reads = _GpuReads()
    assert reads.get("nvlink_active", raising(pynvml.NVML_ERROR_INVALID_ARGUMENT),
                     (pynvml.NVMLError_InvalidArgument,)) is None
    assert reads.get("ecc", raising(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert reads.unreadable == {}
    assert reads.get("nvlink_active", raising(pynvml.NVML_ERROR_UNKNOWN)) is None
    assert reads.unreadable == {"nvlink_active": "could not read nvlink active: NVML says Unknown Error"}


def test_published_minimums_warn_and_fail_a_noise_band_below():
    """No bandwidth band fails at its expected figure: a healthy node a little under it warns, never fails."""
    for sku in packaged_skus():
        for band in load_baseline(sku).bands.values():
            if band.unit == "GB/s" and band.fail_below is not None:
                assert band.fail_below < band.expected, (sku, band.name)
                assert band.warn_below is not None and band.fail_below < band.warn_below <= band.expected
    h100 = load_baseline("Standard_ND96isr_H100_v5")
    assert h100.judge("allreduce_busbw_gbps", 455).status is Status.WARN
    assert h100.judge("allreduce_busbw_gbps", 436).status is Status.FAIL
    assert h100.band("allreduce_busbw_gbps").fail_source.startswith("gpuval policy: 5% under")
    assert load_baseline("Standard_ND96isr_H200_v5").judge("allreduce_busbw_gbps", 420).status is Status.WARN
    assert load_baseline("Standard_ND40rs_v2").judge("h2d_gbps", 8.7).status is Status.WARN


def test_cpu_lists_and_masks():
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_mask([0, 1, 4]) == "0x13"
    assert parse_hex_mask("00000000,0000ffff,ff000000") == list(range(24, 48))
    with pytest.raises(UsageError):
        parse_cpulist("0-x")


def test_packaged_baselines_carry_sources():
    assert packaged_skus() == ["Standard_ND40rs_v2", "Standard_ND96amsr_A100_v4", "Standard_ND96asr_v4",
                               "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"]
    for sku in packaged_skus():
        base = load_baseline(sku)
        for band in base.bands.values():
            assert band.expected is not None and band.expected_source, (sku, band.name)
            if band.fail_below is not None or band.fail_above is not None:
                assert band.fail_source, (sku, band.name)
            if band.warn_below is not None or band.warn_above is not None:
                assert band.warn_source, (sku, band.name)
    assert load_baseline("nd96ISR_h100_v5").sku == "Standard_ND96isr_H100_v5"


def test_judge_api():
    base = load_baseline("Standard_ND96asr_v4")
    assert base.judge("allreduce_busbw_gbps", 236).status is Status.PASS
    assert base.judge("allreduce_busbw_gbps", 229).status is Status.WARN
    fail = base.judge("allreduce_busbw_gbps", 200)
    assert fail.status is Status.FAIL and fail.expected == 234 and "azurehpc-health-checks" in fail.reason
    assert base.judge("no_such_metric", 1).status is Status.SKIPPED


def test_fewer_gpus_than_the_family_is_data(tmp_path: Path):
    mine = tmp_path / "half.yaml"
    mine.write_text("sku: Standard_ND96asr_v4_half\ninherits: Standard_ND96asr_v4\nmetrics:\n"
                    "  gpu_count: {expected: 4, fail_below: 4, expected_source: our partition}\n")
    base = load_baseline("Standard_ND96asr_v4_half", [mine])
    assert base.judge("gpu_count", 4).status is Status.PASS
    assert base.band("nvlinks_per_gpu").expected == 12  # the rest comes from the family
    assert find_baseline(None, [mine]).sku == "Standard_ND96asr_v4_half"
    override = tmp_path / "override.yaml"
    override.write_text("sku: Standard_ND96isr_H100_v5\nmetrics:\n  nvlinks_per_gpu: {expected: 16, fail_below: 16}\n")
    assert load_baseline("Standard_ND96isr_H100_v5", [override]).judge("nvlinks_per_gpu", 16).status is Status.PASS


def test_bad_baseline_files_are_one_line_errors(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: {}\n")
    with pytest.raises(UsageError, match="needs 'sku"):
        load_baseline("Standard_ND96asr_v4", [bad])
    bad.write_text("sku: X\ninherits: Standard_NC6\n")
    with pytest.raises(UsageError, match="inherits 'Standard_NC6'"):
        load_baseline("X", [bad])
    bad.write_text("sku: X\ninherits: Standard_ND96asr_v4\nmetrics:\n  gpu_count: {expected: eight}\n")
    with pytest.raises(UsageError, match="must be numbers"):
        load_baseline("X", [bad])
    with pytest.raises(NoBaseline):
        load_baseline("Standard_D4s_v5")
