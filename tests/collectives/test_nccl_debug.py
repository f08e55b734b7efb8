"""The one NCCL_DEBUG=INFO reader on real logs (tests/data/nccl-debug, sources in SOURCE.md) and recorded channel
lines, and `gpuval parse` of them. (The verdict on them: tests/checks/test_fabric.py, tests/workloads/test_ingest.py.)"""

from __future__ import annotations

import json

import pytest

from gpuval.collectives.nccl_debug import read_nccl_network
from tests.conftest import DATA, run_gpuval

LOGS = DATA / "nccl-debug"


@pytest.mark.parametrize("name, transport, network, evidence", [
    ("ib-roce-dgxh100.log", "IB", "IB", "dgxh100-4:460770:460842 [0] NCCL INFO Using network IB"),
    ("ib-gdr-disabled.log", "IB", "IB", "hostname1:25668:27396 [0] NCCL INFO Using network IB"),
    ("ib-old-nccl-2.5.log", "IB", "IB", "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>"),
    ("socket-ib-disabled-azureml.log", "Socket", "Socket", "[3] NCCL INFO Using network Socket"),
    ("socket-no-libibverbs-skypilot.log", "Socket", "Socket", "[2] NCCL INFO Using network Socket"),
    ("socket-old-aws-ring.log", "Socket", "Socket", "NET/Socket : Using [0]ens3:172.31.12.210<0>"),
    ("ofi-libfabric-p5en.log", "OFI", "Libfabric", "8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric"),
    ("ofi-aws-libfabric-ring.log", "OFI", "AWS Libfabric", "via NET/AWS Libfabric/0"),
])
def test_reader_names_transport_and_quotes_the_line(name, transport, network, evidence):
    found = read_nccl_network((LOGS / name).read_text())
    assert found is not None
    assert (found.transport, found.network_name) == (transport, network)
    assert evidence in found.evidence
    assert found.evidence in (LOGS / name).read_text()  # the exact line, as NCCL wrote it


def test_reader_facts():
    roce = read_nccl_network((LOGS / "ib-roce-dgxh100.log").read_text())
    assert (roce.nccl_version, roce.cuda_version) == ("2.19.3", "12.3")
    assert roce.hosts == ["dgxh100-4", "dgxh100-3"]
    assert "[0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>" in roce.devices
    gdr = read_nccl_network((LOGS / "ib-gdr-disabled.log").read_text())
    assert gdr.ranks == 16 and gdr.gdr is False and "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" in gdr.gdr_evidence
    azure = read_nccl_network((LOGS / "socket-ib-disabled-azureml.log").read_text())
    assert azure.ib_disabled_by_env and azure.no_ib_device and not azure.libibverbs_missing
    sky = read_nccl_network((LOGS / "socket-no-libibverbs-skypilot.log").read_text())
    assert sky.libibverbs_missing and sky.hosts == ["nccl-e9ef-7d4f-0"]
    ofi = read_nccl_network((LOGS / "ofi-libfabric-p5en.log").read_text())
    assert ofi.topology_file == "/proc/self/fd/150"


def test_reader_ignores_text_without_nccl_network_lines():
    assert read_nccl_network("hello\nNCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n") is None


def test_gpuval_parse_json_returns_nccl_debug_object():
    proc = run_gpuval("parse", "--json", str(LOGS / "socket-ib-disabled-azureml.log"))
    assert proc.returncode == 0, proc.stderr
    (doc,) = json.loads(proc.stdout)
    assert doc["kind"] == "nccl-debug" and doc["transport"] == "Socket"
    assert doc["evidence"].endswith("NCCL INFO Using network Socket")
    assert doc["ib_disabled_by_env"] is True
    text = run_gpuval("parse", str(LOGS / "ofi-libfabric-p5en.log"))
    assert text.returncode == 0 and "OFI" in text.stdout and "Using network Libfabric" in text.stdout


def test_nccl_transport_from_recorded_debug_lines():
    """NCCL_DEBUG=INFO lines in the form NCCL 2.18-2.21 prints them on NDv4/NDv5 (IB) and on a TCP fall-back."""
    ib = ("node-0:1:1 [0] NCCL INFO Using network IB\n"
          "node-0:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
          "node-0:1:1 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
          "node-0:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA\n")
    socket_only = "h:2:2 [0] NCCL INFO Using network Socket\nh:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    assert read_nccl_network(ib).path_summary == "P2P, NET/IB (network IB)"
    assert read_nccl_network(ib).paths == {"P2P": 1, "NET/IB": 2}
    assert read_nccl_network(socket_only).path_summary == "NET/Socket (network Socket)"
    assert read_nccl_network("no nccl here") is None  # the one NCCL reader: nothing said, no document


# NCCL 2.4 with aws-ofi-nccl: no `Using network` line; the bootstrap prints `NET/Socket : Using [0]ens5...` (the
# out-of-band interface, not the data network) and the plugin `NET/OFI Selected Provider is efa`.
_NCCL_24_OFI = ("ip-172-31-1-2:10:10 [0] NCCL INFO NET/Socket : Using [0]ens5:172.31.1.2<0>\n"
                "ip-172-31-1-2:10:10 [0] NCCL INFO NET/OFI Selected Provider is efa\n"
                "NCCL version 2.4.8+cuda10.0\n")


@pytest.mark.parametrize("log", [
    _NCCL_24_OFI,
    _NCCL_24_OFI + "ip-172-31-1-2:10:40 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/AWS Libfabric/0\n",
    _NCCL_24_OFI + "ip-172-31-1-2:10:40 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/OFI/0\n",
])
def test_nccl_24_ofi_plugin_reads_as_ofi_not_the_bootstrap_socket(log):
    found = read_nccl_network(log)
    assert found is not None and found.transport == "OFI" and found.transports_seen == ["OFI"]
    assert found.evidence in log and "NET/Socket" not in found.evidence
    assert found.nccl_version == "2.4.8"


def test_nccl_socket_line_without_an_ofi_provider_stays_socket():
    log = _NCCL_24_OFI.replace("NET/OFI Selected Provider is efa", "NET/Plugin : No plugin found (libnccl-net.so)")
    assert read_nccl_network(log).transport == "Socket"
