"""perftest (linux-rdma/perftest: ib_write_bw, ib_write_lat, ...): a loopback run through one HCA on this machine,
and the reader of its result tables.

The loopback is AzNHC's check_ib_bw_gdr: a server and a client on the same host through the same HCA,
`-s 8388608 -x 0 -F --report_gbits --perform_warm_up --use_cuda=<GPU>`, bound to the HCA's NUMA node. The reader
matches columns by position, not by the unit's spelling: perftest printed `MB/sec` up to 24.04 and `MiB/sec` from
24.07 (commit 1d202bb; both are 2^20 bytes), `Gb/sec` with --report_gbits in every version; lines of the server and the client may be
interleaved, and warnings may sit between a header and its row (tests/data/perftest/SOURCE.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from gpuval.node.machine import HardwareUnavailable

_BW_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(\w+)/sec\]\s+BW average\[(\w+)/sec\]")
_LAT_HEADER = re.compile(r"#bytes\s+#iterations\s+t_min\[usec\]")
_NUM = r"(\d+(?:\.\d+)?)"
_BW_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s*$")
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)" + rf"\s+{_NUM}" * 7 + r"\s*$")
_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
_CUDA_NAME = re.compile(r"device name = \[([^\]]+)\]")
# Gb/s of one unit: perftest's "MB" was always 2^20 bytes (format_factor 0x100000 in perftest_parameters.c since
# 4.2; 24.07 only renamed it MiB), Gb is 10^9 bits
_TO_GBPS = {"MB": 8 * 2**20 / 1e9, "MiB": 8 * 2**20 / 1e9, "Gb": 1.0}


@dataclass(frozen=True)
class BwRow:
    """One bandwidth row, in Gb/s whatever unit the table printed."""

    size: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float


@dataclass(frozen=True)
class LatRow:
    """One latency row, microseconds."""

    size: int
    iterations: int
    t_min: float
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p999: float


@dataclass
class PerftestResult:
    """What one perftest output says: its device, the CUDA device it used (--use_cuda), its rows."""

    device: str | None = None
    cuda_device: str | None = None
    unit: str | None = None
    bandwidth: list[BwRow] = field(default_factory=list)
    latency: list[LatRow] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "perftest", "device": self.device, "cuda_device": self.cuda_device, "unit": self.unit,
                "bandwidth": [r.__dict__ for r in self.bandwidth], "latency": [r.__dict__ for r in self.latency]}


def parse(text: str) -> PerftestResult:
    """The rows of a perftest output (server, client or both interleaved); each distinct row once."""
    result = PerftestResult()
    table = None
    for line in text.splitlines():
        if result.device is None and (m := _DEVICE.search(line)):
            result.device = m.group(1)
        if result.cuda_device is None and (m := _CUDA_NAME.search(line)):
            result.cuda_device = m.group(1)
        if m := _BW_HEADER.search(line):
            table, result.unit = "bw", m.group(2)
            continue
        if _LAT_HEADER.search(line):
            table = "lat"
            continue
        if table == "bw" and (m := _BW_ROW.match(line)):
            scale = _TO_GBPS.get(result.unit or "", 0.0)
            row = BwRow(int(m.group(1)), int(m.group(2)), float(m.group(3)) * scale, float(m.group(4)) * scale,
                        float(m.group(5)))
            if scale and row not in result.bandwidth:
                result.bandwidth.append(row)
        elif table == "lat" and (m := _LAT_ROW.match(line)):
            row_lat = LatRow(int(m.group(1)), int(m.group(2)), *(float(m.group(i)) for i in range(3, 10)))
            if row_lat not in result.latency:
                result.latency.append(row_lat)
    return result


def loopback_argv(program: str, hca: str, port: int, size: int, cuda_device: int | str | None) -> list[str]:
    """The arguments of both ends (AzNHC's for ib_write_bw; latency runs the same without the bandwidth flags).
    `cuda_device`: a PCI bus id (`--use_cuda_bus_id`, perftest 4.5+: the GPU whatever CUDA's device order or
    CUDA_VISIBLE_DEVICES say), or a CUDA ordinal (`--use_cuda`, AzNHC's form)."""
    argv = [program, "-d", hca, "-p", str(port), "-s", str(size), "-x", "0", "-F"]
    if program.endswith("_bw"):
        argv += ["--report_gbits", "--perform_warm_up"]
    if isinstance(cuda_device, str):
        argv.append(f"--use_cuda_bus_id={cuda_device}")
    elif cuda_device is not None:
        argv.append(f"--use_cuda={cuda_device}")
    return argv


def run_loopback(exe: str, hca: str, port: int, size: int, cuda_device: int | str | None, numa_node: int | None,
                 timeout_s: float = 120) -> str:
    """Server and client of `exe` through `hca` on this machine; the client's output, then the server's.
    HardwareUnavailable (could not run) when either end fails, with its message."""
    argv = loopback_argv(exe, hca, port, size, cuda_device)
    numactl = shutil.which("numactl")
    if numactl and numa_node is not None:
        argv = [numactl, "-N", str(numa_node), "-m", str(numa_node), *argv]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        client = None
        while time.monotonic() < deadline:
            time.sleep(0.5)  # the server needs a moment to listen; the client fails at once when it is not yet
            client = subprocess.run([*argv, "localhost"], capture_output=True, text=True,
                                    timeout=max(1.0, deadline - time.monotonic()))
            if client.returncode == 0 or "Couldn't connect" not in client.stdout + client.stderr \
                    or server.poll() is not None:
                break
        served, _ = server.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise HardwareUnavailable(f"{' '.join(argv)} did not finish in {timeout_s:g} s") from None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    said = (client.stdout + client.stderr) if client else ""
    if client is None or client.returncode != 0:
        last = [line for line in (said + served).splitlines() if line.strip()][-1:] or ["no output"]
        raise HardwareUnavailable(f"{' '.join(argv)} localhost failed: {last[0].strip()}")
    return said + "\n" + served
