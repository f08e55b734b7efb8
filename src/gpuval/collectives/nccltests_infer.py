"""Which collective an nccl-tests table is, when its log names none: nccl-tests before 2.17.4 prints no name, and
the source documents' logs are bare tables. Only what the columns prove (the reduction op, the root, how the count
relates to the size, the bus factor), else None: unknown, and the diagnosis says it was not judged."""

from __future__ import annotations

import functools

from gpuval.collectives.patterns import OPS, dtype_named
from gpuval.collectives.table import Row, Table
from gpuval.errors import UsageError


@functools.lru_cache(maxsize=256)
def _typesize(name: str) -> int | None:
    try:
        return dtype_named(name).size
    except UsageError:
        return None


def _elements_fill(row: Row, factor: int) -> bool:
    """count x type size x factor == size: how a collective's element count relates to its message size."""
    size = _typesize(row.type)
    return size is not None and row.count * size * factor == row.size


def _bus_ratio(table: Table) -> float | None:
    """busbw / algbw of the largest row that moves enough to tell (the two columns print two decimals)."""
    for row in reversed(table.rows):
        side = next((s for s in row.sides() if s.alg_bw >= 1.0), None)
        if side is not None:
            return side.bus_bw / side.alg_bw
    return None


def infer_collective(table: Table) -> str | None:
    """The collective a table proves when its log names none (nccl-tests before 2.17.4 prints no name; the source
    documents' logs are bare tables). Only what the columns prove, else None (unknown, and the diagnosis says it
    was not judged):
    - all_reduce: every row has a reduction op, root -1 (or no root column: old nccl-tests printed one for rooted
      collectives only) and count x type size = size; sendrecv prints the same columns, so its bus factor must
      show too: busbw / algbw = 2(n-1)/n, not sendrecv's 1 (a 2-rank all_reduce cannot be told apart: unknown);
    - reduce_scatter: the same columns with count x type size x ranks = size (ranks known, more than one);
    - reduce: a reduction op with a root >= 0 and count x type size = size (the only rooted reduction)."""
    rows = table.rows
    if not rows or not all(r.redop in OPS for r in rows):
        return None
    n = table.nranks
    if all(r.root is not None and r.root >= 0 for r in rows):
        return "reduce" if all(_elements_fill(r, 1) for r in rows) else None
    if not all(r.root in (None, -1) for r in rows):
        return None
    if n is not None and n > 1 and all(_elements_fill(r, n) for r in rows):
        return "reduce_scatter"
    ratio = _bus_ratio(table)
    if not all(_elements_fill(r, 1) for r in rows) or ratio is None or ratio < 1.05:
        return None
    if n is not None and abs(ratio - 2 * (n - 1) / n) > 0.02 * ratio:
        return None  # the bus factor of n ranks is not all_reduce's
    return "all_reduce"
