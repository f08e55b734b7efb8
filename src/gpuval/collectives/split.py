"""NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK as nccl-tests (src/common.cu, 2.19) reads them: each rank gets a
color, the ranks of one color form a sub-communicator, and every sub-communicator runs the same test at once.
On 8-GPU nodes "MOD 8" (or "AND 0x7", or the mask 0x7) gives eight rail-only groups (local rank r of every node:
purely inter-node traffic over rail r), "DIV 8" one group per node (purely intra-node).

    NCCL_TESTS_SPLIT_MASK=0x7      color = rank & 0x7   (the value is hex, with or without 0x)
    NCCL_TESTS_SPLIT="AND 0x7"     color = rank & 7     ("&" for AND)
    NCCL_TESTS_SPLIT="OR 1"        color = rank | 1     ("|")
    NCCL_TESTS_SPLIT="MOD 8"       color = rank % 8     ("%")
    NCCL_TESTS_SPLIT="DIV 8"       color = rank / 8     ("/")

The number is C's strtoul(s, &end, 0) after leading blanks (0x hex, leading 0 octal, else decimal) or 0b binary,
as common.cu's parseInt. Where nccl-tests silently runs unsplit (an unknown operator) or crashes (MOD 0, DIV 0),
gpuval says so in one line: a per-rail run that quietly measured the whole job would mislead.
"""

from __future__ import annotations

import re
from typing import Mapping

from gpuval.errors import UsageError

_OPERATORS = (("AND", "&"), ("OR", "|"), ("MOD", "%"), ("DIV", "/"))
_C_NUMBER = re.compile(r"^\s*(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def parse_int(text: str) -> int | None:
    """common.cu's parseInt: leading blanks, then 0b binary, else strtoul base 0 (its longest valid prefix)."""
    s = text.lstrip()
    if s[:2].lower() == "0b":
        digits = re.match(r"[01]+", s[2:])
        return int(digits.group(0), 2) if digits else 0  # strtoul of nothing is 0, and the prefix still parsed
    match = _C_NUMBER.match(s)
    if not match:
        return None
    number = match.group(1)
    if number[:2].lower() == "0x":
        return int(number, 16)
    return int(number, 8) if number.startswith("0") and len(number) > 1 else int(number)


def split_spec(env: Mapping[str, str]) -> str | None:
    """The split the environment asks for, as written ("NCCL_TESTS_SPLIT_MASK=0x7"), None without one; the mask
    wins when both are set, as in common.cu."""
    if env.get("NCCL_TESTS_SPLIT_MASK"):
        return f"NCCL_TESTS_SPLIT_MASK={env['NCCL_TESTS_SPLIT_MASK']}"
    if env.get("NCCL_TESTS_SPLIT"):
        return f"NCCL_TESTS_SPLIT={env['NCCL_TESTS_SPLIT']}"
    return None


def _operation(spec: str) -> tuple[str, int]:
    name, _, value = spec.partition("=")
    if name == "NCCL_TESTS_SPLIT_MASK":
        try:
            return "AND", int(value.strip(), 16)
        except ValueError:
            raise UsageError(f"{spec}: the mask is a hexadecimal number, e.g. 0x7") from None
    text = value.strip()
    for word, symbol in _OPERATORS:
        for prefix in (word, symbol):
            if text[:len(prefix)].upper() == prefix:
                number = parse_int(text[len(prefix):])
                if number is None:
                    raise UsageError(f"{spec}: no number after {prefix!r} (e.g. \"{word} 8\")")
                if word in ("MOD", "DIV") and number == 0:
                    raise UsageError(f"{spec}: {word} 0 divides by zero")
                return word, number
    raise UsageError(f"{spec}: use AND, OR, MOD or DIV and a number, e.g. NCCL_TESTS_SPLIT=\"MOD 8\" (nccl-tests "
                     "would run unsplit)")


def colors(spec: str, nranks: int) -> list[int]:
    """The color of each rank 0..nranks-1."""
    word, number = _operation(spec)
    apply = {"AND": lambda r: r & number, "OR": lambda r: r | number, "MOD": lambda r: r % number,
             "DIV": lambda r: r // number}[word]
    return [apply(rank) for rank in range(nranks)]


def groups(spec: str, nranks: int) -> dict[int, list[int]]:
    """Color -> its ranks in order (MPI_Comm_split keys by rank), colors ascending."""
    found: dict[int, list[int]] = {}
    for rank, color in enumerate(colors(spec, nranks)):
        found.setdefault(color, []).append(rank)
    return dict(sorted(found.items()))
