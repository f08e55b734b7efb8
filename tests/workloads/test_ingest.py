"""`gpuval import` of nccl-tests logs that name no collective: a table whose columns prove all_reduce is
judged against the SKU's baseline; one that proves nothing is SKIPPED with the reason, and so is a node where
nothing was judged: never PASS, never "all checks within expectations"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuval.baselines import baseline_source
from gpuval.checks.base import REGISTRY
from gpuval.diagnosis import diagnose
from gpuval.results import Status
from gpuval.workloads import ingest
from gpuval.workloads.lammps.log import LammpsRun
from tests.conftest import DATA
from tests.health_support import A100, H100, context, data_set, no_imds  # noqa: F401

NDV4 = "Standard_ND96asr_v4"
LOGS = DATA / "nccl-tests"


def _scaled_log(tmp_path: Path, factor: float) -> Path:
    """The published one-node NDv4 table with every bandwidth scaled (150 GB/s at 8 GiB for 0.64)."""
    lines = []
    for line in (LOGS / "ndv4-1node-allreduce.txt").read_text().splitlines():
        cells = line.split()
        if len(cells) == 13 and cells[0].isdigit():
            for i in (6, 7, 10, 11):
                cells[i] = f"{float(cells[i]) * factor:.2f}"
            line = "  ".join(cells)
        lines.append(line)
    path = tmp_path / "node-slow.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_slow_node_in_a_bare_table_fails_against_the_baseline(tmp_path: Path):
    found = ingest.import_file(_scaled_log(tmp_path, 0.64), ingest.Origin("r", sku=NDV4))
    [record] = found.records
    assert record.name == "all_reduce" and record.metric("busbw").value < 151
    [node] = diagnose(found.records, baselines=baseline_source()).nodes
    assert node.status is Status.FAIL and "under the fail limit 228" in node.summary


def test_a_table_that_proves_no_collective_is_not_judged(tmp_path: Path):
    log = tmp_path / "node-x.txt"
    log.write_text((LOGS / "superbench-a100-allgather-reduce.txt").read_text().split("# Avg bus bandwidth")[0])
    found = ingest.import_file(log, ingest.Origin("r", sku=NDV4))
    [record] = found.records
    assert record.name == "unknown" and record.status is Status.SKIPPED
    assert record.reason.startswith("not judged: the log names no collective")
    [node] = diagnose(found.records, baselines=baseline_source()).nodes
    assert node.status is Status.SKIPPED and node.summary.startswith("not judged: ")
    assert "all checks within expectations" not in node.summary
    [finding] = node.findings
    assert finding.check == "baseline" and finding.status is Status.SKIPPED and "names no collective" in finding.message


NCCL_LOGS = DATA / "nccl-debug"


def _import_transport(name: str, sku: str | None):
    found = ingest.import_file(NCCL_LOGS / name, ingest.Origin("r", sku=sku))
    [record] = [r for r in found.records if r.name == "nccl_transport"]
    return record


def test_an_imported_socket_log_is_not_judged_without_a_sku():
    """An imported log is not this machine: whether its node has HCAs comes from the SKU (before, every
    socket log was WARN after import, FAIL or PASS in `gpuval health`)."""
    record = _import_transport("socket-ib-disabled-azureml.log", None)
    assert record.status is Status.SKIPPED and record.reason.startswith("not judged: no SKU, HCAs unknown")
    assert _import_transport("ib-roce-dgxh100.log", None).status is Status.PASS  # IB is IB, whatever the SKU


@pytest.mark.parametrize("log, sku, expected", [
    ("socket-ib-disabled-azureml.log", A100, Status.FAIL),
    ("ib-gdr-disabled.log", A100, Status.WARN),
    ("ib-roce-dgxh100.log", H100, Status.PASS),
    ("ofi-libfabric-p5en.log", H100, Status.PASS),
])
def test_import_and_health_give_one_transport_verdict(log: str, sku: str, expected: Status):
    record = _import_transport(log, sku)
    ctx = context(sku, data_set("measurements.nccl_debug_log", (NCCL_LOGS / log).read_text()), libibverbs=True)
    checked = REGISTRY["nccl_transport"].run(ctx)
    assert record.status is expected and checked.status is expected
    assert record.data.fault_code == checked.fault_code == "NCCL_NOT_IB"
    assert record.data.value == checked.value
    if expected is Status.FAIL:
        assert "NCCL_IB_DISABLE=1 is set" in record.reason and "NCCL_IB_DISABLE=1 is set" in checked.reason


def test_unknown_kind_is_skipped_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ingest, "READERS", [replace(r, records=None) if r.kind == "nccl-tests" else r
                                            for r in ingest.READERS])
    found = ingest.import_file(DATA / "nccl-tests" / "ndv4-1node-allreduce.txt", ingest.Origin("r"))
    assert found.records == [] and found.error is None
    assert "a 'nccl-tests' document: gpuval does not store this kind yet" in found.skipped[0]


def test_lammps_document_becomes_a_record(tmp_path: Path):
    doc = LammpsRun(source="log.lammps", version="29 Sep 2021", units="lj", loop_time_s=0.93, procs=2, steps=100,
                    atoms=32000, timesteps_per_s=107.6, atom_steps_per_s=3.44e6, tau_per_day=46483.0)
    log = tmp_path / "log.lammps"
    log.write_text("")
    [reader] = [r for r in ingest.READERS if r.kind == "lammps"]
    [record] = reader.records(doc, ingest.Origin("r", host="n1"), log)
    assert record.kind == "lammps" and record.status.value == "pass" and record.where.ranks == 2
    assert record.metric("timesteps_per_s").value == 107.6 and record.params["atoms"] == 32000
