"""Which transport NCCL chose, read from its own NCCL_DEBUG=INFO lines.

Ring and tree set-up lines name the path per channel: `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`,
`... [send] via NET/IB/0/GDRDMA`, `... via SHM/direct/direct`, `... via NET/Socket/0`. `Using network IB` (or
`Socket`) names the network plug-in: that part is gpuval.checks.nccl_debug's reader, the one the health check
uses, so training and `gpuval health` name the network alike. A job across nodes that shows NET/Socket fell back to TCP.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_VIA = re.compile(r"NCCL INFO Channel \S+ : .* via (\S+)")


@dataclass
class Transports:
    """Transports NCCL set up, with how many channel connections used each, and the network plug-in."""

    network: str | None = None
    paths: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """'P2P, NET/IB (network IB)' or '' when the text said nothing."""
        names = ", ".join(self.paths)
        if self.network:
            names = f"{names} (network {self.network})" if names else f"network {self.network}"
        return names


def _kind(path: str) -> str:
    """'NET/IB/0/GDRDMA' -> 'NET/IB'; 'P2P/IPC/read' -> 'P2P'; 'SHM/direct/direct' -> 'SHM'."""
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] == "NET" and len(parts) > 1 else parts[0]


def read_transports(text: str) -> Transports:
    """The transports named in NCCL debug output."""
    from gpuval.checks.nccl_debug import read_nccl_network

    network = read_nccl_network(text)
    paths = Counter(_kind(m) for m in _VIA.findall(text))
    return Transports(network=network.transport if network else None, paths=dict(paths))
