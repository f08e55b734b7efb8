"""The driver's GPU timing path, step by step, against a recording stand-in for torch.cuda and torch.distributed
(no GPU here; the CPU path runs for real in test_check.py and tests/workloads/collective/test_run.py).

What it pins down: one untimed launch and a sync before timing or capture whatever
-w says; thread-local graph capture; -m as one coalesced group; -z 1/2/3 waits and barriers where nccl-tests puts
them.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from gpuval.collectives.shapes import Buffers
from gpuval.collectives.driver import BenchConfig, _Timer


class FakeTorch:
    """Records every call the timer makes, in order; its process group is `group`'s (nccl: the torch.distributed
    path on GPUs; gloo: beside NCCL called through nccl4py)."""

    def __init__(self, group: str = "nccl") -> None:
        self.log: list[str] = []
        log = self.log

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self) -> None:
                log.append("event")

            def synchronize(self) -> None:
                log.append("event-sync")

            def elapsed_time(self, other: "Event") -> float:
                return 1.0

        @contextlib.contextmanager
        def graph(g, capture_error_mode="global", stream=None):
            log.append(f"capture({capture_error_mode})" if stream is None else f"capture({capture_error_mode}, {stream})")
            yield
            log.append("end-capture")

        @contextlib.contextmanager
        def coalescing(group=None, device=None, async_ops=False):
            log.append(f"group({device})")
            yield
            log.append("end-group")

        self.cuda = SimpleNamespace(
            synchronize=lambda: log.append("sync"), Event=Event, graph=graph,
            CUDAGraph=lambda: SimpleNamespace(replay=lambda: log.append("replay")))
        self.distributed = SimpleNamespace(
            barrier=lambda group=None: log.append("barrier" if group is None else "cpu-barrier"),
            new_group=lambda backend=None: "gloo-group", _coalescing_manager=coalescing, get_backend=lambda: group)


def _bufs(torch: FakeTorch, issue: bool = False) -> Buffers:
    return Buffers(launch=lambda i=0: torch.log.append("launch"), refill=lambda rep: None, wrong=lambda rep: 0,
                   issue=(lambda i=0: torch.log.append("issue")) if issue else None)


def _time(cfg: BenchConfig, issue: bool = False, group: str = "nccl") -> list[str]:
    torch = FakeTorch(group)
    _Timer(torch, True, cfg, "cuda:0").seconds_per_op(_bufs(torch, issue))
    return torch.log


def test_without_warm_up_one_launch_and_a_sync_come_before_the_timed_loop():
    assert _time(BenchConfig(warmup=0, iters=2)) == [
        "launch", "sync", "barrier", "event", "launch", "launch", "event", "event-sync"]


def test_graphs_are_captured_thread_local_after_an_untimed_launch():
    log = _time(BenchConfig(warmup=0, iters=2, graph=3))
    assert log[:4] == ["launch", "sync", "barrier", "capture(thread_local)"]
    assert log[4:] == ["launch", "launch", "end-capture", "sync", "barrier", "event", "replay", "replay", "replay",
                       "event", "event-sync"]


def test_aggregated_launches_are_one_group_per_iteration():
    log = _time(BenchConfig(warmup=1, iters=2, agg_iters=3), issue=True)
    assert log == ["launch", "launch", "sync", "barrier", "event",
                   "group(cuda:0)", "issue", "issue", "issue", "end-group",
                   "group(cuda:0)", "issue", "issue", "issue", "end-group", "event", "event-sync"]


def test_the_direct_path_groups_through_nccl_and_passes_nccl_tests_launch_index():
    """-m 2 on the direct path: its own group (ncclGroupStart/End), launch indices as nccl-tests' startColl gets
    them (warm-up i, the sync launch 0, timed iteration x m + aggregated index): they pick the rotated offsets."""
    torch = FakeTorch()

    @contextlib.contextmanager
    def nccl_group():
        torch.log.append("ncclGroupStart")
        yield
        torch.log.append("ncclGroupEnd")

    bufs = Buffers(launch=lambda i=0: torch.log.append(f"launch{i}"), refill=lambda rep: None, wrong=lambda rep: 0,
                   group=nccl_group)
    _Timer(torch, True, BenchConfig(warmup=2, iters=2, agg_iters=2), "cuda:0").seconds_per_op(bufs)
    assert torch.log == ["launch0", "launch1", "launch0", "sync", "barrier", "event",
                         "ncclGroupStart", "launch0", "launch1", "ncclGroupEnd",
                         "ncclGroupStart", "launch2", "launch3", "ncclGroupEnd", "event", "event-sync"]


def test_the_direct_path_captures_its_graph_on_the_stream_its_nccl_calls_use():
    torch = FakeTorch()
    _Timer(torch, True, BenchConfig(warmup=0, iters=1, graph=2), "cuda:0", stream="rank-stream").seconds_per_op(
        _bufs(torch))
    assert "capture(thread_local, rank-stream)" in torch.log and torch.log.count("replay") == 2


def test_blocking_1_waits_and_meets_after_every_launch_2_only_waits():
    one = _time(BenchConfig(warmup=0, iters=2, blocking=1))
    assert one[3:] == ["event", "launch", "sync", "cpu-barrier", "launch", "sync", "cpu-barrier", "event", "event-sync"]
    two = _time(BenchConfig(warmup=0, iters=2, agg_iters=2, blocking=2))
    assert two[3:] == ["event"] + ["launch", "sync"] * 4 + ["event", "event-sync"]


def test_blocking_3_times_each_iteration_without_its_barrier():
    log = _time(BenchConfig(warmup=0, iters=2, blocking=3))
    assert log == ["launch", "sync", "barrier", "launch", "sync", "cpu-barrier", "launch", "sync", "cpu-barrier"]


def test_where_the_process_group_is_gloo_its_own_barrier_is_the_host_barrier():
    """NCCL through nccl4py: torch.distributed's group is gloo, already on the host: no second group is made."""
    log = _time(BenchConfig(warmup=0, iters=2, blocking=1), group="gloo")
    assert log[3:] == ["event", "launch", "sync", "barrier", "launch", "sync", "barrier", "event", "event-sync"]


def test_blocking_with_graphs_or_out_of_range_is_refused():
    with pytest.raises(ValidationError, match="cannot be combined with -G"):
        BenchConfig(blocking=1, graph=2)
    with pytest.raises(ValidationError):
        BenchConfig(blocking=4)
    assert BenchConfig().blocking == 0


def test_cycles_repeat_the_sweep_and_print_a_row_per_size_per_cycle(tmp_path):
    """-N 3 (nccl-tests --run_cycles): the whole sweep three times, one row per size per cycle, each its own timed
    measurement: the per-cycle samples the fleet check judges. Real gloo ranks on the CPU; the nccl workload
    passes -N through."""
    from gpuval.workloads.collective.job import flags, parse_args
    from tests.conftest import run_gpuval

    out = tmp_path / "bench.json"
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "2K", "-f", "2", "-N", "3", "-n", "2", "-w", "1",
                      "--nprocs", "2", "--json", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    rows = json.loads(out.read_text())["results"]
    assert [r["size"] for r in rows] == [1024, 2048] * 3
    assert all(r["out_of_place"]["bus_bw"] > 0 for r in rows)
    assert "-N" in flags(parse_args(["all_reduce", "-N", "4"])) and BenchConfig(cycles=4).cycles == 4
    with pytest.raises(ValidationError):
        BenchConfig(cycles=0)
