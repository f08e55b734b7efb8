"""Per-split runs with real gloo ranks: `gpuval bench --nprocs 4` and Open MPI's mpirun (no mocks), each split
joining its own process group through the job's store, a table and a record per split."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpuval.results import read_results
from tests.conftest import run_gpuval

SMALL = ["-b", "1K", "-e", "16K", "-f", "4", "-n", "3", "-w", "1"]


def test_mod_2_runs_two_groups_at_once_with_a_table_and_record_each(tmp_path, results_file):
    proc = run_gpuval("bench", "all_reduce", *SMALL, "--nprocs", "4", "--json", str(tmp_path / "out.json"),
                      "--results", str(results_file), env={"NCCL_TESTS_SPLIT": "MOD 2"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "#  Rank  1 Group  1" in out and "#  Rank  2 Group  0" in out  # the split as nccl-tests' Group column
    assert "# Split group 0: ranks 0, 2" in out and "# Split group 1: ranks 1, 3" in out
    assert "# Per split avg bus bandwidth: group 0 " in out and ", group 1 " in out
    records = read_results(results_file)
    assert [(r.params["split_group"], r.params["split_ranks"], r.where.ranks) for r in records] == [
        (0, [0, 2], 2), (1, [1, 3], 2)]
    assert all(r.params["split"] == "NCCL_TESTS_SPLIT=MOD 2" and r.status.value == "pass" for r in records)
    for group in (0, 1):
        doc = json.loads((tmp_path / f"out.group{group}.json").read_text())
        assert [d["rank"] for d in doc["devices"]] == [group, group + 2]
        assert all(r["out_of_place"]["nwrong"] == 0 for r in doc["results"]) and len(doc["results"]) == 3


def test_div_2_and_a_rooted_collective(results_file):
    proc = run_gpuval("bench", "reduce", *SMALL, "--nprocs", "4", "-r", "1", "--results", str(results_file),
                      env={"NCCL_TESTS_SPLIT": "DIV 2"})
    assert proc.returncode == 0, proc.stderr
    assert "# Split group 0: ranks 0, 1" in proc.stdout and "# Split group 1: ranks 2, 3" in proc.stdout
    assert len(read_results(results_file)) == 2


def test_a_root_outside_the_groups_and_a_bad_split_are_one_line():
    proc = run_gpuval("bench", "reduce", *SMALL, "--nprocs", "4", "-r", "2", env={"NCCL_TESTS_SPLIT": "MOD 2"})
    assert proc.returncode == 2 and "root rank 2 does not exist: the job has 2 ranks" in proc.stderr
    proc = run_gpuval("bench", "all_reduce", *SMALL, "--nprocs", "4", env={"NCCL_TESTS_SPLIT": "XOR 1"})
    assert proc.returncode == 2 and "use AND, OR, MOD or DIV" in proc.stderr and "Traceback" not in proc.stderr


def test_a_split_mask_under_mpirun(tmp_path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", GPUVAL_DB="none")
    env.pop("RANK", None)
    proc = subprocess.run(
        ["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", "-x", "NCCL_TESTS_SPLIT_MASK=0x1",
         sys.executable, "-m", "gpuval", "bench", "all_gather", *SMALL, "--results", str(tmp_path / "r.jsonl")],
        capture_output=True, text=True, timeout=240, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = read_results(tmp_path / "r.jsonl")
    assert [r.params["split_ranks"] for r in records] == [[0, 2], [1, 3]]
    assert all(r.where.engine == "mpirun" and r.metric("wrong_elements").value == 0 for r in records)
