"""Which collective a table without its name proves (nccl-tests before 2.17.4 names none in the table; every log in
the source documents is such a table), and which it cannot: those stay unknown."""

from __future__ import annotations

import copy

from gpuval.collectives.nccltests_parse import infer_collective, parse_text
from gpuval.collectives.table import Row, Side, Table
from tests.conftest import DATA

LOGS = DATA / "nccl-tests"


def _ndv4() -> Table:
    return parse_text((LOGS / "ndv4-1node-allreduce.txt").read_text())[0]


def test_the_source_documents_tables_are_all_reduce():
    for name, ranks in (("ndv4-1node-allreduce.txt", 8), ("ndv4-2node-allreduce.txt", 16),
                        ("azureml-k80-error-column.txt", 4)):
        [table] = parse_text((LOGS / name).read_text())
        assert (table.collective, table.collective_inferred, table.nranks) == ("all_reduce", True, ranks), name


def test_a_named_table_keeps_its_name_and_all_gather_stays_unknown():
    gather, reduce = parse_text((LOGS / "superbench-a100-allgather-reduce.txt").read_text())
    assert gather.collective is None  # no op, no root: all_gather and alltoall print the same columns
    assert (reduce.collective, reduce.collective_inferred) == ("reduce", True)  # the only rooted reduction
    named = parse_text("# Collective test starting: all_reduce_perf\n" + (LOGS / "ndv4-1node-allreduce.txt").read_text())
    assert (named[0].collective, named[0].collective_inferred) == ("all_reduce", False)


def _table(rows: list[Row], nranks: int | None) -> Table:
    return Table(rows=rows, nranks=nranks)


def _row(size: int, count: int, busbw: float, algbw: float = 100.0, redop: str | None = "sum",
         root: int | None = -1) -> Row:
    return Row(size, count, "float", redop, root, Side(10.0, algbw, busbw, 0), Side(10.0, algbw, busbw, 0))


def test_what_the_columns_cannot_prove_is_unknown():
    assert infer_collective(_table([_row(1024, 256, 100.0)], 8)) is None  # busbw = algbw: sendrecv prints that
    assert infer_collective(_table([_row(1024, 256, 100.0)], 2)) is None  # 2 ranks: all_reduce's factor is 1 too
    assert infer_collective(_table([_row(1024, 256, 150.0)], 8)) is None  # 1.5 is not 2x7/8
    assert infer_collective(_table([_row(1024, 256, 175.0)], 8)) == "all_reduce"
    assert infer_collective(_table([_row(1024, 256, 175.0)], None)) == "all_reduce"  # ranks unknown
    assert infer_collective(_table([_row(1024, 32, 87.5)], 8)) == "reduce_scatter"  # count x 4 x 8 = size
    assert infer_collective(_table([_row(1024, 256, 175.0, redop=None)], 8)) is None
    assert infer_collective(_table([_row(1024, 200, 175.0)], 8)) is None  # count x type size is not the size
    odd = copy.deepcopy(_ndv4())
    odd.rows[3].type = "uint32"  # a type gpuval does not know the size of proves nothing
    assert infer_collective(odd) is None
