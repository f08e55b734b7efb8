"""Real multi-process runs of the collective bench: gloo ranks started by `gpuval bench --nprocs` and by torchrun (no
mocks). Sizes are small so the suite stays fast; the numbers are checked, not timed. Ranks started by Open MPI's
mpirun: tests/engines/test_local.py (the local engine's `mpirun -np 2 gpuval bench all_reduce`, its table and its
2-rank record) and tests/workloads/collective/test_split.py (their records name the engine mpirun)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpuval.collectives.nccltests_parse import parse_text
from gpuval.node.dist_env import free_port
from gpuval.results import read_results
from tests.conftest import ROOT, run_gpuval
from tests.helpers.processes import rank_pids

HELPERS = ROOT / "tests" / "helpers"
SMALL = ["-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"]


def torchrun(nprocs: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    # A free port of our own: torchrun's --master_port 0 hangs the env:// rendezvous in torch 2.13.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nprocs), "--master_port",
           str(free_port()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


# Every collective through the CLI on 2 ranks; on 4 ranks a ring reduction (what the CLI adds at more ranks, the
# table's rank count and the devices, is the same for every collective). Every collective's exactness on 4 ranks, an
# all-to-all, a root that is not rank 0 and paired send/receive included, is tests/collectives/test_exact.py's, on
# both paths.
_CLEAN = [(c, 2) for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
                           "sendrecv")] + [("all_reduce", 4)]


@pytest.mark.parametrize("collective, nprocs", _CLEAN)
def test_every_collective_runs_clean(collective, nprocs, tmp_path, results_file):
    json_path = tmp_path / "out.json"
    proc = run_gpuval("bench", collective, *SMALL, "--nprocs", str(nprocs), "--json", str(json_path),
                      "--results", str(results_file))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(json_path.read_text())
    assert len(doc["devices"]) == nprocs
    assert [r["size"] for r in doc["results"]]  # rows were measured
    for row in doc["results"]:
        assert row["out_of_place"]["nwrong"] == 0 and row["in_place"]["nwrong"] == 0
        assert row["out_of_place"]["bus_bw"] > 0
    # our own text output parses back to the same numbers, to its printed precision
    [table] = parse_text(proc.stdout)
    assert table.collective == collective and table.nranks == nprocs
    assert [r.size for r in table.rows] == [r["size"] for r in doc["results"]]
    for printed, exact in zip(table.rows, doc["results"]):
        assert printed.count == exact["count"]
        assert printed.out_of_place.bus_bw == pytest.approx(exact["out_of_place"]["bus_bw"], abs=0.006)
        assert printed.in_place.time == pytest.approx(exact["in_place"]["time"], rel=1e-3, abs=0.006)
    assert table.avg_busbw == pytest.approx(doc["average_bus_bandwidth"]["bandwidth"], rel=1e-5)
    [record] = read_results(results_file)
    assert record.kind == "collective" and record.name == collective and record.status.value == "pass"
    assert record.where.ranks == nprocs
    assert record.metric("wrong_elements").value == 0


def test_planted_wrong_result_is_counted(tmp_path):
    results, out = tmp_path / "r.jsonl", tmp_path / "out.json"
    proc = torchrun(2, str(HELPERS / "planted_wrong.py"), str(results), str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    [table] = parse_text(proc.stdout)
    # 3 elements corrupted on rank 1, in each of the out-of-place and in-place checks of each size
    assert [r.out_of_place.nwrong for r in table.rows] == [3, 3, 3]
    assert [r.in_place.nwrong for r in table.rows] == [3, 3, 3]
    assert "# Out of bounds values : 18 FAILED" in proc.stdout
    [record] = read_results(results)
    assert record.status.value == "fail" and "18 wrong elements" in record.reason
    assert json.loads(out.read_text())["out_of_bounds"] == {"count": 18, "okay": "false"}


def test_one_rank_of_a_torchrun_job():
    proc = torchrun(2, "-m", "gpuval", "bench", "all_reduce", *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [table] = parse_text(proc.stdout)  # only rank 0 prints
    assert table.nranks == 2 and len(table.rows) == 3


@pytest.mark.parametrize("whom", ["group", "ranks"])
def test_ctrl_c_keeps_what_was_measured(tmp_path, whom):
    """Ctrl-C to the whole process group (a terminal's), or to the ranks alone (what the launcher sees when the
    ranks take theirs first): exit 130, "interrupted", every row kept; never "rank 0 exited with code 130"."""
    results, out = tmp_path / "r.jsonl", tmp_path / "out.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuval", "bench", "all_reduce", "-b", "4K", "-e", "1G", "-f", "2", "--nprocs", "2",
         "--results", str(results), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, GPUVAL_RESULTS=str(results)),
    )
    rows = 0
    deadline = time.monotonic() + 120
    while rows < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        rows += bool(line) and line[:1] == " "
    if whom == "group":
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    else:
        for pid in rank_pids(proc.pid)[1].values():
            os.kill(pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    [record] = read_results(results)
    assert record.status.value == "error"
    assert len(record.data.results) >= 3
    assert len(json.loads(out.read_text())["results"]) >= 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["all_reduce", "-b", "1M", "-e", "8"], "above maximum"),
        (["all_reduce", "-d", "float8"], "unknown data type"),
        (["all_reduce", "-b", "10X"], "bad size"),
        (["allfoo"], "unknown collective"),
        (["all_reduce", "-o", "xor"], "unknown reduction"),
        (["broadcast", "-r", "5", "--nprocs", "2"], "root rank 5"),
        (["all_reduce", "-n", "0"], "iters"),
        (["all_reduce", "--nprocs", "0"], "--nprocs"),
    ],
)
def test_flag_errors_are_one_line_exit_2(args, message):
    proc = run_gpuval("bench", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
