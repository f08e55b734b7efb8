"""`gpuval parse` on nccl-tests logs of every version, and which collective a table without its name proves
(nccl-tests before 2.17.4 names none; every log in the source documents is such a table). The logs under
tests/data/nccl-tests are real published outputs (see SOURCE.md there); the cut-off, bare and interleaved variants
are cut from them in the tests."""

from __future__ import annotations

import copy
import json

import pytest

from gpuval.collectives.nccltests_infer import infer_collective
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.collectives.table import Row, Side, Table
from tests.conftest import DATA, run_gpuval

LOGS = DATA / "nccl-tests"


def parse_json_out(*paths) -> list[dict]:
    proc = run_gpuval("parse", "--json", *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("name", "nranks", "last_busbw", "avg", "rows"),
    [("ndv4-1node-allreduce.txt", 8, 234.15, 78.8923, 31), ("ndv4-2node-allreduce.txt", 16, 187.67, 57.1241, 31)],
)
def test_shared_ndv4_tables_parse_to_published_numbers(name, nranks, last_busbw, avg, rows):
    [doc] = parse_json_out(LOGS / name)
    assert doc["kind"] == "nccl-tests"
    assert doc["nranks"] == nranks
    assert len(doc["results"]) == rows
    last = doc["results"][-1]
    assert last["size"] == 8589934592 and last["count"] == 2147483648
    assert last["type"] == "float" and last["redop"] == "sum" and last["root"] == -1
    assert last["out_of_place"]["bus_bw"] == last_busbw
    assert last["out_of_place"]["nwrong"] == 0
    assert doc["average_bus_bandwidth"] == {"bandwidth": avg}
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}


def test_old_error_column_and_info_line_inside_table():
    [doc] = parse_json_out(LOGS / "azureml-k80-error-column.txt")
    assert doc["nranks"] == 4
    assert len(doc["results"]) == 7
    first = doc["results"][0]
    assert first["redop"] == "sum" and first["root"] is None
    assert first["out_of_place"] == {"time": 19902.0, "alg_bw": 1.69, "bus_bw": 2.53, "nwrong": None}
    assert doc["average_bus_bandwidth"] == {"bandwidth": 2.54225}


def test_two_tests_in_one_file_with_and_without_redop_root():
    docs = parse_json_out(LOGS / "superbench-a100-allgather-reduce.txt")
    assert len(docs) == 2
    gather, reduce = docs
    assert gather["nranks"] == 8 and len(gather["results"]) == 34
    assert gather["results"][-1]["redop"] is None and gather["results"][-1]["root"] is None
    assert gather["results"][-1]["in_place"]["bus_bw"] == 230.07
    assert gather["results"][-1]["in_place"]["nwrong"] is None  # N/A: not validated
    assert gather["average_bus_bandwidth"]["bandwidth"] == 58.2651
    assert reduce["results"][-1]["redop"] == "sum" and reduce["results"][-1]["root"] == 0
    assert reduce["results"][-1]["out_of_place"]["bus_bw"] == 228.38
    assert reduce["average_bus_bandwidth"]["bandwidth"] == 65.018


def test_run_cut_off_mid_table(tmp_path):
    lines = (LOGS / "ndv4-1node-allreduce.txt").read_text().splitlines()
    cut = "\n".join(lines[:20]) + "\n" + lines[20][:40]  # the last row breaks off mid-line
    path = tmp_path / "cut.log"
    path.write_text(cut)
    [doc] = parse_json_out(path)
    assert len(doc["results"]) == 17  # 3 header lines and 17 whole rows; the broken row is dropped
    assert doc["average_bus_bandwidth"] is None and doc["out_of_bounds"] is None


def test_bare_table_and_interleaved_info_lines(tmp_path):
    rows = [l for l in (LOGS / "ndv4-2node-allreduce.txt").read_text().splitlines() if l and l[0] == " "]
    noisy = []
    for i, row in enumerate(rows):
        noisy.append(row)
        if i % 5 == 0:
            noisy.append(f"node-{i}:1211:1300 [{i % 8}] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read")
        if i == 10:
            noisy.append("node-3:1211:1300 [3] NCCL WARN NET/IB : Got async event : port active")
    path = tmp_path / "bare.log"
    path.write_text("\n".join(noisy) + "\n")
    [doc] = parse_json_out(path)
    assert len(doc["results"]) == 31
    assert doc["results"][-1]["out_of_place"]["bus_bw"] == 187.67
    assert doc["nranks"] is None  # nothing in a bare table says how many ranks


