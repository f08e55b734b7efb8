"""IMEX, the service that lets a multi-node NVLink domain's GPUs share memory across hosts (NVIDIA IMEX guide):
what this node says of it, and THE reader of `nvidia-imex-ctl`'s answers.

- `nvidia-imex-ctl -q`: this node's daemon state, one word (READY; the states DCGM's DCGM_FI_IMEX_DAEMON_STATUS
  lists: INITIALIZING, STARTING_AUTH_SERVER, WAITING_FOR_PEERS, WAITING_FOR_RECOVERY, INIT_GPU, READY,
  SHUTTING_DOWN, UNAVAILABLE).
- `nvidia-imex-ctl -N`: the whole domain: `Node #i - <ip> - <state> [- Version: v]` per node, the From/To
  connectivity matrix (C connected, I invalid, N never connected, R recovering, D disconnected, A authenticating,
  !V! version mismatch, !M! node map mismatch) and `Domain State: UP` (tests/data/imex: an 18-node rack, AWS).
- `nvidia-imex-ctl -N -j`: the same as JSON, `{"status": ..., "nodes": {"<i>": {"status", "host", "version",
  "connections": {"<j>": {"status": "CONNECTED", ...}}}}}` (the shape DCGM and the published parsers read).
- the channels, `/dev/nvidia-caps-imex-channels/channelN`: without one, cuMemCreate of a fabric handle fails with
  CUDA_ERROR_NOT_PERMITTED (NVIDIA/nvbandwidth#39).

Anything else (truncated JSON, a matrix of the wrong size, a state word nobody prints) is ImexOutputError naming the
command: "could not run", never a verdict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuval.errors import GpuvalError

IMEX_CHANNELS = "dev/nvidia-caps-imex-channels"  # where the driver's channel devices are, below the root
DAEMON_STATES = ("INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY", "INIT_GPU",
                 "READY", "SHUTTING_DOWN", "UNAVAILABLE")
CELLS = {"C": "connected", "I": "invalid (not reachable)", "N": "never connected", "R": "recovering",
         "D": "disconnected", "A": "authenticating", "!V!": "version mismatch", "!M!": "node map mismatch"}
_JSON_CELLS = {"CONNECTED": "C", "INVALID": "I", "NEVER_CONNECTED": "N", "RECOVERING": "R", "DISCONNECTED": "D",
               "AUTHENTICATING": "A"}
_MAX_CHARS = 2_000_000  # an 18-node answer is ~3 kB; a domain of 1,024 nodes would be ~4 MB of JSON at most
_MAX_NODES = 1024
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_HEADER = re.compile(r"^\s*Nodes From\\To((?:\s+\d+)+)\s*$")
_ROW = re.compile(r"^\s*(\d+)\s{2,}(\S.*?)\s*$")
_STATE = re.compile(r"^Domain State:\s*(\S+)\s*$")


class ImexOutputError(GpuvalError):
    """nvidia-imex-ctl answered something it does not print: the answer cannot be judged."""


@dataclass(frozen=True)
class ImexPeer:
    """One node of the IMEX domain as the domain lists it."""

    index: int
    host: str
    status: str
    version: str = ""

    @property
    def name(self) -> str:
        """How a finding names it."""
        return f"node #{self.index} ({self.host})"


@dataclass
class ImexDomain:
    """The domain `nvidia-imex-ctl -N` (or `-N -j`) describes: its state, its nodes, each From/To cell."""

    state: str
    peers: list[ImexPeer]
    cells: dict[tuple[int, int], str]  # (from, to) -> CELLS code

    def not_ready(self) -> list[ImexPeer]:
        """The nodes that are not READY."""
        return [p for p in self.peers if p.status != "READY"]

    def broken(self) -> list[tuple[ImexPeer, ImexPeer, str]]:
        """Every From/To pair that is not connected, with what its cell says."""
        by_index = {p.index: p for p in self.peers}
        return [(by_index[a], by_index[b], CELLS.get(code, code)) for (a, b), code in sorted(self.cells.items())
                if code != "C"]


@dataclass
class ImexHost:
    """What this node says of IMEX: systemd's state of nvidia-imex (None: systemd cannot be asked), whether
    nvidia-imex-ctl is installed, its raw `-q` and `-N -j` answers (None: not run, or it failed: `detail` says
    why), the channel devices, and the channels' major number in /proc/devices (None: not registered)."""

    service: str | None = None
    installed: bool = False
    query: str | None = None
    domain: str | None = None
    channels: list[str] = field(default_factory=list)
    channel_major: int | None = None  # None: not registered in /proc/devices, or not read
    detail: str = ""


