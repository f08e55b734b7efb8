"""Which path drives the collectives, and what each says: torch.distributed has no out-of-place all_reduce, reduce
or broadcast on NCCL (N/A, printed and read back, never the in-place call twice); the header's "differs from
nccl-tests" lines list only what differs on the path that ran; --via picks the path."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from gpuval.collectives.catalog import COLLECTIVES, Context, dtype_named
from gpuval.collectives.differences import differences
from gpuval.collectives.direct import CommPath, choose_path
from gpuval.collectives.driver import BenchConfig
from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.nccltests_parse import parse_row, parse_text
from gpuval.collectives.nccltests_text import row_line
from gpuval.collectives.table import Row, Side
from gpuval.errors import UsageError
from gpuval.workloads.collective.header import path_notes


def _ctx(device: str) -> Context:
    return Context(rank=0, nranks=2, dtype=dtype_named("float"), op="sum", root=0, device=torch.device(device))


def test_torch_on_nccl_has_no_out_of_place_all_reduce_reduce_or_broadcast():
    gpu, cpu = _ctx("cuda"), _ctx("cpu")
    for name, coll in COLLECTIVES.items():
        in_place_only = name in ("all_reduce", "reduce", "broadcast")
        assert coll.torch_side(gpu, in_place=False) is not in_place_only, name
        assert coll.torch_side(gpu, in_place=True) and coll.torch_side(cpu, in_place=False), name


def test_a_side_not_measured_prints_n_a_and_reads_back_as_none():
    row = Row(1048576, 262144, "float", "sum", -1, None, Side(14.22, 73.74, 0.0, 0))
    line = row_line(row)
    assert line.split()[5:9] == ["N/A"] * 4
    back = parse_row(line)
    assert back is not None and back.out_of_place is None and back.in_place == row.in_place
    assert rows_from_json([row.to_json()])[0].out_of_place is None
    [table] = parse_text("#  Rank  0 Group  0 Pid 1 on h device  0 [0000:00:06] NVIDIA H200\n" + line + "\n")
    assert table.rows[0].best_busbw() == 0.0 and table.rows[0].in_place.time == 14.22


NCCL4PY = CommPath(SimpleNamespace(), "GPU ranks", 22809, allocator=lambda *a, **k: None)
TORCH = CommPath(None, "--via torch")


def test_the_header_lists_only_what_still_differs_on_the_path_that_ran():
    cfg = BenchConfig(collective="all_reduce")
    torch_gpu = differences(cfg, True, TORCH)
    assert any("out-of-place columns are N/A" in n for n in torch_gpu)
    assert any("no buffer offset rotation" in n for n in torch_gpu)
    assert any("13-22 us of CPU per call" in n for n in torch_gpu)
    assert any(n.startswith("buffers from torch's caching allocator (nccl-tests 2.19: ncclMemAlloc") for n in torch_gpu)
    # NCCL through nccl4py on GPUs, buffers from ncclMemAlloc: what is left is the warm-up, the timer (CUDA events
    # against nccl-tests' host clock), the process model and nccl4py's cost per call
    direct = differences(cfg, True, NCCL4PY)
    assert len(direct) == 4 and [n.split(":")[0] for n in direct[:3]] == ["warm-up", "timer", "process model"]
    assert direct[3].startswith("each NCCL call is one Python call through nccl4py's bindings")
    assert "CUDA events" in direct[1] and "host clock" in direct[1]
    assert differences(BenchConfig(collective="all_gather"), True, NCCL4PY) == direct
    assert len(differences(BenchConfig(blocking=3), True, NCCL4PY)) == 3  # -z 3 times by the host clock, as nccl-tests
    gloo = differences(cfg, False, TORCH)
    assert any("gloo: out-of-place copies the send buffer" in n for n in gloo)
    assert not any("N/A" in n or "timer" in n or "process model" in n for n in gloo)


def test_without_nccl4py_s_allocator_the_header_says_the_buffers_are_torch_s():
    path = CommPath(SimpleNamespace(), "GPU ranks", 22809, None, "nccl4py's nccl.core cannot load: no cuda.core")
    notes = differences(BenchConfig(), True, path)
    assert ("buffers from torch's caching allocator, not ncclMemAlloc as nccl-tests 2.19 (nccl4py's nccl.core cannot "
            "load: no cuda.core)") in notes[-1]


def test_the_json_says_why_out_of_place_is_n_a():
    cuda = SimpleNamespace(type="cuda")
    notes = path_notes(BenchConfig(collective="reduce"), cuda, choose_path("torch", True))
    assert notes["out_of_place"] == "N/A: torch.distributed has no out-of-place reduce"
    assert notes["collectives_through"] == "torch.distributed (--via torch)"
    assert "out_of_place" not in path_notes(BenchConfig(collective="all_gather"), cuda, choose_path("torch", True))


def test_via_picks_the_path(monkeypatch):
    assert choose_path("auto", on_gpu=False).why == "CPU ranks: gloo"
    monkeypatch.setitem(sys.modules, "nccl", None)  # nccl4py not installed
    fallback = choose_path("auto", on_gpu=True)
    assert fallback.bindings is None and "nccl4py cannot load" in fallback.why and "scripts/install.sh" in fallback.why
    with pytest.raises(UsageError, match="--via nccl4py: nccl4py cannot load"):
        choose_path("nccl4py", on_gpu=True)
    with pytest.raises(ValueError, match="use auto, nccl4py or torch"):
        BenchConfig(via="mpi")


def _bindings(monkeypatch, **declared) -> None:
    """nccl4py's bindings as they load: a module `nccl.bindings.nccl` (a real one declares nothing more)."""
    nccl = SimpleNamespace(get_version=lambda: 22809, **declared)
    monkeypatch.setitem(sys.modules, "nccl", SimpleNamespace(bindings=SimpleNamespace(nccl=nccl)))
    monkeypatch.setitem(sys.modules, "nccl.bindings", SimpleNamespace(nccl=nccl))


