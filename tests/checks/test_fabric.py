"""The nccl_transport check on the recorded nodes: real NCCL_DEBUG=INFO logs (tests/data/nccl-debug) judged by the
one transport verdict with the machine's HCAs and causes."""

from __future__ import annotations

from gpuval.checks.base import REGISTRY
from gpuval.checks.fabric import judge_log
from gpuval.collectives.nccl_debug import read_nccl_network
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, H100, context, data_set, no_imds  # noqa: F401

LOGS = DATA / "nccl-debug"


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