def _bounded(text: str, command: str) -> str:
    if len(text) > _MAX_CHARS:
        raise ImexOutputError(f"{command}: {len(text)} characters, more than any domain prints")
    return text


def parse_query(text: str) -> str:
    """This node's daemon state from `nvidia-imex-ctl -q`."""
    word = _bounded(text, "nvidia-imex-ctl -q").strip().split("\n")[0].strip() if text.strip() else ""
    if word not in DAEMON_STATES:
        raise ImexOutputError(f"nvidia-imex-ctl -q answered {word[:60]!r}, not a daemon state")
    return word


def parse_domain(text: str) -> ImexDomain:
    """The domain from `nvidia-imex-ctl -N -j` (JSON) or `-N` (the table)."""
    body = _bounded(text, "nvidia-imex-ctl -N")
    domain = _from_json(body) if body.lstrip().startswith("{") else _from_table(body)
    if not domain.peers or len(domain.peers) > _MAX_NODES:
        raise ImexOutputError(f"nvidia-imex-ctl -N lists {len(domain.peers)} nodes")
    return domain


def _from_table(text: str) -> ImexDomain:
    peers, cells, state, columns = [], {}, None, None
    for line in text.splitlines():
        if m := _NODE.match(line.strip()):
            peers.append(ImexPeer(int(m.group(1)), m.group(2), m.group(3), m.group(4) or ""))
        elif m := _HEADER.match(line):
            columns = [int(c) for c in m.group(1).split()]
        elif m := _STATE.match(line.strip()):
            state = m.group(1)
        elif columns is not None and state is None and (m := _ROW.match(line)):
            codes = m.group(2).split()
            if len(codes) != len(columns):
                raise ImexOutputError(f"nvidia-imex-ctl -N: row {m.group(1)} of the connectivity matrix has "
                                      f"{len(codes)} cells for {len(columns)} nodes")
            cells.update({(int(m.group(1)), c): code for c, code in zip(columns, codes)})
    if state is None:
        raise ImexOutputError("nvidia-imex-ctl -N: no 'Domain State:' line (a cut answer?)")
    return _checked(ImexDomain(state, peers, cells), "nvidia-imex-ctl -N")


def _from_json(text: str) -> ImexDomain:
    command = "nvidia-imex-ctl -N -j"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ImexOutputError(f"{command}: not JSON ({exc})") from None
    try:
        nodes: dict[str, Any] = raw["nodes"]
        peers = [ImexPeer(int(i), str(n.get("host", "?")), str(n["status"]), str(n.get("version", "")))
                 for i, n in nodes.items()]
        cells = {(int(i), int(j)): _JSON_CELLS.get(str(c.get("status")), str(c.get("status")))
                 for i, n in nodes.items() for j, c in (n.get("connections") or {}).items()}
        state = str(raw["status"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ImexOutputError(f"{command}: not the domain's shape ({type(exc).__name__}: {exc})") from None
    # a peer that could not be reached lists no connections: its cells have no status (the table's I)
    indices = [p.index for p in peers]
    cells = {(a, b): cells.get((a, b), "I") for a in indices for b in indices} | cells
    return _checked(ImexDomain(state, peers, cells), command)


def _checked(domain: ImexDomain, command: str) -> ImexDomain:
    """The matrix is N x N over the N nodes listed, with codes the command prints."""
    indices = sorted(p.index for p in domain.peers)
    if len(set(indices)) != len(indices):
        raise ImexOutputError(f"{command}: a node is listed twice")
    wanted = {(a, b) for a in indices for b in indices}
    if set(domain.cells) != wanted:
        rows = {a for a, _ in domain.cells}
        raise ImexOutputError(f"{command}: a {len(rows)} x {len(domain.cells) // max(len(rows), 1)} connectivity "
                              f"matrix for {len(indices)} nodes")
    odd = sorted({c for c in domain.cells.values() if c not in CELLS} - set(_JSON_CELLS))
    if odd and command.endswith("-N"):
        raise ImexOutputError(f"{command}: connectivity codes {odd[:5]} are not in its legend")
    return domain
