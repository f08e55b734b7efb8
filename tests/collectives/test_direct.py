"""The direct path: NCCL called through nccl4py's low-level bindings as nccl-tests calls it, against the stand-in
for those bindings (tests/helpers/fake_nccl4py: the same function names and signatures, each call's semantics on
host memory across real gloo ranks, tests/helpers/forked_ranks.py; no GPU here). What it pins down: the communicator
comes from rank 0's unique id through the job's store and is the rank's only NCCL one (torch.distributed's group is
gloo, as nccl-tests' host-side MPI); the buffers come from ncclMemAlloc, as nccl-tests 2.19's; out-of-place uses two
buffers, in-place one at nccl-tests' offsets; launch i uses the buffers shifted by max(send, recv bytes) x (i mod
(-e / that)); sendrecv and -m are ncclGroupStart/End groups; a check launch that does nothing is counted. That
every collective, dtype and op is exact on this path is tests/collectives/test_exact.py's."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_gpuval
from tests.helpers import forked_ranks

RANKS = Path(__file__).with_name("nccl4py_ranks.py")
FAKE = Path(__file__).resolve().parents[1] / "helpers" / "fake_nccl4py"


def _env(log: Path | None = None, version: int = 22809) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]),
           "GPUVAL_FAKE_NCCL_VERSION": str(version)}
    return {**env, "GPUVAL_FAKE_NCCL4PY_LOG": str(log)} if log else env


@dataclass
class _Job:
    """What one job of nccl4py_ranks.py's scenarios left: each scenario's lines, the job's output, its call logs."""

    lines: dict[str, list[dict]]
    stdout: str
    logs: Path

    def calls(self, scenario: str, rank: int | None = None) -> list[dict]:
        """The scenario's calls to the stand-in, in order: one rank's, or every rank's."""
        logged = map(json.loads, (self.logs / f"{scenario}.jsonl").read_text().splitlines())
        return [c for c in logged if rank is None or c["rank"] == rank]


