"""THE reader of NCCL's own words (NCCL_DEBUG=INFO): the network it chose (IB, Socket, or a plugin such as OFI) and
the path of every channel. `gpuval health` (nccl_transport), `gpuval train` and `gpuval import` all read logs here.

NCCL says the network once per rank at init: `NCCL INFO Using network IB` (2.12 and later), before that only in
`NET/IB : Using [0]mlx5_0:1/IB` and the `via NET/IB/0` channel lines (2.4: `Ring 00 : 1 -> 0 [receive] via
NET/IB/0`); with the aws-ofi-nccl plugin before 2.12, only in `NET/OFI Selected Provider is efa` (the
`NET/Socket : Using [0]eth0` line beside it is the bootstrap's interface, not the network).
`NET/IB : Using [RO]; OOB ...` with no device, after `NET/IB : No device found`, is no IB: NCCL goes on to sockets. A fall back to `Socket` is silent apart from these lines; this reader finds them, with the version,
ranks, GPUDirect RDMA (HCA capability, per-path "Disabled for GPU ... / HCA ... (distance ...)", channels that use
/GDRDMA), NVLS, CollNet/SHARP, multi-node NVLink (MNNVL), the algorithms NCCL names, the topology file, and the
causes the log itself shows
(NCCL_IB_DISABLE, libibverbs missing, no IB device). Ring and tree set-up lines name the path per channel:
`Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`, `... [send] via NET/IB/0/GDRDMA`, PXN `via NET/IB/0(3)/GDRDMA`,
`... via SHM/direct/direct`: counted per kind of path (P2P, SHM, NET/IB, NET/Socket).
Multi-node NVLink (NCCL 2.20+, src/init.cc): each rank prints its GPU's fabric registration, `MNNVL busId 0x801000
fabric UUID a44167d15423d758.7d6b24c07d32e7b3 cliqueId 0x2786 state 3 healthMask 0xaa` (the cluster UUID as two
64-bit halves; `fabric UUID 0.0 cliqueId 0x0`: the GPU is in no NVLink domain), and each communicator whether it
uses it, `comm 0x9a39870 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 1` (NVIDIA/nccl#2303).
The verdict on what the log shows is gpuval.baselines.transport's (the network) and the fleet's racks' (MNNVL),
not this module's.

The reader streams (`NcclDebugStream.feed` whole lines, then `close`): one pass, a few string tests per line, and
no pattern that can take more than linear time on a hostile line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuval.collectives.logtext import clip

_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4})(?:\+cuda([\d.]{1,16}))?")
_NRANKS = re.compile(r"\bnranks (\d{1,7})\b")
_TOPO_FILE = re.compile(r"NCCL_TOPO_FILE(?: set by environment to| environment variable to) (\S{1,4096})")
_GDR_HCA = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d{1,4}) '([^']{1,256})'")
_NVLS_CHANNELS = re.compile(r"\b(\d{1,4}) nvls channels\b")
_MNNVL_FABRIC = re.compile(r"^MNNVL busId 0x[0-9a-fA-F]{1,16} fabric UUID ([0-9a-fA-F]{1,16})\.([0-9a-fA-F]{1,16}) "
                           r"cliqueId 0x([0-9a-fA-F]{1,8})\b")
_MNNVL_COMM = re.compile(r"^comm 0x[0-9a-fA-F]{1,16} rank \d{1,7} nRanks \d{1,7} .{0,80}\bMNNVL ([01])\s*$")
_MAX_DOMAINS = 64  # distinct NVLink domains kept (a rack has one; more is a log of many racks)
_ALGO_TUNING = re.compile(r"-> Algo (\w{1,32})")
_NO_VERBS = ("Failed to open libibverbs", "libibverbs.so")
# NCCL's ncclAlgoStr order: what a tuning line's `Algo N` names.
_ALGO_NAMES = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
_ALGO_SPELLINGS = {n.upper(): n for n in _ALGO_NAMES} | {"COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN":
                                                        "CollNetChain", "NVLS_TREE": "NVLSTree"}
_CONNECTED = {"all rings": "Ring", "all trees": "Tree", "NVLS tree": "NVLSTree", "NVLS": "NVLS",
              "CollNet": "CollNet", "collnet": "CollNet"}
_CACHE_LIMIT = 65536
_QUOTE = 2000  # characters of a line kept as evidence (its beginning: what NCCL wrote, not what was glued on)

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
    network_name: str | None = None  # NCCL's own name for it ("IB", "Socket", "AWS Libfabric", "IBext")
    transports_seen: list[str] = field(default_factory=list)  # more than one: ranks disagree
    rank_networks: list[RankNetwork] = field(default_factory=list)  # every rank's `Using network` line
    nccl_version: str | None = None
    cuda_version: str | None = None
    ranks: int | None = None
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # "[0]mlx5_ib0:1/IB [1]..." or "[0]eth0:10.0.0.5<0>"
    gdr: bool | None = None  # GPUDirect RDMA: True if any HCA has it or a channel uses it, False if all say Disabled
    gdr_evidence: str | None = None
    gdr_capable: bool | None = None  # the HCA capability lines: True if any HCA says Enabled, False if all Disabled
    gdr_used: bool | None = None  # True: some NET channel uses /GDRDMA; False: NET channels exist and none does
    gdr_disabled: list[str] = field(default_factory=list)  # "GPU Direct RDMA Disabled for GPU ... / HCA ..." lines
    net_channels: int = 0  # channel connections through the network (NET/..., PXN's NET/IB/0(3) included)
    nvls: bool | None = None  # NVLink SHARP: "NVLS multicast support is (not) available", "Connected NVLS"
    collnet: bool | None = None  # CollNet / SHARP in-network reductions: COLLNET channels, "CollNet ... enabled"
    mnnvl_on: int = 0  # communicators that say `MNNVL 1` (multi-node NVLink in use)
    mnnvl_off: int = 0  # communicators that say `MNNVL 0`
    fabric_domains: list[str] = field(default_factory=list)  # "<uuid>.<uuid>.<clique>" of the `MNNVL busId` lines
    fabric_unregistered: int = 0  # `MNNVL busId` lines of a GPU in no NVLink domain (fabric UUID 0.0 cliqueId 0x0)
    mnnvl_evidence: str | None = None  # the first line that shows a fall back (MNNVL 0, a zero UUID), else MNNVL 1
    algorithms: list[str] = field(default_factory=list)  # the algorithms NCCL names choosing or setting up
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

    @property
    def mnnvl(self) -> bool | None:
        """Multi-node NVLink: True when every communicator said `MNNVL 1`, False when one said 0 (or a GPU is in no
        NVLink domain), None when the log says nothing of it."""
        if self.mnnvl_off or (self.fabric_unregistered and not self.mnnvl_on):
            return False
        return True if self.mnnvl_on else None

    def to_json(self) -> dict[str, Any]:
        """The document `gpuval parse --json` prints."""
        return {"kind": KIND, **asdict(self)}


def _transport(name: str, ofi_seen: bool) -> str:
    """NCCL's name for its network as a transport: IB (verbs, also HPC-X's IBext and RDMA plugins), Socket, OFI."""
    if name in ("IB", "Socket"):
        return name
    if ofi_seen or "Libfabric" in name or name.startswith("OFI"):
        return "OFI"
    if name.startswith("IBext") or "RDMA" in name.split():
        return "IB"
    return name


def _path_kind(path: str) -> str:
    """'NET/IB/0/GDRDMA' -> 'NET/IB'; 'P2P/IPC/read' -> 'P2P'; 'SHM/direct/direct' -> 'SHM'."""
    parts = path.split("/", 2)
    return "/".join(parts[:2]) if parts[0] == "NET" and len(parts) > 1 else parts[0]


def _who(prefix: str) -> tuple[str, int, int] | None:
    """(host, pid, CUDA device) from what precedes `NCCL INFO`: `...host:pid:tid [dev] ` (a launcher's prefix,
    glued on or not, before it)."""
    words = prefix.rsplit(None, 2)
    if len(words) < 2 or not (words[-1].startswith("[") and words[-1].endswith("]") and words[-1][1:-1].isdigit()):
        return None
    ident = words[-2].rsplit(":", 2)
    if len(ident) != 3 or not (ident[1].isdigit() and ident[2].isdigit()) or len(ident[1]) > 10:
        return None
    host = re.split(r"[:>\]\s]", ident[0])[-1]
    if not host or len(words[-1]) > 8:
        return None
    return host, int(ident[1]), int(words[-1][1:-1])


class NcclDebugStream:
    """NCCL_DEBUG=INFO text fed in pieces of whole lines; `close` gives the document (none when the log holds no
    NCCL line about the network)."""

    def __init__(self, source: str = "") -> None:
        self.found = NcclNetwork(source=source)
        self.ofi_seen = False
        self.fallback: tuple[str, str, str] | None = None  # (NCCL's name, line, kind of evidence)
        self.names: list[tuple[str, str]] = []  # (NCCL's network name, line) per `Using network` line
        self.hosts: dict[str, None] = {}
        self.who: dict[str, tuple[str, int, int] | None] = {}
        self.hca_gdr: list[tuple[bool, str]] = []
        self.gdr_channel: str | None = None
        self.algorithms: dict[str, None] = {}
        self.paths: dict[str, int] = {}
        self.mnnvl_fell_back = False  # mnnvl_evidence quotes a fall back

    def feed(self, text: str) -> list[NcclNetwork]:
        """Read whole lines (nothing is returned before `close`)."""
        if "NCCL" not in text:
            return []
        for raw in text.splitlines():
            line = clip(raw)
            at = line.find("NCCL INFO ")
            if at < 0:
                at = line.find("NCCL WARN ")
                if at < 0:
                    if "NCCL version" in line:  # rank 0 prints it bare: `NCCL version 2.19.3+cuda12.3`
                        self._other(line, line)
                    continue
            self._line(line.rstrip(), at)
        return []

    def _line(self, line: str, at: int) -> None:
        prefix, message = line[:at], line[at + 10:]
        if prefix not in self.who:
            if len(self.who) > _CACHE_LIMIT:
                self.who.clear()
            self.who[prefix] = _who(prefix)
        who = self.who[prefix]
        if who is not None and who[0] not in self.hosts:
            self.hosts[who[0]] = None
        head = message[:8]
        if head.startswith(("Channel", "Ring ", "Tree ", "CollNet")) and " via " in message:
            self._channel(line, message)
        elif head == "Using ne" and message.startswith("Using network "):
            self.names.append((message[14:].strip()[:_QUOTE], line.strip()[:_QUOTE]))
        elif head.startswith("NET/"):
            self._net(line, message)
        else:
            self._other(line, message)

    def _channel(self, line: str, message: str) -> None:
        path = message.rsplit(" via ", 1)[1].strip()
        kind = _path_kind(path)
        self.paths[kind] = self.paths.get(kind, 0) + 1
        if path.startswith("COLLNET/"):
            self.found.collnet = True
        if not path.startswith("NET/"):
            return
        self.found.net_channels += 1
        if "/GDRDMA" in path and self.gdr_channel is None:
            self.gdr_channel = line.strip()[:_QUOTE]
        if self.fallback is None:
            self.fallback = (kind[4:][:_QUOTE], line.strip()[:_QUOTE], "channel")

    def _net(self, line: str, message: str) -> None:
        found = self.found
        name, _, rest = message[4:].partition(" ")
        if name.startswith("OFI"):
            self.ofi_seen = True
            if rest.startswith("Selected Provider is ") and (self.fallback is None or self.fallback[2] != "plugin"):
                # NCCL 2.4-2.11 with aws-ofi-nccl: the plugin took the network; its only word on it is this line
                self.fallback = ("OFI", line.strip()[:_QUOTE], "plugin")
        if rest.startswith(": Using "):
            devices = rest[8:].strip()[:_QUOTE]
            if devices not in found.devices:
                found.devices.append(devices)
            listed = devices.startswith("[") and devices[1:2].isdigit()  # `[RO]; OOB ...`: no device at all
            # a plugin that selected its provider owns the network: `NET/Socket : Using` is then the bootstrap's
            if listed and name in ("IB", "Socket") and (self.fallback is None or self.fallback[2] == "channel"):
                self.fallback = (name, line.strip()[:_QUOTE], "net")
        elif rest.startswith(": No device found"):
            found.no_ib_device |= name == "IB"
        self._other(line, message)

    def _other(self, line: str, message: str) -> None:
        found = self.found
        if "GPU Direct RDMA" in message:
            if m := _GDR_HCA.search(message):
                self.hca_gdr.append((m.group(1) == "Enabled", line.strip()[:_QUOTE]))
            elif "Disabled for GPU" in message and len(found.gdr_disabled) < 256:
                found.gdr_disabled.append(line.strip()[:_QUOTE])
        if "NCCL version" in message and (m := _VERSION.search(message)):
            found.nccl_version = found.nccl_version or m.group(1)
            found.cuda_version = found.cuda_version or m.group(2)
        if "nranks " in message and (m := _NRANKS.search(message)):
            found.ranks = max(found.ranks or 0, int(m.group(1)))
        if "NCCL_" in message:
            if "NCCL_TOPO_FILE" in message and (m := _TOPO_FILE.search(message)):
                found.topology_file = found.topology_file or m.group(1)
            found.ib_disabled_by_env |= "NCCL_IB_DISABLE set by environment to 1" in message
        if "MNNVL" in message:
            self._mnnvl(line, message)
        if "libibverbs" in message and (_NO_VERBS[0] in message or (
                _NO_VERBS[1] in message and ("cannot open" in message or "not found" in message))):
            found.libibverbs_missing = True
        self._features(message)

    def _mnnvl(self, line: str, message: str) -> None:
        """A GPU's fabric registration (`MNNVL busId ...`) or a communicator's `... MNNVL 0|1`."""
        found = self.found
        if (m := _MNNVL_FABRIC.match(message)) is not None:
            low, high, clique = (int(g, 16) for g in m.groups())
            if low == high == clique == 0:
                found.fabric_unregistered += 1
                self._mnnvl_quote(line, fell_back=True)
            elif (domain := f"{m.group(1)}.{m.group(2)}.{m.group(3)}".lower()) not in found.fabric_domains \
                    and len(found.fabric_domains) < _MAX_DOMAINS:
                found.fabric_domains.append(domain)
        elif (m := _MNNVL_COMM.match(message.rstrip())) is not None:
            on = m.group(1) == "1"
            found.mnnvl_on += on
            found.mnnvl_off += not on
            self._mnnvl_quote(line, fell_back=not on)

    def _mnnvl_quote(self, line: str, fell_back: bool) -> None:
        """The line `mnnvl_evidence` quotes: the first that shows a fall back, else the first that shows MNNVL 1."""
        if fell_back and not self.mnnvl_fell_back:
            self.mnnvl_fell_back, self.found.mnnvl_evidence = True, line.strip()[:_QUOTE]
        elif self.found.mnnvl_evidence is None:
            self.found.mnnvl_evidence = line.strip()[:_QUOTE]

    def _features(self, message: str) -> None:
        found = self.found
        if "NVLS" in message or "nvls" in message:
            if "NVLS multicast support is not available" in message:
                found.nvls = found.nvls or False
            elif "NVLS multicast support is available" in message or message.startswith("Connected NVLS"):
                found.nvls = True
            elif (m := _NVLS_CHANNELS.search(message)) and int(m.group(1)) > 0:
                found.nvls = True
        lowered = message.lower() if "oll" in message or "SHARP" in message else ""
        if "collnet" in lowered or "sharp" in lowered:
            if "could not enable collnet" in lowered or ("collnet" in lowered and "disabled" in lowered):
                found.collnet = found.collnet or False
            elif "collnet" in lowered and "enabled" in lowered:
                found.collnet = True
        if message.startswith("Connected "):
            what = message[10:].strip()
            for words, algo in _CONNECTED.items():
                if what.startswith(words):
                    self.algorithms.setdefault(algo, None)
                    break
        elif "-> Algo " in message and (m := _ALGO_TUNING.search(message)):
            name = m.group(1)
            algo = _ALGO_NAMES[int(name)] if name.isdigit() and int(name) < len(_ALGO_NAMES) else name
            self.algorithms.setdefault(_ALGO_SPELLINGS.get(algo.upper(), algo), None)

    def close(self) -> list[NcclNetwork]:
        """The document, once the whole log was read; [] when it says nothing of the network."""
        found = self.found
        for name, line in self.names:
            transport = _transport(name, self.ofi_seen)
            if transport not in found.transports_seen:
                found.transports_seen.append(transport)
            who = self.who.get(line[:line.find("NCCL INFO ")]) if "NCCL INFO " in line else None
            found.rank_networks.append(RankNetwork(transport, line, *(who or (None, None, None))))
            if found.evidence is None:
                found.transport, found.network_name, found.evidence = transport, name, line
        if found.evidence is None and self.fallback is not None:
            name, found.evidence, _ = self.fallback
            found.transport, found.network_name = _transport(name, self.ofi_seen), name
            found.transports_seen = [found.transport]
        self._gdr()
        found.algorithms = list(self.algorithms)
        found.paths = dict(self.paths)
        found.hosts = list(self.hosts)
        said = (found.transport, found.devices, found.gdr_disabled, self.hca_gdr, found.net_channels, found.algorithms)
        if not any(said) and found.nvls is None and found.collnet is None and found.mnnvl is None \
                and not found.fabric_domains:
            return []  # P2P/SHM channel lines alone (a bare nccl-tests table interleaves them) are no network document
        return [found]

    def _gdr(self) -> None:
        found = self.found
        if self.hca_gdr:
            found.gdr_capable = any(ok for ok, _ in self.hca_gdr)
        if found.net_channels:
            found.gdr_used = self.gdr_channel is not None
        enabled = [line for ok, line in self.hca_gdr if ok] + ([self.gdr_channel] if self.gdr_channel else [])
        if enabled:
            found.gdr, found.gdr_evidence = True, enabled[0]
        elif self.hca_gdr:
            found.gdr, found.gdr_evidence = False, self.hca_gdr[0][1]


def read_nccl_network(text: str, source: str = "") -> NcclNetwork | None:
    """What the log says about NCCL's network, channel paths, GDR, NVLS and CollNet; None when it holds no NCCL
    line about them (P2P/SHM channel lines alone, as a bare nccl-tests table interleaves them, are no document)."""
    stream = NcclDebugStream(source)
    stream.feed(text)
    found = stream.close()
    return found[0] if found else None
