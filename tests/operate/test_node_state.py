"""The scheduler-independent part of node state actions: the verdict of a run, the drain reason, which node and
which scheduler (pure: the Slurm and Kubernetes actions themselves are in test_slurm_node / test_kube_node)."""

from __future__ import annotations

import pytest

from gpuval.errors import UsageError
from gpuval.engines import detect_scheduler, node_client
from gpuval.engines.nodes import this_node
from gpuval.operate.node_state import drain_reason, verdict_of
from gpuval.results.model import Status
from tests.helpers.records import record


def test_a_failure_outranks_could_not_run_and_names_only_failed_codes():
    records = [record(Status.ERROR, code="NCCL_NODE_SLOW"), record(Status.FAIL, code="XID_ERROR"),
               record(Status.FAIL, code="ECC_ERRORS"), record(Status.WARN, code="APP_CLOCKS_LOW"),
               record(Status.FAIL, name="imported_check")]
    assert verdict_of(records) == (Status.FAIL, ["ECC_ERRORS", "XID_ERROR", "imported_check"])
    assert verdict_of([record(Status.PASS, code="X"), record(Status.ERROR, code="Y")]) == (Status.ERROR, [])
    assert verdict_of([record(Status.SKIPPED, code="X")]) == (Status.SKIPPED, [])
    assert verdict_of([]) == (Status.SKIPPED, [])  # nothing ran: never a pass


def test_drain_reason_is_short_and_inert():
    codes = [f"CODE_{i}" for i in range(9)]
    assert drain_reason(codes, "20260101T000000Z-abc123") == \
        "gpuval: CODE_0 CODE_1 CODE_2 CODE_3 CODE_4 CODE_5 +3 20260101T000000Z-abc123"
    assert drain_reason([], "20260101T000000Z-abc123") == "gpuval: FAIL 20260101T000000Z-abc123"
    assert drain_reason(["A B\nC", "a-b", "A B\nC"], "20260101T000000Z-abc123") == "gpuval: ABC AB 20260101T000000Z-abc123"


def test_node_and_scheduler_come_from_slurmd_or_the_pod():
    assert this_node({"SLURMD_NODENAME": "hpc-pg0-7"}) == "hpc-pg0-7"
    assert this_node({"GPUVAL_NODE_NAME": "aks-gpu-3", "SLURMD_NODENAME": "x"}) == "aks-gpu-3"  # a pod's node
    assert this_node({}) and "." not in this_node({})  # the short host name
    assert detect_scheduler({"SLURMD_NODENAME": "n1"}) == "slurm"
    assert detect_scheduler({"SLURM_JOB_ID": "42", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "slurm"
    assert detect_scheduler({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "PATH": "/nonexistent"}) == "kubernetes"
    with pytest.raises(UsageError, match="no scheduler here"):
        detect_scheduler({"PATH": "/nonexistent"})


def test_unknown_scheduler_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown scheduler 'pbs'"):
        node_client("pbs")
