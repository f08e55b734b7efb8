"""Every collective x dtype x reduction is exact on both paths that drive the collectives, on real gloo ranks
(tests/helpers/forked_ranks.py):
torch.distributed (gloo ranks) and NCCL through nccl4py's bindings (the stand-in in tests/helpers/fake_nccl4py:
nccl4py's function names and signatures, each call's semantics on host memory across real gloo ranks; no GPU
here). Both paths fill and check through the collective's own `fill` and `wrong` (catalog.py); what differs is
only the launch, so a wrong launch on either path shows as wrong elements here.

Through nccl4py, 2 ranks: every dtype and op (each maps to NCCL's own type and op). More ranks, and
torch.distributed (whose dtypes are torch's own): one dtype per kind and size (1-byte int, 8-byte int, 16-bit and
32-bit float), every collective: what more ranks add is more peers and a root that is not rank 0 or 1, not more
dtypes. Every op on 4 ranks through torch.distributed (each op's expected values over 4 ranks; gloo's own
reductions); through nccl4py on 4 ranks sum and avg: an op reaches NCCL as the same code whatever the number of
ranks (the 2-rank cell sends each), and avg is the op whose result depends on that number.
NCCL before 2.28 (GPUVAL_FAKE_NCCL_VERSION 22700) has no ncclAlltoAll, ncclGather, ncclScatter: nccl-tests' groups
of sends and receives are checked there. One rank: every collective, sendrecv included (a rank sends to itself,
which NCCL does and torch.distributed cannot)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpuval.collectives.catalog import OPS
from tests.helpers import forked_ranks

RANKS = Path(__file__).with_name("matrix_ranks.py")
FAKE = Path(__file__).resolve().parents[1] / "helpers" / "fake_nccl4py"
SOME = ["uint8", "int64", "bfloat16", "float"]
ALL_DTYPES = 8


def matrix(via: str, nprocs: int, ops: tuple[str, ...], dtypes: list[str], version: int = 22809) -> list[dict]:
    env = {**os.environ, "GPUVAL_FAKE_NCCL_VERSION": str(version)}
    if via == "nccl4py":
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(forked_ranks.command(nprocs, RANKS, via, ",".join(ops), *dtypes), capture_output=True,
                          text=True, timeout=280, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("via, nprocs, ops, dtypes, version", [
    ("torch", 4, OPS, SOME, 22809),
    ("nccl4py", 2, OPS, [], 22809), ("nccl4py", 4, ("sum", "avg"), SOME, 22700), ("nccl4py", 1, OPS, SOME, 22809),
], ids=["torch-4", "nccl4py-2", "nccl4py-4-nccl2.27", "nccl4py-1"])
def test_every_collective_dtype_and_op_is_exact(via, nprocs, ops, dtypes, version):
    combos = matrix(via, nprocs, ops, dtypes, version)
    kinds = len(dtypes) or ALL_DTYPES
    assert len(combos) == 3 * kinds * len(ops) + 6 * kinds  # three reducing collectives take each op
    assert {c["op"] for c in combos} == set(ops)
    assert ("nccl4py's bindings" in combos[0]["path"]) is (via == "nccl4py")
    for combo in combos:
        assert combo["out_of_place"] == [0, 0], combo  # 96 B, 24K; never N/A on gloo or through nccl4py
        # in-place alltoall and sendrecv through one buffer race on NCCL: N/A there, never counted; gloo receives
        # into scratch, so there they are checked
        unchecked = via == "nccl4py" and combo["collective"] in ("alltoall", "sendrecv")
        assert combo["in_place"] == ([None] * 2 if unchecked else [0, 0]), combo
