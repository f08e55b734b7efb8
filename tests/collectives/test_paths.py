"""Which path drives the collectives, and what each says: torch.distributed has no out-of-place all_reduce, reduce
or broadcast on NCCL (N/A, printed and read back, never the in-place call twice); the header's "differs from
nccl-tests" lines list only what differs on the path that ran; --via picks the path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpuval.collectives.catalog import COLLECTIVES, Context, dtype_named
from gpuval.collectives.direct import choose_path
from gpuval.collectives.driver import BenchConfig
from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.nccltests_parse import parse_row, parse_text
from gpuval.collectives.nccltests_text import row_line
from gpuval.collectives.table import Row, Side
from gpuval.errors import UsageError
from gpuval.workloads.collective.header import differences, path_notes


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


def test_the_header_lists_only_what_still_differs_on_the_path_that_ran():
    cfg = BenchConfig(collective="all_reduce")
    torch_gpu = differences(cfg, on_gpu=True, through_torch=True)
    assert any("out-of-place columns are N/A" in n for n in torch_gpu)
    assert any("no buffer offset rotation" in n for n in torch_gpu)
    assert any("13-22 us of CPU per call" in n for n in torch_gpu)
    direct = differences(cfg, on_gpu=True, through_torch=False)
    assert len(direct) == 1 and direct[0].startswith("warm-up")
    gloo = differences(cfg, on_gpu=False, through_torch=True)
    assert any("gloo: out-of-place copies the send buffer" in n for n in gloo)
    assert not any("N/A" in n for n in gloo)
    assert len(differences(BenchConfig(collective="all_gather"), True, False)) == 1


def test_the_json_says_why_out_of_place_is_n_a():
    cuda = SimpleNamespace(type="cuda")
    notes = path_notes(BenchConfig(collective="reduce"), cuda, choose_path("torch", True))
    assert notes["out_of_place"] == "N/A: torch.distributed has no out-of-place reduce"
    assert notes["collectives_through"] == "torch.distributed (--via torch)"
    assert "out_of_place" not in path_notes(BenchConfig(collective="all_gather"), cuda, choose_path("torch", True))


def test_via_picks_the_path(monkeypatch):
    assert choose_path("auto", on_gpu=False).why == "CPU ranks: gloo"
    monkeypatch.setitem(__import__("sys").modules, "nccl", None)  # nccl4py not installed
    fallback = choose_path("auto", on_gpu=True)
    assert fallback.bindings is None and "nccl4py cannot load" in fallback.why and "scripts/install.sh" in fallback.why
    with pytest.raises(UsageError, match="--via nccl4py: nccl4py cannot load"):
        choose_path("nccl4py", on_gpu=True)
    with pytest.raises(ValueError, match="use auto, nccl4py or torch"):
        BenchConfig(via="mpi")
