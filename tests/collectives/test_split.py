"""NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK parsed as nccl-tests 2.19's src/common.cu does (run(): the mask is hex,
"AND|&", "OR||", "MOD|%", "DIV|/" with parseInt's strtoul base 0 or 0b binary), and gpuval's one-line errors where
nccl-tests would silently run unsplit or crash."""

from __future__ import annotations

import pytest

from gpuval.collectives.split import colors, groups, parse_int, split_spec
from gpuval.errors import UsageError


def test_the_documented_rail_and_node_splits_on_two_8_gpu_nodes():
    rails = {c: m for c, m in groups("NCCL_TESTS_SPLIT=MOD 8", 16).items()}
    assert rails == {r: [r, r + 8] for r in range(8)}  # rail r: local rank r of each node, inter-node only
    assert groups("NCCL_TESTS_SPLIT=AND 0x7", 16) == rails == groups("NCCL_TESTS_SPLIT_MASK=0x7", 16)
    assert groups("NCCL_TESTS_SPLIT=DIV 8", 16) == {0: list(range(8)), 1: list(range(8, 16))}  # one node each


def test_symbols_case_blanks_and_number_bases():
    assert colors("NCCL_TESTS_SPLIT=%4", 6) == [0, 1, 2, 3, 0, 1]
    assert colors("NCCL_TESTS_SPLIT=div 2", 6) == [0, 0, 1, 1, 2, 2]
    assert colors("NCCL_TESTS_SPLIT=OR 1", 4) == [1, 1, 3, 3]
    assert colors("NCCL_TESTS_SPLIT=& 0b10", 4) == [0, 0, 2, 2]
    assert colors("NCCL_TESTS_SPLIT_MASK=7", 9)[-1] == 0  # the mask is hexadecimal even without 0x
    assert [parse_int(t) for t in ("  12", "0x1F", "010", "0b101", "08", "0x", "x1")] == [12, 31, 8, 5, 0, 0, None]


def test_which_variable_wins():
    assert split_spec({"NCCL_TESTS_SPLIT": "MOD 8", "NCCL_TESTS_SPLIT_MASK": "0x3"}) == "NCCL_TESTS_SPLIT_MASK=0x3"
    assert split_spec({"NCCL_TESTS_SPLIT": "MOD 8"}) == "NCCL_TESTS_SPLIT=MOD 8"
    assert split_spec({"NCCL_TESTS_SPLIT": ""}) is None and split_spec({}) is None


@pytest.mark.parametrize("spec, message", [
    ("NCCL_TESTS_SPLIT=XOR 2", "use AND, OR, MOD or DIV"),
    ("NCCL_TESTS_SPLIT=MOD", "no number after 'MOD'"),
    ("NCCL_TESTS_SPLIT=MOD 0", "MOD 0 divides by zero"),
    ("NCCL_TESTS_SPLIT=/0", "DIV 0 divides by zero"),
    ("NCCL_TESTS_SPLIT_MASK=seven", "the mask is a hexadecimal number"),
])
def test_what_nccl_tests_would_run_unsplit_or_crash_on_is_one_line(spec, message):
    with pytest.raises(UsageError, match=message):
        colors(spec, 8)