def test_via_nccl4py_on_cpu_ranks_is_refused_unless_the_bindings_are_a_host_memory_stand_in(monkeypatch):
    """NCCL moves GPU memory: real bindings on CPU ranks are a one-line error (exit 2), never NCCL handed host
    addresses; the tests' stand-in declares HOST_MEMORY and runs there (named in the path line)."""
    _bindings(monkeypatch)
    with pytest.raises(UsageError, match="--via nccl4py needs GPU ranks"):
        choose_path("nccl4py", on_gpu=False)
    assert choose_path("nccl4py", on_gpu=True).why == "--via nccl4py"
    assert choose_path("auto", on_gpu=False).bindings is None  # auto on CPU ranks: gloo, nccl4py never asked
    _bindings(monkeypatch, HOST_MEMORY=True)
    assert choose_path("nccl4py", on_gpu=False).why == "--via nccl4py; a stand-in on host memory"


def test_the_process_group_is_gloo_where_nccl_is_called_through_nccl4py():
    """One NCCL communicator per rank: nccl4py's; torch.distributed's group carries barriers and -a on the host."""
    from gpuval.workloads.collective.rank import group_backend

    assert group_backend(NCCL4PY, "nccl") == "gloo"
    assert group_backend(TORCH, "nccl") == "nccl"  # torch's NCCL group is the one measured there
    assert group_backend(TORCH, "gloo") == "gloo"


def test_the_header_says_where_each_gpu_rank_was_placed(capsys):
    from gpuval.collectives.driver import DeviceInfo
    from gpuval.workloads.collective.header import print_header

    devices = [DeviceInfo(r, 100 + r, "h", r, f"0000:{r:02x}:00", "NVIDIA H100", f"CPUs {r * 8}-{r * 8 + 7}, memory on "
                          f"NUMA {r}") for r in (0, 1)]
    print_header(BenchConfig(), devices, "2.13.0", SimpleNamespace(type="cuda"), NCCL4PY)
    out = capsys.readouterr().out
    assert "# placed beside its GPU: rank 1: CPUs 8-15, memory on NUMA 1" in out
    [table] = parse_text(out + "    33554432       8388608     float     sum      -1   1.0   1.0   1.0   0   1.0   1.0 "
                               "  1.0   0\n")
    assert table.nranks == 2 and table.hosts == ["h"]  # nccl-tests' reader reads past the placement lines
    notes = path_notes(BenchConfig(), SimpleNamespace(type="cuda"), NCCL4PY, devices)
    assert notes["placed_beside_gpu"] == {"0": "CPUs 0-7, memory on NUMA 0", "1": "CPUs 8-15, memory on NUMA 1"}
