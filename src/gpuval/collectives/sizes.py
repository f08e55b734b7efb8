"""nccl-tests' size syntax and sweep: `-b 8 -e 128M -f 2` or `-i 1M`."""

from __future__ import annotations

import re

from gpuval.errors import UsageError

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d{1,19})\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
MAX_SIZE = 1024**4  # 1 TiB: more than any GPU holds; a larger size is a typo, never a message


def parse_size(text: str | int) -> int:
    """'8' -> 8, '128M' -> 134217728, '1G' -> 1073741824 (powers of 1024, as nccl-tests)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"bad size {text!r}: use a number with an optional K, M or G suffix (e.g. 8, 64K, 128M, 8G)")
    size = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if size > MAX_SIZE:
        raise UsageError(f"bad size {text!r}: above 1T, more memory than any GPU or host buffer here")
    return size


def format_size(nbytes: int) -> str:
    """134217728 -> '128M': the shortest exact nccl-tests spelling."""
    for suffix in ("T", "G", "M", "K"):
        unit = _UNITS[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def sweep(min_bytes: int, max_bytes: int, step_factor: int = 1, step_bytes: int = 1024**2) -> list[int]:
    """Message sizes from min to max: times step_factor when it is above 1, else plus step_bytes."""
    if min_bytes < 0 or max_bytes < 0:
        raise UsageError("sizes must not be negative")
    if min_bytes > max_bytes:
        raise UsageError(f"minimum size (-b {min_bytes}) is above maximum size (-e {max_bytes})")
    if step_factor < 1:
        raise UsageError(f"step factor (-f {step_factor}) must be at least 1")
    if step_factor == 1 and step_bytes < 1 and min_bytes != max_bytes:
        raise UsageError(f"step bytes (-i {step_bytes}) must be at least 1")
    sizes = [min_bytes]
    while True:
        size = sizes[-1] * step_factor if step_factor > 1 else sizes[-1] + step_bytes
        if size > max_bytes or size == sizes[-1]:
            return sizes
        sizes.append(size)