def nccl_tests_json_document() -> dict:
    """A -J document laid out as nccl-tests' src/util.cu writes it (v2, root as padded text, booleans as
    strings), with the values of the published NDv4 one-node table."""
    table = parse_text((LOGS / "ndv4-1node-allreduce.txt").read_text())[0]
    results = []
    for row in table.rows:
        entry = row.to_json()
        entry["root"] = "    -1"
        entry["actual_iterations"] = 20
        entry["experiment_name"] = "all_reduce_perf"
        results.append(entry)
    return {
        "version": 2, "start_time": "2025-11-02 10:00:00", "args": ["./build/all_reduce_perf", "-b", "8", "-e", "8G"],
        "env": [], "nccl_version": 22703,
        "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 8589934592, "step_factor": 2},
        "devices": [{"rank": r, "group": 0, "pid": 100 + r, "hostname": "nd96", "device": r,
                     "device_hex": "0001:00:00", "device_info": "NVIDIA A100-SXM4-40GB"} for r in range(8)],
        "results": results,
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 78.8923, "okay": "unchecked"},
        "errors": [], "end_time": "2025-11-02 10:01:00",
    }


def test_nccl_tests_json_document(tmp_path):
    path = tmp_path / "ar.json"
    path.write_text(json.dumps(nccl_tests_json_document()))
    [doc] = parse_json_out(path)
    assert doc["collective"] == "all_reduce" and doc["nranks"] == 8
    assert doc["results"][-1]["root"] == -1
    assert doc["results"][-1]["out_of_place"]["bus_bw"] == 234.15
    assert doc["average_bus_bandwidth"] == {"bandwidth": 78.8923}
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}


def test_human_summary_names_peak_and_where():
    proc = run_gpuval("parse", str(LOGS / "ndv4-1node-allreduce.txt"))
    assert proc.returncode == 0, proc.stderr
    assert "peak busbw 234.15 GB/s at 8G" in proc.stdout
    assert "not a verdict" in proc.stdout


def test_file_without_test_is_an_error_naming_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\nnothing to see\n")
    proc = run_gpuval("parse", str(path))
    assert proc.returncode == 2
    assert str(path) in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_file_is_an_error(tmp_path):
    proc = run_gpuval("parse", str(tmp_path / "nope.log"))
    assert proc.returncode == 2 and "nope.log" in proc.stderr and "Traceback" not in proc.stderr


def test_the_source_documents_tables_are_all_reduce():
    for name, ranks in (("ndv4-1node-allreduce.txt", 8), ("ndv4-2node-allreduce.txt", 16),
                        ("azureml-k80-error-column.txt", 4)):
        [table] = parse_text((LOGS / name).read_text())
        assert (table.collective, table.collective_inferred, table.nranks) == ("all_reduce", True, ranks), name


def test_a_named_table_keeps_its_name_and_all_gather_stays_unknown():
    gather, reduce = parse_text((LOGS / "superbench-a100-allgather-reduce.txt").read_text())
    assert gather.collective is None  # no op, no root: all_gather and alltoall print the same columns
    assert (reduce.collective, reduce.collective_inferred) == ("reduce", True)  # the only rooted reduction
    named = parse_text("# Collective test starting: all_reduce_perf\n" + (LOGS / "ndv4-1node-allreduce.txt").read_text())
    assert (named[0].collective, named[0].collective_inferred) == ("all_reduce", False)


def _table(rows: list[Row], nranks: int | None) -> Table:
    return Table(rows=rows, nranks=nranks)


def _row(size: int, count: int, busbw: float, algbw: float = 100.0, redop: str | None = "sum",
         root: int | None = -1) -> Row:
    return Row(size, count, "float", redop, root, Side(10.0, algbw, busbw, 0), Side(10.0, algbw, busbw, 0))


def test_what_the_columns_cannot_prove_is_unknown():
    assert infer_collective(_table([_row(1024, 256, 100.0)], 8)) is None  # busbw = algbw: sendrecv prints that
    assert infer_collective(_table([_row(1024, 256, 100.0)], 2)) is None  # 2 ranks: all_reduce's factor is 1 too
    assert infer_collective(_table([_row(1024, 256, 150.0)], 8)) is None  # 1.5 is not 2x7/8
    assert infer_collective(_table([_row(1024, 256, 175.0)], 8)) == "all_reduce"
    assert infer_collective(_table([_row(1024, 256, 175.0)], None)) == "all_reduce"  # ranks unknown
    assert infer_collective(_table([_row(1024, 32, 87.5)], 8)) == "reduce_scatter"  # count x 4 x 8 = size
    assert infer_collective(_table([_row(1024, 256, 175.0, redop=None)], 8)) is None
    assert infer_collective(_table([_row(1024, 200, 175.0)], 8)) is None  # count x type size is not the size
    odd = copy.deepcopy(_ndv4())
    odd.rows[3].type = "uint32"  # a type gpuval does not know the size of proves nothing
    assert infer_collective(odd) is None


def _ndv4() -> Table:
    return parse_text((LOGS / "ndv4-1node-allreduce.txt").read_text())[0]
