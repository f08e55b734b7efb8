"""The NCCL_DEBUG=INFO reader on real logs (tests/data/nccl-debug, sources in SOURCE.md), `gpuval parse`, and the
nccl_transport verdict on the recorded nodes."""

from __future__ import annotations

import json

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.checks.fabric import judge_log
from gpuval.collectives.nccl_debug import read_nccl_network
from gpuval.results.model import Status
from tests.conftest import DATA, run_gpuval
from tests.health_support import A100, H100, context, data_set, no_imds  # noqa: F401

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


def _judge(sku, log, change=None, **ctx_fields):
    ctx = context(sku, change, **ctx_fields)
    return judge_log(read_nccl_network((LOGS / log).read_text()), ctx, REGISTRY["nccl_transport"])


def test_transport_ib_passes_on_h100():
    result = _judge(H100, "ib-roce-dgxh100.log", libibverbs=True)
    assert result.status is Status.PASS and result.value == "IB" and "Using network IB" in result.reason


def test_transport_ib_without_gdr_warns():
    result = _judge(A100, "ib-gdr-disabled.log", libibverbs=True)
    assert result.status is Status.WARN and "GPUDirect" in result.reason


def test_socket_on_a_node_with_hcas_fails_naming_the_causes():
    result = _judge(A100, "socket-ib-disabled-azureml.log", libibverbs=True, env={"NCCL_IB_DISABLE": "1"})
    assert result.status is Status.FAIL and result.expected == "IB"
    assert "NCCL_IB_DISABLE=1 is set" in result.reason and "Using network Socket" in result.reason
    no_dev = _judge(H100, "socket-no-libibverbs-skypilot.log", data_set("rdma_device_files", []), libibverbs=False,
                    env={})
    assert no_dev.status is Status.FAIL
    assert "/dev/infiniband is missing" in no_dev.reason and "libibverbs cannot be loaded" in no_dev.reason
    down = _judge(A100, "socket-old-aws-ring.log", lambda d: d["ib_ports"][1].update(state="DOWN"), libibverbs=True,
                  env={})
    assert "mlx5_ib0/1 DOWN" in down.reason


def test_socket_without_hcas_is_expected():
    def no_ib(data):
        data["ib_ports"] = []
    assert _judge(A100, "socket-old-aws-ring.log", no_ib, env={}).status is Status.PASS


def test_plugin_passes_and_missing_log_is_error():
    assert _judge(H100, "ofi-libfabric-p5en.log").status is Status.PASS
    result = judge_log(None, context(H100), REGISTRY["nccl_transport"])
    assert result.status is Status.ERROR


def test_nccl_transport_check_runs_on_a_recorded_log():
    log = (LOGS / "ib-roce-dgxh100.log").read_text()
    ctx = context(H100, data_set("measurements.nccl_debug_log", log), libibverbs=True)
    assert REGISTRY["nccl_transport"].run(ctx).status is Status.PASS
    assert REGISTRY["nccl_transport"].run(context(H100)).status is Status.SKIPPED
