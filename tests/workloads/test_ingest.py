"""`gpuval import` of nccl-tests logs that name no collective (issue 9): a table whose columns prove all_reduce is
judged against the SKU's baseline; one that proves nothing is SKIPPED with the reason, and so is a node where
nothing was judged: never PASS, never "all checks within expectations"."""

from __future__ import annotations

from pathlib import Path

from gpuval.baselines import baseline_source
from gpuval.diagnosis import diagnose
from gpuval.results import Status
from gpuval.workloads import ingest
from tests.conftest import DATA

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
