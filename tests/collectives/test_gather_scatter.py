"""gather and scatter (nccl-tests' gather.cu / scatter.cu): real `gpuval bench` runs on 3 gloo ranks, non-zero
roots, every element checked, the printed table read back with nccl-tests' own layout."""

from __future__ import annotations

import json

import pytest

from gpuval.collectives.catalog import collective_named
from gpuval.collectives.nccltests_parse import parse_text
from tests.conftest import run_gpuval


@pytest.mark.parametrize("name", ["gather", "scatter"])
def test_gather_and_scatter_run_clean_with_nccl_tests_counts(name, tmp_path):
    out = tmp_path / "out.json"
    proc = run_gpuval("bench", name, "-b", "1K", "-e", "96K", "-f", "4", "-n", "2", "-w", "1", "-r", "2",
                      "--nprocs", "3", "--json", str(out), "--results", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["results"]
    [table] = parse_text(proc.stdout)
    assert table.collective == name and table.nranks == 3
    coll = collective_named(name)
    for row, printed in zip(rows, table.rows):
        per = (row["size"] // 4 // 3) // 4 * 4  # one rank's share, aligned to 16 bytes
        assert row["count"] == per and row["size"] == 3 * per * 4  # printed size: the larger buffer
        assert printed.root == 2 and printed.redop == "none"  # (the JSON holds the root as printed text)
        for side in ("out_of_place", "in_place"):
            assert row[side]["nwrong"] == 0
            algbw = 3 * per * 4 / 1e9 / (row[side]["time"] / 1e6)
            assert row[side]["alg_bw"] == pytest.approx(algbw, rel=1e-6)
            assert row[side]["bus_bw"] == pytest.approx(algbw * 2 / 3, rel=1e-6)
    assert coll.bus_factor(8) == pytest.approx(7 / 8)
