"""THE reader of NCCL's own words (NCCL_DEBUG=INFO): the network it chose (IB, Socket, or a plugin such as OFI) and
the path of every channel. `gpuval health` (nccl_transport), `gpuval train` and `gpuval import` all read logs here.

NCCL says the network once per rank at init: `NCCL INFO Using network IB` (2.12 and later), before that only in
`NET/IB : Using [0]mlx5_0:1/IB` and the `via NET/IB/0` channel lines. A fall back to `Socket` is silent apart
from these lines; this reader finds them, with the version, ranks, GPUDirect RDMA and topology file, and the
causes the log itself shows (NCCL_IB_DISABLE, libibverbs missing, no IB device). Ring and tree set-up lines name
the path per channel: `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`, `... [send] via NET/IB/0/GDRDMA`,
`... via SHM/direct/direct`, `... via NET/Socket/0`: counted per kind of path (P2P, SHM, NET/IB, NET/Socket).
The verdict on what the log shows is gpuval.baselines.transport's, not this module's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from collections import Counter
from typing import Any

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NET_USING = re.compile(r"NCCL INFO NET/(IB|Socket|OFI|[A-Za-z]+) : Using (.*?)\s*$")
_VIA_NET = re.compile(r"via NET/([A-Za-z ]+?)/\d+(/GDRDMA)?")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda([\d.]+))?")
_NRANKS = re.compile(r"\bnranks (\d+)\b")
_TOPO_FILE = re.compile(r"NCCL_TOPO_FILE(?: set by environment to| environment variable to) (\S+)")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']+)'")
_HOST = re.compile(r"^(?:.*?[\s:>\]])?([\w.\-]+):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)")
_IB_DISABLED = re.compile(r"NCCL_IB_DISABLE set by environment to 1")
_NO_VERBS = re.compile(r"Failed to open libibverbs|libibverbs\.so.*(cannot open|not found)")
_NO_IB_DEVICE = re.compile(r"NET/IB : No device found")
_OFI = re.compile(r"NET/OFI ")
_RANK_ID = re.compile(r"([\w.\-]+):(\d+):\d+ \[(\d+)\] NCCL")  # host:pid:tid [cuda device]
_CHANNEL_PATH = re.compile(r"NCCL INFO Channel \S+ : .* via (\S+)")

KIND = "nccl-debug"


@dataclass
class RankNetwork:
    """One rank's `Using network` line: which process (host, pid, CUDA device) chose which network."""

    transport: str
    line: str
    host: str | None = None
    pid: int | None = None
    device: int | None = None

    def who(self) -> str:
        """The rank as the log names it: host, pid and CUDA device where the line has them."""
        if self.host is None:
            return "a rank"
        return f"{self.host} pid {self.pid} (CUDA device {self.device})"


@dataclass
class NcclNetwork:
    """What one NCCL_DEBUG=INFO log says about the network NCCL chose."""

    transport: str | None = None  # "IB", "Socket", or a plugin's name ("OFI", ...)
    evidence: str | None = None  # the exact line that says so
    network_name: str | None = None  # NCCL's own name for it ("IB", "Socket", "AWS Libfabric", "Libfabric")
    transports_seen: list[str] = field(default_factory=list)  # more than one: ranks disagree
    rank_networks: list[RankNetwork] = field(default_factory=list)  # every rank's `Using network` line
    nccl_version: str | None = None
    cuda_version: str | None = None
    ranks: int | None = None
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # "[0]mlx5_ib0:1/IB [1]..." or "[0]eth0:10.0.0.5<0>"
    gdr: bool | None = None  # GPUDirect RDMA: True if any HCA has it, False if all say Disabled
    gdr_evidence: str | None = None
    topology_file: str | None = None
    ib_disabled_by_env: bool = False
    libibverbs_missing: bool = False
    no_ib_device: bool = False
    paths: dict[str, int] = field(default_factory=dict)  # channel connections per kind of path: {"P2P": 24, ...}
    source: str = ""  # the file it was read from

    @property
    def path_summary(self) -> str:
        """'P2P, NET/IB (network IB)': the kinds of channel path, then the network."""
        names = ", ".join(self.paths)
        if self.transport:
            names = f"{names} (network {self.transport})" if names else f"network {self.transport}"
        return names

    def to_json(self) -> dict[str, Any]:
        """The document `gpuval parse --json` prints."""
        return {"kind": KIND, **asdict(self)}


