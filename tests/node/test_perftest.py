"""perftest output as published (tests/data/perftest/SOURCE.md) and the loopback run: a stand-in ib_write_bw (a
real process on PATH) plays the server and the client, printing the real SuperBench capture, refusing the client
until its server listens, as perftest does."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval.node.machine import HardwareUnavailable
from gpuval.node.perftest import loopback_argv, parse, run_loopback
from tests.conftest import DATA
from tests.node.tools import fake_tool, only_on_path

PERF = DATA / "perftest"
MIB_GBPS = 8 * 2**20 / 1e9


def test_mb_per_second_before_24_07_is_mebibytes():
    result = parse((PERF / "ib_write_bw-8M-ndv4-superbench.log").read_text())
    [row] = result.bandwidth  # the client and the server print the same row: once
    assert result.device == "ib0" and result.unit == "MB" and row.size == 8388608
    assert row.average_gbps == pytest.approx(24056.72 * MIB_GBPS) and 201 < row.average_gbps < 202


def test_all_sizes_sweep_with_a_tab_before_msgrate():
    rows = parse((PERF / "ib_write_bw-all-sizes-superbench.log").read_text()).bandwidth
    assert [r.size for r in rows][:3] == [2, 4, 8] and rows[-1].size == 8388608 and len(rows) == 23


def test_interleaved_24_07_output_with_a_warning_between_header_and_row():
    result = parse((PERF / "hb120rs_v3-24.07-loopback-and-send-lat.md").read_text())
    assert result.unit == "MiB" and result.device == "mlx5_ib0"
    assert result.bandwidth[0].size == 1000 and result.bandwidth[0].average_gbps == pytest.approx(4020.54 * MIB_GBPS)
    first = result.latency[0]
    assert (first.size, first.t_typical, first.p99, first.p999) == (2, 1.60, 1.62, 3.49)


def test_use_cuda_head_names_the_gpu():
    assert parse((PERF / "ib_write_bw-use_cuda-a30-head.txt").read_text()).cuda_device == "NVIDIA A30"


def test_aznhc_argv():
    assert loopback_argv("ib_write_bw", "mlx5_ib3", 18513, 8388608, 3) == [
        "ib_write_bw", "-d", "mlx5_ib3", "-p", "18513", "-s", "8388608", "-x", "0", "-F", "--report_gbits",
        "--perform_warm_up", "--use_cuda=3"]
    assert "--report_gbits" not in loopback_argv("ib_write_lat", "mlx5_ib0", 1, 2, None)
    assert loopback_argv("ib_write_bw", "mlx5_ib0", 1, 2, "0001:00:00.0")[-1] == "--use_cuda_bus_id=0001:00:00.0"


def _stand_in(bin_dir: Path) -> Path:
    log = (PERF / "ib_write_bw-8M-ndv4-superbench.log").read_text().splitlines()
    (bin_dir / "client.out").parent.mkdir(parents=True, exist_ok=True)
    (bin_dir / "client.out").write_text("\n".join(log[:19]) + "\n")
    (bin_dir / "server.out").write_text("\n".join(log[19:]) + "\n")
    return fake_tool(bin_dir, "ib_write_bw", f"""d={bin_dir}
case "$*" in
  *localhost*) if [ ! -e "$d/listening" ]; then echo " Couldn't connect to localhost:$5"; exit 1; fi
               echo "$@" > "$d/client.args"; cat "$d/client.out";;
  *) sleep 0.6; : > "$d/listening"; sleep 0.3; cat "$d/server.out";;
esac""")


def test_loopback_runs_server_then_client_and_retries_until_it_listens(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    exe = _stand_in(tmp_path / "bin")
    out = run_loopback(str(exe), "mlx5_ib0", 18510, 8388608, 0, 1, timeout_s=20)
    [row] = parse(out).bandwidth
    assert row.size == 8388608
    args = (tmp_path / "bin/client.args").read_text().split()
    assert args[:2] == ["-d", "mlx5_ib0"] and "--use_cuda=0" in args and args[-1] == "localhost"


def test_a_client_that_fails_is_could_not_run(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    exe = fake_tool(tmp_path / "bin", "ib_write_bw", 'case "$*" in *localhost*) echo " Couldn\'t allocate MR"; '
                    "exit 1;; *) sleep 0.2;; esac")
    with pytest.raises(HardwareUnavailable, match="localhost failed: Couldn't allocate MR"):
        run_loopback(str(exe), "mlx5_ib0", 18510, 8388608, 0, None, timeout_s=10)
