"""Hostile parser inputs, each with its reproducer: truncated, huge, looping and non-finite documents that once
raised an uncaught exception (exit 1, a traceback), took hours, or stored an infinite bandwidth. Now: a document,
or a clean one-line error, in linear time."""

from __future__ import annotations

import json
import time

import pytest

from gpuval.collectives.nccl_debug import read_nccl_network
from gpuval.collectives.nccltests_json import ENV_PREFIXES
from gpuval.results.dsn import recorded_env
from gpuval.collectives.nccltests_parse import parse_text, read_documents
from gpuval.errors import UsageError
from gpuval.workloads.lammps.log import parse_runs, read_documents as lammps_documents
from tests.conftest import run_gpuval

ROW = "8 2 float sum -1 1 1 1 0 1 1 1 0\n"


@pytest.mark.parametrize("footer", ["# Avg bus bandwidth\n", "# Out of bounds values\n", "# Collective test starting\n",
                                    "# Collective test concluded\n", "# Out of bounds values : 1e999 OK\n",
                                    "# Avg bus bandwidth : nan\n", "#  Rank 99999999999999 Group 0 Pid 1 on\n"])
def test_p1_p2_cut_off_or_broken_footers_keep_the_rows(footer):
    [doc] = read_documents(ROW + footer, "a.txt")
    assert len(doc.table.rows) == 1


@pytest.mark.parametrize("text", ['{"results":[null]}', '{"results":[{"size":1e400,"count":1,"type":"float"}]}',
                                  '{"results":[], "out_of_bounds": 3}',
                                  '{"results":[{"size":8,"count":2,"type":"float","out_of_place":{"time":1,'
                                  '"alg_bw":1e999,"bus_bw":1}}]}'])
def test_p3_broken_json_documents_are_one_line_errors(text):
    with pytest.raises(UsageError, match="not a readable nccl-tests JSON document"):
        read_documents(text, "j.json")


def test_p3_deeply_nested_or_huge_json_is_read_as_text():
    assert read_documents("[" * 100000, "deep.json") == []
    assert read_documents('{"results": [' + "9" * 5000 + "]}", "digits.json") == []


@pytest.mark.parametrize("row", ["8 2 float sum -1 1 1 1 1e999 1 1 1 0\n", "8 2 float sum -1 1 1 1 nan 1 1 1 0\n",
                                 "8 2 float sum -1 1e999 1e999 1e999 0 1e999 1e999 1e999 0\n",
                                 "8 2 float sum -1 " + "9" * 5000 + " 1 1 0 1 1 1 0\n"])
def test_p4_p10_p11_rows_with_infinite_or_absurd_figures_are_no_rows(row):
    assert parse_text(row) == []  # never an infinite bandwidth judged PASS, never an OverflowError


def test_p10_a_text_log_is_never_called_json(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("8 2 float sum -1 " + "9" * 5000 + " 1 1 0 1 1 1 0\n")
    proc = run_gpuval("parse", str(path))
    assert proc.returncode == 2 and "JSON" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("content", ["h:1:1 [0] NCCL INFO Using network [/]\n",
                                     "LAMMPS ([/])\nLoop time of 1 on 1 procs for 10 steps with 10 atoms\n",
                                     "# Collective test starting: [bold]\n8 2 [/] sum -1 1 1 1 0 1 1 1 0\n",
                                     "LAMMPS (x)\nLoop time of 0 on 1 procs for 10 steps with 10 atoms\n"])
def test_p5_p6_text_summary_prints_log_content_as_text(tmp_path, content):
    path = tmp_path / "n.log"
    path.write_text(content)
    proc = run_gpuval("parse", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def _seconds(read, text: str) -> float:
    start = time.perf_counter()
    read(text)
    return time.perf_counter() - start


@pytest.mark.parametrize("name, read, make", [
    ("p7 lammps digits after Loop", lambda t: parse_runs(t),
     lambda n: "Loop time of 1 on 1 procs for 1 steps with 1 atoms\n" + "9" * n + "\n"),
    ("p7 lammps Loop time digits", lambda t: parse_runs(t), lambda n: "Loop time of " + "9" * n + "x\n"),
    ("p8 nccl token before Using network", read_nccl_network, lambda n: "x" * n + " NCCL INFO Using network IB\n"),
    ("p8 nccl spaces in network name", read_nccl_network,
     lambda n: "h:1:1 [0] NCCL INFO Using network a" + " " * n + "b\n"),
    ("nccl-tests long digit token", parse_text, lambda n: "1" * n + " 2 float\n"),
    ("nccl-tests long rank line", parse_text, lambda n: "#  Rank 0 Group 0 Pid 1 on " + "h" * n + "\n"),
])
def test_p7_p8_no_line_costs_more_than_linear_time(name, read, make):
    """At 60,000 characters (a line as long as a reader looks at) each reader takes milliseconds; before, the LAMMPS
    reader was cubic (1,600 digits: 29 s) and the NCCL reader quadratic (20,000 characters: 3.5 s)."""
    small, large = _seconds(read, make(6000)), _seconds(read, make(60000))
    assert large < 0.5, name
    assert large < 10 * small + 0.05, name  # ten times the input: about ten times the time, not a hundred


def test_p7_lammps_reader_on_the_reproducer_is_an_error_not_a_hang():
    with pytest.raises(UsageError):
        lammps_documents("LAMMPS (x)\n" + "9" * 10000 + "\n", "r.log")


def test_s1_json_document_records_no_secret():
    env = recorded_env(ENV_PREFIXES, {"GPUVAL_DB": "postgresql://u:S3cretPW@127.0.0.1:1/db", "NCCL_SECRET_TEST": "Zq9v",
                        "NCCL_DEBUG": "INFO", "NCCL_IB_PKEY": "0x1", "HF_TOKEN": "t", "GPUVAL_SKU": "s",
                        "NCCL_PROXY": "http://a:pw@h:1/"})
    text = json.dumps(env)
    assert "S3cretPW" not in text and "Zq9v" not in text and "HF_TOKEN" not in text and ":pw@" not in text
    assert "NCCL_DEBUG=INFO" in env and "NCCL_IB_PKEY=0x1" in env and "GPUVAL_SKU=s" in env
