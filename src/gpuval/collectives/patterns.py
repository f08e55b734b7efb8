"""The data `-c` checks with: values that vary by element index, rank and repetition, exact in every data type.

Every value is a small non-negative integer, so sums, products, minima and maxima are exact in the type whatever
order NCCL adds them in (nccl-tests' own float sums are exact for the same reason). Each element's value comes from
a hash of its global index and a salt made of the repetition (`rep`): the timed launches use rep 0, every check
launch a new rep, so stale data from an earlier iteration or size, or data displaced by any number of elements
(NCCL chunk, slice or step granularity, a wrong offset), reads as wrong. Ranks enter through their position
k = (i + rank + rep) mod n at element i, which changes from element to element and sums to n(n-1)/2 over the ranks,
so the expected result has a closed form: no loop over ranks, one pass per chunk.

Receive buffers hold SENTINEL (-1; 255 for uint8) before every check launch; no pattern value equals it, so a
launch that writes nothing, or stops part-way, leaves wrong elements behind.

Float `avg` follows nccl-tests (verifiable.cu): NCCL computes it as a pre-multiplied sum x*(1/n), which rounds, so
only two ranks contribute per element and the result may be within 2 ulp of T(x0*(1/n)) + T(x1*(1/n)).

Scratch space is reused across sizes and filled chunk by chunk (CHUNK elements), so a fill allocates nothing after
the first size and a 16 GiB buffer needs no second 16 GiB one for its expected values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpuval.errors import UsageError

CHUNK = 1 << 22  # elements per pass of a fill or a comparison
TIMED_REP = 0  # the repetition the timed launches carry; check launches count up from 1
_K_INDEX = -1640531535  # 0x9E3779B1 as an int32: golden-ratio multiplier
_K_MIX = -2048144789  # 0x85EBCA6B as an int32: murmur3's finaliser multiplier
_K_SALT = 1013904242  # 0x3C6EF372: spreads salts far apart along the index
_LIMIT = 2**30  # values stay below this so every int32 intermediate is exact
_MANTISSA = {"half": 10, "bfloat16": 7, "float": 23, "double": 52}
_BITS_VIEW = {"half": "int16", "bfloat16": "int16", "float": "int32", "double": "int64"}


@dataclass(frozen=True)
class DType:
    """A data type by its nccl-tests name; `exact` is the largest integer it holds exactly."""

    name: str
    torch_name: str
    size: int
    exact: int


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("int8", "int8", 1, 127),
        DType("uint8", "uint8", 1, 255),
        DType("int32", "int32", 4, 2**31 - 1),
        DType("int64", "int64", 8, 2**63 - 1),
        DType("half", "float16", 2, 2**11),
        DType("float", "float32", 4, 2**24),
        DType("double", "float64", 8, 2**53),
        DType("bfloat16", "bfloat16", 2, 2**8),
    )
}
_DTYPE_ALIASES = {
    "char": "int8", "int": "int32", "float16": "half", "fp16": "half", "float32": "float", "fp32": "float",
    "float64": "double", "fp64": "double", "bf16": "bfloat16", "uint8_t": "uint8",
}
OPS = ("sum", "prod", "min", "max", "avg")


def dtype_named(name: str) -> DType:
    """nccl-tests' -d value (or a common alias) as a DType."""
    key = _DTYPE_ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise UsageError(f"unknown data type {name!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def op_named(name: str) -> str:
    """nccl-tests' -o value, checked."""
    if name.lower() not in OPS:
        raise UsageError(f"unknown reduction {name!r}: use one of {', '.join(OPS)}")
    return name.lower()


def torch_module() -> Any:
    """torch, imported when first needed (gpuval starts without it)."""
    import torch

    return torch


def chunks(buf: Any, n: int, per: int) -> list[Any]:
    """`buf` cut into n consecutive views of `per` elements (one per rank)."""
    return [buf[r * per:(r + 1) * per] for r in range(n)]


def top(dtype: Any) -> int:
    """The largest value a pattern of this type may hold: exact in the type and never the sentinel."""
    return min(dtype.exact - (1 if dtype.name == "uint8" else 0), _LIMIT - 1)


def sentinel(dtype: Any) -> int:
    """What a receive buffer holds before a check launch: below every pattern value (above, for uint8)."""
    return 255 if dtype.name == "uint8" else -1


def _pow2_floor(value: int) -> int:
    """The largest power of two <= value (1 for value < 1): value ranges are masks, as cheap as a copy."""
    return 1 << (max(value, 1).bit_length() - 1)


def is_float(dtype: Any) -> bool:
    return dtype.name in _MANTISSA


@dataclass
class Workspace:
    """Scratch tensors by name, grown on demand and reused for every size of a sweep."""

    device: Any
    _bufs: dict[tuple[str, Any], Any] = field(default_factory=dict)

    def get(self, name: str, length: int, tdtype: Any) -> Any:
        torch = torch_module()
        buf = self._bufs.get((name, tdtype))
        if buf is None or buf.numel() < length:
            buf = torch.empty(max(length, 1), dtype=tdtype, device=self.device)
            self._bufs[(name, tdtype)] = buf
        return buf[:length]


@dataclass(frozen=True)
class Spec:
    """What a pattern depends on: data type, reduction, ranks."""

    dtype: DType
    op: str
    nranks: int


class Patterns:
    """Fills and checks for one sweep: data-movement values and reduction inputs/results, chunk by chunk."""

    def __init__(self, spec: Spec, device: Any) -> None:
        self.spec = spec
        self.ws = Workspace(device)
        self.torch = torch_module()
        self.tdtype = getattr(self.torch, spec.dtype.torch_name)
        self.top = top(spec.dtype)

    # ---- building blocks (int32 scratch, in place) ----------------------------------------------------------------

    def _hash(self, name: str, start: int, length: int, salt: int) -> Any:
        """31-bit hash of (global index, salt) for `length` elements from `start`, in scratch `name`."""
        torch = self.torch
        h = self.ws.get(name, length, torch.int32)
        tmp = self.ws.get("shift", length, torch.int32)
        torch.arange(length, out=h)
        offset = (start + salt * _K_SALT) & 0xFFFFFFFF
        h.add_(offset - (1 << 32) if offset >= 1 << 31 else offset)
        h.mul_(_K_INDEX)
        torch.bitwise_right_shift(h, 16, out=tmp)
        h.bitwise_xor_(tmp)
        h.mul_(_K_MIX)
        torch.bitwise_right_shift(h, 13, out=tmp)
        return h.bitwise_xor_(tmp).bitwise_and_(0x7FFFFFFF)

    def _positions(self, start: int, length: int, rank: int, rep: int) -> Any:
        """k = (i + rank + rep) mod n for i in [start, start+length), copied from one period (no division per
        element)."""
        torch, n = self.torch, self.spec.nranks
        k = self.ws.get("k", length, torch.int32)
        period = (torch.arange(n, dtype=torch.int32, device=self.ws.device) + (start + rank + rep) % n) % n
        full = length // n
        k[: full * n].view(full, n).copy_(period)
        k[full * n:].copy_(period[: length - full * n])
        return k

    # ---- data movement (broadcast, all_gather, alltoall, sendrecv, gather, scatter) -------------------------------

    def movement(self, start: int, length: int, rep: int) -> Any:
        """Values at global indices [start, start+length) of the one sequence every data-movement collective cuts
        its chunks from (nccl-tests' InitData with an index offset)."""
        return self._hash("v", start, length, 2 * rep + 1).bitwise_and_(_pow2_floor(self.top + 1) - 1)

    def move(self, buf: Any, start: int, rep: int) -> None:
        """Data-movement values from global index `start` into `buf`."""
        self.write(buf, lambda s, n: self.movement(s, n, rep), start)

    def moved_wrong(self, buf: Any, start: int, rep: int) -> Any:
        """Elements of `buf` that are not the data-movement values from global index `start`."""
        return self.wrong(buf, lambda s, n: self.movement(s, n, rep), start)

    # ---- reductions -----------------------------------------------------------------------------------------------

    def _sum_room(self) -> int:
        n = self.spec.nranks
        return self.top - n * (n - 1) // 2

    def reduce_input(self, start: int, length: int, rank: int, rep: int) -> Any:
        """Rank `rank`'s input at [start, start+length) (int32 scratch; a float tensor for float avg)."""
        op, n = self.spec.op, self.spec.nranks
        if op == "avg" and is_float(self.spec.dtype):
            a, b = self._avg_terms(start, length, rep)
            k = self._positions(start, length, rank, rep)
            a.mul_(k == 0)
            return a.add_(b.mul_(k == 1))
        if op in ("sum", "avg"):
            if self._sum_room() >= 0:  # v + k: sums to n*v + n(n-1)/2
                v = self._hash("v", start, length, 2 * rep).bitwise_and_(_pow2_floor(self._sum_room() // n + 1) - 1)
                return v.add_(self._positions(start, length, rank, rep))
            t = self._count_term(start, length, rep, min(n, self.top))  # too many ranks: t(i) of them hold 1
            return self.torch.lt(self._positions(start, length, rank, rep), t, out=self.ws.get(
                "flag", length, self.torch.bool)).to(self.torch.int32)
        if op == "prod":  # t(i) ranks hold 2, the others 1: the product is 2^t(i)
            t = self._count_term(start, length, rep, min(n, self.top.bit_length() - 1, 30))
            return self.torch.lt(self._positions(start, length, rank, rep), t).to(self.torch.int32).add_(1)
        cap = min(n - 1, self.top)  # min / max: v + min(k, cap)
        v = self._hash("v", start, length, 2 * rep).bitwise_and_(_pow2_floor(self.top - cap + 1) - 1)
        return v.add_(self._positions(start, length, rank, rep).clamp_(max=cap))

    def reduce_expected(self, start: int, length: int, rep: int) -> Any:
        """The reduced result at [start, start+length), in the same form as reduce_input."""
        op, n = self.spec.op, self.spec.nranks
        if op == "avg" and is_float(self.spec.dtype):
            return self._avg_expected(start, length, rep)
        if op in ("sum", "avg"):
            if self._sum_room() >= 0:
                v = self._hash("v", start, length, 2 * rep).bitwise_and_(_pow2_floor(self._sum_room() // n + 1) - 1)
                total = v.mul_(n).add_(n * (n - 1) // 2)
            else:
                total = self._count_term(start, length, rep, min(n, self.top))
            return total.floor_divide_(n) if op == "avg" else total  # integer avg: NCCL truncates (all >= 0)
        if op == "prod":
            t = self._count_term(start, length, rep, min(n, self.top.bit_length() - 1, 30))
            return self.torch.bitwise_left_shift(self.torch.ones_like(t), t)
        cap = min(n - 1, self.top)
        v = self._hash("v", start, length, 2 * rep).bitwise_and_(_pow2_floor(self.top - cap + 1) - 1)
        return v if op == "min" else v.add_(cap)

    def fill_input(self, buf: Any, start: int, rank: int, rep: int) -> None:
        """Rank `rank`'s reduction input from global index `start` into `buf`."""
        self.write(buf, lambda s, n: self.reduce_input(s, n, rank, rep), start)

    def reduced_wrong(self, buf: Any, start: int, rep: int) -> Any:
        """Elements of `buf` that are not the reduced result from global index `start` (within 2 ulp: float avg)."""
        return self.wrong(buf, lambda s, n: self.reduce_expected(s, n, rep), start, self.tolerant())

    def _count_term(self, start: int, length: int, rep: int, most: int) -> Any:
        """t(i) in [1, most] (prod: [0, most]): how many ranks hold the non-neutral value at element i."""
        low = 0 if self.spec.op == "prod" else 1
        t = self._hash("t", start, length, 2 * rep).bitwise_and_(_pow2_floor(most + 1 - low) - 1)
        return t.add_(low)

    def _avg_terms(self, start: int, length: int, rep: int) -> tuple[Any, Any]:
        """1 + m0(i) and 1 + m1(i): the two contributions of float avg (nccl-tests' genInput for ReduceAvg)."""
        mask = (1 << min(_MANTISSA[self.spec.dtype.name], 30)) - 1
        a = self._hash("a", start, length, 2 * rep).bitwise_and_(mask).add_(1)
        b = self._hash("b", start, length, 2 * rep + 7).bitwise_and_(mask).add_(1)
        return a, b

    def _avg_expected(self, start: int, length: int, rep: int) -> Any:
        """T(x0 * TMul(1/n)) + T(x1 * TMul(1/n)), TMul float32 (float64 for double), summed in T."""
        torch, n = self.torch, self.spec.nranks
        a, b = self._avg_terms(start, length, rep)
        if n == 1:
            return a
        tmul = torch.float64 if self.spec.dtype.name == "double" else torch.float32
        inv = torch.tensor(1.0 / n, dtype=tmul).item()
        wide = self.ws.get("wide", length, tmul)
        first = self.ws.get("first", length, self.tdtype)
        second = self.ws.get("second", length, self.tdtype)
        first.copy_(wide.copy_(a).mul_(inv))
        second.copy_(wide.copy_(b).mul_(inv))
        return first.add_(second)

    # ---- writing and checking whole buffers -----------------------------------------------------------------------

    def write(self, out: Any, make: Callable[[int, int], Any], start: int = 0) -> None:
        """out[j] = make(start + j ...) chunk by chunk; `make(chunk_start, length)` returns scratch values."""
        for lo in range(0, out.numel(), CHUNK):
            hi = min(lo + CHUNK, out.numel())
            out[lo:hi].copy_(make(start + lo, hi - lo))

    def wrong(self, result: Any, make: Callable[[int, int], Any], start: int = 0, tolerant: bool = False) -> Any:
        """Elements of `result` that differ from make(...) (as a 0-d tensor on the device: no sync per chunk).
        `tolerant`: within 2 ulp counts as right (float avg)."""
        torch = self.torch
        total = torch.zeros((), dtype=torch.int64, device=self.ws.device)
        for lo in range(0, result.numel(), CHUNK):
            hi = min(lo + CHUNK, result.numel())
            expected = self.ws.get("expected", hi - lo, self.tdtype).copy_(make(start + lo, hi - lo))
            got = result[lo:hi]
            if tolerant:
                total += _ulp_far(torch, got, expected, _BITS_VIEW[self.spec.dtype.name])
            else:
                total += torch.count_nonzero(torch.ne(got, expected, out=self.ws.get("flag", hi - lo, torch.bool)))
        return total

    def tolerant(self) -> bool:
        """Whether results are compared within 2 ulp (float avg) rather than exactly."""
        return self.spec.op == "avg" and is_float(self.spec.dtype)

    def empty(self, length: int) -> Any:
        """A receive buffer of `length` elements holding the sentinel."""
        torch = self.torch
        return torch.full((length,), sentinel(self.spec.dtype), dtype=self.tdtype, device=self.ws.device)

    def reset(self, buf: Any) -> None:
        """Put the sentinel back into a receive buffer."""
        buf.fill_(sentinel(self.spec.dtype))


def _ulp_far(torch: Any, got: Any, expected: Any, view: str) -> Any:
    """Elements more than 2 ulp apart: all values are >= 0, so the distance is the difference of the bit patterns."""
    bits = getattr(torch, view)
    distance = got.view(bits).to(torch.int64) - expected.view(bits).to(torch.int64)
    return torch.count_nonzero(distance.abs_() > 2)
