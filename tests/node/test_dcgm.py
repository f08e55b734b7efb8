"""dcgmi diag JSON, DCGM 3.x and 4.x, from the real fragments users pasted (tests/data/dcgm/SOURCE.md), each put
in the envelope DCGM's own key names give it; and running dcgmi through a stand-in on PATH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval.node.dcgm import parse_diag, run_diag
from gpuval.node.machine import HardwareUnavailable
from tests.conftest import DATA
from tests.node.tools import fake_tool, only_on_path

DCGM = DATA / "dcgm"


def dcgm4_doc() -> str:
    """DCGM 4.x: issue #215's `diagnostic` test object in the schema's envelope ("DCGM Diagnostic")."""
    test = (DCGM / "dcgm4_issue215_r4_diagnostic_test_8gpu_fragment.txt").read_text().rstrip().rstrip(",")
    return ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [' + test + ']}]},'
            ' "metadata": {"version": "4.x", "Driver Version Detected": "570.148.08"}}')


def dcgm3_fail_doc() -> str:
    """DCGM 3.x: issue #122's failing result (cut by the poster before its closing braces) as the Diagnostic test
    of a "DCGM GPU Diagnostic" document."""
    result = (DCGM / "dcgm3x_issue122_diagnostic_fail_result_fragment.txt").read_text().rstrip() + "}]}"
    return ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "Diagnostic", '
            '"results": [' + result + ']}]}], "version": "3.x"}}')


def dcgm3_skip_doc() -> str:
    """DCGM 3.x: issue #139's -r 3 output with the poster's elided Deployment category (`{"..."},`) left out, closed
    where the paste stops (after its Targeted Stress test)."""
    text = (DCGM / "dcgm3x_issue139_T400_r3_json_skip_fragment.txt").read_text().replace('{"..."},', "", 1)
    return text.rstrip().rstrip(",") + "]}]}}"


def test_dcgm4_results_per_entity_with_info_lists():
    diag = parse_diag(dcgm4_doc())
    [test] = diag.tests
    assert (diag.schema, test.name, test.status, diag.driver) == ("4.x", "diagnostic", "pass", "570.148.08")
    assert [r.gpu for r in test.results] == list(range(8))
    assert test.results[0].info[2] == "GPU 0 calculated at approximately 859.08 gigaflops during this test"
    assert test.results[3].info == []  # issue #215's bug: no info for GPUs 2..7, still a Pass


def test_dcgm3_failure_keeps_gpu_and_warning():
    [test] = parse_diag(dcgm3_fail_doc()).tests
    [result] = test.results
    assert (test.status, result.gpu, result.status) == ("fail", 5, "fail")
    [warning] = result.warnings
    assert warning.error_id == 110 and warning.severity == 4 and "511.70 GFLOPs" in warning.text


def test_dcgm3_everything_skipped():
    diag = parse_diag(dcgm3_skip_doc())
    assert diag.schema == "3.x" and {t.status for t in diag.tests} == {"skip"}
    assert [t.name for t in diag.tests] == ["PCIe", "GPU Memory", "Diagnostic", "EUD Test", "Targeted Stress"]


def test_text_around_the_json_and_no_json_at_all():
    assert parse_diag("WARNING: something\n" + dcgm4_doc() + "\ntrailing").tests
    with pytest.raises(HardwareUnavailable, match="printed no diagnostic JSON: Error: unable to establish"):
        parse_diag("Error: unable to establish a connection to the specified host: localhost\n")


def test_the_schema_document_is_not_a_diagnostic():
    """NVIDIA's schema has the key only under "properties": no test is read from it, nothing invented."""
    schema = json.loads((DCGM / "dcgm4_diag_json_schema_testing_python3.json").read_text())
    assert "DCGM Diagnostic" in schema["properties"]
    with pytest.raises(HardwareUnavailable):
        parse_diag(json.dumps(schema))


def test_run_diag_reads_stdout_even_when_dcgmi_exits_non_zero(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    (tmp_path / "out.json").write_text(dcgm3_fail_doc())
    exe = fake_tool(tmp_path / "bin", "dcgmi", f'echo "$@" > {tmp_path}/args; cat {tmp_path}/out.json; exit 226')
    assert parse_diag(run_diag(str(exe), 2)).tests[0].status == "fail"
    assert (tmp_path / "args").read_text().split() == ["diag", "-r", "2", "-j"]
    silent = fake_tool(tmp_path / "bin", "dcgmi2", "echo 'Error: host engine is not running' >&2; exit 1")
    with pytest.raises(HardwareUnavailable, match="dcgmi diag -r 1: Error: host engine is not running"):
        run_diag(str(silent), 1)