def _transport(name: str, ofi_seen: bool) -> str:
    if name in ("IB", "Socket"):
        return name
    return "OFI" if ofi_seen or "Libfabric" in name else name


def _rank_network(transport: str, line: str) -> RankNetwork:
    who = _RANK_ID.search(line)
    if who is None:
        return RankNetwork(transport, line)
    return RankNetwork(transport, line, who.group(1), int(who.group(2)), int(who.group(3)))


def _path_kind(path: str) -> str:
    """'NET/IB/0/GDRDMA' -> 'NET/IB'; 'P2P/IPC/read' -> 'P2P'; 'SHM/direct/direct' -> 'SHM'."""
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] == "NET" and len(parts) > 1 else parts[0]


def read_nccl_network(text: str, source: str = "") -> NcclNetwork | None:
    """What the log says about NCCL's network and channel paths; None when it holds no NCCL INFO line about the
    network (channel lines alone, as a bare nccl-tests table interleaves them, are no network document)."""
    found = NcclNetwork(source=source)
    found.paths = dict(Counter(_path_kind(m) for m in _CHANNEL_PATH.findall(text)))
    ofi_seen = bool(_OFI.search(text))
    fallback: tuple[str, str, str] | None = None  # transport, line, NCCL's name
    hosts: list[str] = []
    gdr_states: list[tuple[bool, str]] = []
    for line in text.splitlines():
        line = line.rstrip()
        if "NCCL" not in line:
            continue
        host = _HOST.match(line)
        if host and host.group(1) not in hosts:
            hosts.append(host.group(1))
        if m := _USING_NETWORK.search(line):
            name = m.group(1).strip()
            transport = _transport(name, ofi_seen)
            if transport not in found.transports_seen:
                found.transports_seen.append(transport)
            found.rank_networks.append(_rank_network(transport, line.strip()))
            if found.evidence is None:
                found.transport, found.network_name, found.evidence = transport, name, line.strip()
        elif m := _NET_USING.search(line):
            if m.group(2) not in found.devices:
                found.devices.append(m.group(2))
            if fallback is None and m.group(1) in ("IB", "Socket"):
                fallback = (m.group(1), line.strip(), m.group(1))
        elif (m := _VIA_NET.search(line)) and fallback is None:
            fallback = (_transport(m.group(1), ofi_seen), line.strip(), m.group(1))
        if m := _VIA_NET.search(line):
            if m.group(2):
                gdr_states.append((True, line.strip()))
        if m := _VERSION.search(line):
            found.nccl_version = found.nccl_version or m.group(1)
            found.cuda_version = found.cuda_version or m.group(2)
        if m := _NRANKS.search(line):
            found.ranks = max(found.ranks or 0, int(m.group(1)))
        if m := _TOPO_FILE.search(line):
            found.topology_file = found.topology_file or m.group(1)
        if m := _GDR.search(line):
            gdr_states.append((m.group(1) == "Enabled", line.strip()))
        found.ib_disabled_by_env |= bool(_IB_DISABLED.search(line))
        found.libibverbs_missing |= bool(_NO_VERBS.search(line))
        found.no_ib_device |= bool(_NO_IB_DEVICE.search(line))
    if found.evidence is None and fallback is not None:
        found.transport, found.evidence, found.network_name = fallback
        found.transports_seen = [fallback[0]]
    if gdr_states:
        enabled = [e for ok, e in gdr_states if ok]
        found.gdr = bool(enabled)
        found.gdr_evidence = enabled[0] if enabled else gdr_states[0][1]
    found.hosts = hosts
    if found.transport is None and not found.devices:
        return None
    return found