def _run(nprocs: int, *scenarios: str, logs: Path, version: int = 22809) -> _Job:
    """The scenarios, one after another, in one job of `nprocs` ranks forked from one import of torch."""
    proc = subprocess.run(forked_ranks.command(nprocs, RANKS, *scenarios), capture_output=True, text=True, timeout=280,
                          env={**os.environ, **_env(version=version), "CALL_LOGS": str(logs)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines: dict[str, list[dict]] = {}
    for fields in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"scenario"')):
        lines.setdefault(fields.pop("scenario"), []).append(fields)
    return _Job(lines, proc.stdout, logs)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> _Job:
    """The 2-rank scenarios on NCCL 2.28.9's stand-in, in one job: the check launch that does nothing, the sweep whose
    offsets are read, a bench rank and a fleet pair test's rank on GPU nodes (last: it ends its process)."""
    return _run(2, "noop", "sweep:all_gather,1024,4096,3,2,1", "gpu_rank:all_reduce", "fleet_rank:all_reduce",
                logs=tmp_path_factory.mktemp("calls"))


def test_a_check_launch_that_does_nothing_is_counted_on_the_direct_path(two_ranks):
    assert len(two_ranks.lines["noop"]) == 9
    for line in two_ranks.lines["noop"]:
        sides = line["out_of_place"] + ([] if line["collective"] in ("alltoall", "sendrecv") else line["in_place"])
        if line["collective"] == "scatter":
            sides = line["out_of_place"]  # in-place scatter: the root's own share is already where it lands
        assert all(wrong and wrong > 0 for wrong in sides), line


def _launches(calls: list[dict], fn: str) -> list[dict]:
    return [c for c in calls if c["fn"] == fn]


def test_offsets_rotate_per_launch_as_nccl_tests_startColl(two_ranks):
    """all_gather on 2 ranks, -b 1K -e 4K, -n 3 -w 2: launch i of a size uses send/recv shifted by total x (i mod
    steps), total = max(send, recv bytes) and steps = -e / total; in-place sends from the rank's share of the
    receive buffer. Launch order per side: warm-up 0, 1; the sync launch 0; timed 0, 1, 2; the check launch 0."""
    [line] = two_ranks.lines["sweep"]
    assert line["sizes"] == [1024, 2048, 4096] and line["out_of_place"] == [0, 0, 0]
    for rank in (0, 1):
        calls = _launches(two_ranks.calls("sweep", rank), "all_gather")
        assert len(calls) == 3 * 2 * 7
        assert all(c["nccl_mem"] for c in calls)  # the buffers are ncclMemAlloc's, as nccl-tests 2.19's
        recv0 = calls[0]["recv"]
        for k, size in enumerate((1024, 2048, 4096)):
            steps, per = 4096 // size, size // 2 // 4
            for in_place in (0, 1):
                side = calls[(2 * k + in_place) * 7:(2 * k + in_place + 1) * 7]
                shifts = [size * (i % steps) for i in (0, 1, 0, 0, 1, 2, 0)]
                assert [c["recv"] - recv0 for c in side] == shifts
                assert all(c["count"] == per for c in side)
                if in_place:
                    assert [c["send"] - c["recv"] for c in side] == [rank * per * 4] * 7
                else:
                    send0 = side[0]["send"]
                    assert [c["send"] - send0 for c in side] == shifts
                    assert abs(send0 - recv0) >= 4096  # two buffers of -e bytes each


def test_sendrecv_and_aggregated_launches_are_nccl_groups(tmp_path):
    """sendrecv: ncclGroupStart, ncclSend to rank+1, ncclRecv from rank-1, ncclGroupEnd per launch; -m 2: the two
    launches of an iteration inside one more group (no call runs before the outer group ends)."""
    calls = [c for c in _run(3, "sweep:sendrecv,1024,1024,2,0,2", logs=tmp_path).calls("sweep", 1)
             if c["fn"] in ("group_start", "group_end", "send", "recv")]
    one = [("group_start", 1), ("send", 1), ("recv", 1), ("group_end", 0)]
    assert [(c["fn"], c["depth"]) for c in calls[:4]] == one  # the sync launch, alone
    assert (calls[1]["peer"], calls[2]["peer"]) == (2, 0)
    nested = [(fn, depth + 1) for fn, depth in one]
    timed = calls[4:4 + 10]
    assert [(c["fn"], c["depth"]) for c in timed] == [("group_start", 1)] + nested * 2 + [("group_end", 0)]


def test_alltoall_before_nccl_2_28_is_a_send_and_a_receive_per_peer_in_one_group(tmp_path):
    logged = _run(2, "sweep:alltoall,1024,1024,1,0,1", logs=tmp_path, version=22700).calls("sweep", 0)
    calls = [c for c in logged if c["fn"] in ("group_start", "group_end", "send", "recv", "allto_all")]
    assert [c["fn"] for c in calls[:6]] == ["group_start", "send", "recv", "send", "recv", "group_end"]
    assert [c["peer"] for c in calls[1:5]] == [0, 0, 1, 1]
    assert calls[3]["ptr"] - calls[1]["ptr"] == 512  # the second peer's chunk: 128 floats further
    assert not [c for c in logged if c["fn"] == "allto_all"]


def test_bench_says_which_path_ran_and_lists_only_what_still_differs(tmp_path):
    out = tmp_path / "ar.json"
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "4K", "-f", "2", "-n", "2", "-w", "1", "--nprocs", "2",
                      "--via", "nccl4py", "--json", str(out), env=_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("# collectives through NCCL 2.28.9 called directly by nccl4py's bindings (--via nccl4py; a stand-in on "
            "host memory)") in proc.stdout
    differs = [line for line in proc.stdout.splitlines() if line.startswith("# differs from nccl-tests")]
    # CPU ranks here: the warm-up and nccl4py's per-call cost; no rotation, torch-cost, buffer or out-of-place note
    assert len(differs) == 2 and "warm-up" in differs[0] and "one Python call through nccl4py" in differs[1]
    doc = json.loads(out.read_text())
    assert doc["nccl_version"] == 22809 and doc["gpuval"]["collectives_through"].startswith("NCCL 2.28.9")
    assert all(r["out_of_place"]["nwrong"] == 0 and r["in_place"]["nwrong"] == 0 for r in doc["results"])


def test_via_nccl4py_where_it_cannot_load_is_one_line():
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "1K", "--nprocs", "2", "--via", "nccl4py",
                      env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, timeout=240)
    assert proc.returncode == 2
    assert "--via nccl4py: nccl4py cannot load: No module named 'nccl'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_each_split_group_opens_its_own_communicator_through_its_own_store(tmp_path):
    """NCCL_TESTS_SPLIT "MOD 2" on 4 ranks: ranks 0, 2 and 1, 3 each get a communicator of 2 from their group's
    unique id (the stand-in refuses ranks holding different ids), and each group's table is right."""
    out, log = tmp_path / "sp.json", tmp_path / "calls.jsonl"
    proc = run_gpuval("bench", "all_gather", "-b", "1K", "-e", "2K", "-f", "2", "-n", "1", "-w", "0", "--nprocs", "4",
                      "--via", "nccl4py", "--json", str(out), env={**_env(log), "NCCL_TESTS_SPLIT": "MOD 2"},
                      timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for group in (0, 1):
        doc = json.loads((tmp_path / f"sp.group{group}.json").read_text())
        assert [r["out_of_place"]["nwrong"] for r in doc["results"]] == [0, 0]
        assert "nccl4py" in doc["gpuval"]["collectives_through"]
    inits = [c for c in map(json.loads, log.read_text().splitlines()) if c["fn"] == "comm_init_rank"]
    assert sorted((c["nranks"], c["rank"]) for c in inits) == [(2, 0), (2, 0), (2, 1), (2, 1)]
    assert {c["torch_group"] for c in inits} == {"gloo"}  # each group's torch.distributed group too


def test_sendrecv_on_one_rank_is_let_through_only_where_nccl_is_called_directly():
    """One rank, as on a one-GPU node: NCCL sends to its own rank (nccl-tests' sendrecv_perf runs there; exact in
    test_exact.py); torch.distributed cannot send to its own rank, and its path still refuses."""
    from gpuval.collectives.driver import BenchConfig
    from gpuval.errors import UsageError
    from gpuval.workloads.collective.header import check_root

    one = BenchConfig(collective="sendrecv")
    check_root(one, 1, direct=True)
    with pytest.raises(UsageError, match="at least 2 ranks"):
        check_root(one, 1, direct=False)


def test_each_rank_holds_one_nccl_communicator_as_in_nccl_tests(two_ranks):
    """Two ranks of `gpuval bench all_reduce --via nccl4py` whose devices answer as GPU ranks' do (backend nccl):
    nccl4py's communicator is the rank's only NCCL one: torch.distributed's group is gloo (barriers and -a on the
    host), never a second NCCL communicator (torch's NCCL group would double NCCL's memory and NVLS use)."""
    [line], calls = two_ranks.lines["gpu_rank"], two_ranks.calls("gpu_rank")
    assert line == {"wrong": 0, "rows": 2}
    inits = [c for c in calls if c["fn"] == "comm_init_rank"]
    assert sorted(c["rank"] for c in inits) == [0, 1]  # one per rank, for the whole sweep
    assert {c["torch_group"] for c in inits} == {"gloo"}  # torch's default group holds no NCCL communicator


def test_a_fleet_pair_test_rank_holds_one_nccl_communicator_too(two_ranks):
    """The fleet's pair and group tests join as a bench rank does: the communicator nccl4py opens is each rank's only
    NCCL one (torch's group on gloo), and the sample comes back checked, from rank 0."""
    assert '"samples"' in two_ranks.stdout and '"error"' not in two_ranks.stdout, two_ranks.stdout
    inits = [c for c in two_ranks.calls("fleet_rank") if c["fn"] == "comm_init_rank"]
    assert sorted(c["rank"] for c in inits) == [0, 1]
    assert {c["torch_group"] for c in inits} == {"gloo"}


def test_the_buffers_come_from_ncclmemalloc_as_nccl_tests_2_19_allocates(two_ranks):
    """Every NCCL call's buffers lie in memory from ncclMemAlloc (nccl4py's torch allocator), as nccl-tests 2.19's
    AllocateBuffs: one send and one receive buffer per rank for the sweep, freed once it ends."""
    calls = two_ranks.calls("gpu_rank")
    launches = [c for c in calls if c["fn"] == "all_reduce"]
    assert launches and all(c["nccl_mem"] for c in launches)
    for rank in (0, 1):
        assert [c["fn"] for c in calls if c["rank"] == rank and c["fn"].startswith("mem_")] == ["mem_alloc"] * 2 + [
            "mem_free"] * 2


def test_where_nccl4py_cannot_allocate_the_header_says_the_buffers_are_torch_s(tmp_path):
    """nccl4py's nccl.core (its allocator) needs cuda-core; without it the bindings still run, on torch's buffers,
    and the header names that difference."""
    log = tmp_path / "calls.jsonl"
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "--nprocs", "2", "--via",
                      "nccl4py", env={**_env(log), "GPUVAL_FAKE_NCCL4PY_NO_CORE": "1"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("# differs from nccl-tests: buffers from torch's caching allocator, not ncclMemAlloc as nccl-tests 2.19 "
            "(nccl4py's nccl.core cannot load: No module named 'cuda.core')") in proc.stdout
    launches = [c for c in map(json.loads, log.read_text().splitlines()) if c["fn"] == "all_reduce"]
    assert launches and not any(c["nccl_mem"] for c in launches)
