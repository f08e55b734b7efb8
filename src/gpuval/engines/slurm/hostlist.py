"""Slurm host lists, both ways, in pure Python: `gpu-[01-03,7]` <-> gpu-01, gpu-02, gpu-03, gpu-7.

The fleet check (and the Slurm engine's node queries) read `--nodelist` and writes `--nodelist` / `--exclude` values without asking scontrol (so a dry
run and the tests need no Slurm), in the syntax `scontrol show hostnames` / `scontrol show hostlist` use: a prefix,
then ranges in brackets whose numbers keep their zero padding. Linear in the number of hosts (one sort to compress).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from gpuval.engines.nodes import MAX_NODES, MAX_TEXT
from gpuval.errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TAIL = re.compile(r"^(.*?)(\d+)$")


def expand(text: str) -> list[str]:
    """Every host of a host list, in its order, duplicates removed: 'n[1-3],m7' -> ['n1', 'n2', 'n3', 'm7'].

    Every item is parsed and counted before any is expanded, so a list that would name more than MAX_NODES hosts
    (`n[0-999999],...` forty times) is refused at once, having built nothing."""
    if len(text) > MAX_TEXT:
        raise UsageError(f"node list of {len(text)} characters: at most {MAX_TEXT}")
    items = [_parse(item, text) for item in _split_top(text.strip())]
    if not items:
        raise UsageError(f"node list {_short(text)!r}: no node named")
    total = sum(item.count for item in items)
    if total > MAX_NODES:
        raise UsageError(f"node list {_short(text)!r}: {total} nodes, more than {MAX_NODES}")
    hosts = [host for item in items for host in item.hosts()]
    for host in hosts:
        if not _NAME.match(host):
            raise UsageError(f"node list {_short(text)!r}: {host!r} is not a node name")
    return list(dict.fromkeys(hosts))


@dataclass(frozen=True)
class _Item:
    """One item of a host list: a plain name, or a prefix, numbered ranges (low, high, zero-padded width) and a
    suffix."""

    prefix: str
    ranges: tuple[tuple[int, int, int], ...] = ()
    suffix: str = ""

    @property
    def count(self) -> int:
        return sum(high - low + 1 for low, high, _ in self.ranges) if self.ranges else 1

    def hosts(self) -> list[str]:
        if not self.ranges:
            return [self.prefix]
        return [f"{self.prefix}{n:0{width}d}{self.suffix}" for low, high, width in self.ranges
                for n in range(low, high + 1)]


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _parse(item: str, whole: str) -> _Item:
    """An item's parts, its ranges checked (numbers, not reversed, each within MAX_NODES); nothing expanded."""
    match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", item)
    if not match:
        if not _NAME.match(item):
            raise UsageError(f"node list {_short(whole)!r}: {item!r} is not a node name")
        return _Item(item)
    prefix, ranges, suffix = match.groups()
    parsed = []
    for part in ranges.split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"node list {_short(whole)!r}: [{_short(ranges)}] is not a list of numbers and ranges")
        width = len(low) if low.startswith("0") else 1
        first, last = int(low), int(high) if sep else int(low)
        if last < first or last - first >= MAX_NODES:
            raise UsageError(f"node list {_short(whole)!r}: range {part} is empty or too large")
        parsed.append((first, last, width))
    return _Item(prefix, tuple(parsed), suffix)


def compress(hosts: Iterable[str]) -> str:
    """The shortest usual host list of `hosts`: same prefix and number width in one bracket, runs as ranges;
    sorted by prefix, then number. 'n1','n2','n3','n5' -> 'n[1-3,5]'."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for host in dict.fromkeys(hosts):
        match = _TAIL.match(host)
        if not match:
            plain.append(host)
            continue
        prefix, digits = match.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    for (prefix, width), numbers in list(groups.items()):
        if width == 0:  # 1000..4096 belong with 0001..0999 when a padded group of their length exists
            keep = [n for n in numbers if (prefix, len(str(n))) not in groups or len(str(n)) == 1]
            for n in numbers:
                if n not in keep:
                    groups[(prefix, len(str(n)))].append(n)
            groups[(prefix, 0)] = keep
    parts = sorted(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        if not numbers:
            continue
        numbers.sort()
        runs: list[str] = []
        start = prev = numbers[0]
        for n in numbers[1:] + [None]:  # type: ignore[list-item]
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(f"{start:0{width}d}" + (f"-{prev:0{width}d}" if prev != start else ""))
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}{runs[0]}" if len(runs) == 1 and "-" not in runs[0] else f"{prefix}[{','.join(runs)}]")
    return ",".join(parts)
