"""A report past its limits (pure, no browser): over LEGEND_LIMIT nodes a bandwidth line takes its node's verdict
colour and only a node that does not pass is named; over HEALTH_ROW_LIMIT health rows the ones that do not pass are
listed and the passing and skipped ones counted per check. Each reads the verdict as a Status."""

from __future__ import annotations

from benchmarks.synthetic_fleet import fleet_run
from gpuval.baselines import no_baselines
from gpuval.diagnosis.judge import diagnose
from gpuval.report.build import HEALTH_ROW_LIMIT, LEGEND_LIMIT, ReportInput, collective_sections, health_rows
from gpuval.report.svg import STATUS_COLORS
from gpuval.results.model import Result, Status
from tests.helpers.records import record

RUN = "20260101T000000Z-0c0101"


def _report(records: list[Result]) -> ReportInput:
    return ReportInput(RUN, records, [], diagnose(records, [], no_baselines))


def test_many_nodes_are_coloured_by_verdict_and_only_a_node_that_does_not_pass_is_named():
    records = fleet_run(RUN, LEGEND_LIMIT + 2, slow={"node0003": 0.5})
    [section] = collective_sections(_report(records))
    chart = str(section["chart"])
    assert section["many"] and ">node0003<" in chart and "node0001" not in chart
    assert STATUS_COLORS["fail"] in chart and STATUS_COLORS["pass"] in chart


def test_past_the_row_limit_the_rows_that_do_not_pass_are_listed_and_the_rest_counted():
    rows = [record(Status.PASS, host=f"n{i}", run=RUN) for i in range(HEALTH_ROW_LIMIT)]
    rows += [record(Status.SKIPPED, name="dcgm_diag", host=f"n{i}", run=RUN) for i in range(3)]
    rows += [record(Status.FAIL, host="n7", run=RUN), record(Status.ERROR, name="xid", host="n8", run=RUN)]
    listed = [(row["host"], row["check"], row["status"]) for row in health_rows(_report(rows))]
    assert listed == [("n7", "ecc", "fail"), ("n8", "xid", "error"), ("3 nodes", "dcgm_diag", "skipped"),
                      (f"{HEALTH_ROW_LIMIT} nodes", "ecc", "pass")]
