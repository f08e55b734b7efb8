"""CPU lists in the kernel's notation ("0-23,48-71") and as hexadecimal masks (srun, NCCL)."""

from __future__ import annotations

from gpuval.errors import UsageError


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; an empty string is no CPU."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                low, high = part.split("-", 1)
                cpus.update(range(int(low), int(high) + 1))
            else:
                cpus.add(int(part))
        except ValueError:
            raise UsageError(f"not a CPU list: {text!r}") from None
    return sorted(cpus)


def format_cpulist(cpus: list[int] | set[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = prev = None
    for cpu in ordered + [None]:  # type: ignore[list-item]
        if start is not None and (cpu is None or cpu != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        prev = cpu
    return ",".join(ranges)


def cpu_mask(cpus: list[int] | set[int]) -> str:
    """Hexadecimal affinity mask, as srun --cpu-bind=mask_cpu takes it: [0, 1, 4] -> '0x13'."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    return hex(value)


def parse_hex_mask(text: str) -> list[int]:
    """A sysfs/NCCL style mask '00000000,0000ffff,ff000000' -> CPUs 24..47."""
    value = int(text.replace(",", "").strip() or "0", 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]
