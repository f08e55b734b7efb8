"""NCCL topology files (NCCL_TOPO_FILE): which GPU and which NIC share a PCI switch, and each one's NUMA node.

Inside Azure VMs the PCI tree is flattened (every GPU and HCA is the only device of its own vPCI domain), so sysfs
cannot pair a GPU with its HCA and may report NUMA node -1. Azure ships the real layout as an NCCL topology file
(/opt/microsoft/ndv4-topo.xml ..., Azure/azhpc-images topology/): <cpu numaid affinity> elements holding PCI
bridges holding the GPUs (class 0x03...) and NICs (class 0x02...). NCCL reads it when NCCL_TOPO_FILE names it, or
when /etc/nccl.conf sets NCCL_TOPO_FILE; gpuval reads the same file the same way.

Links are classified as `nvidia-smi topo -m` does: PIX (one PCIe switch between them), PXB (several switches), PHB
(through the host bridge, same CPU), NODE (between host bridges of one NUMA node), SYS (across NUMA nodes).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from gpuval.errors import UsageError
from gpuval.node.cpus import parse_hex_mask

LINK_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000001:00:00.0', sysfs' '0001:00:00.0', NCCL's '0001:00:00.0' -> '0001:00:00.0' (lower case)."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


@dataclass
class TopoDevice:
    """A GPU or NIC of the file: its bus id, NUMA node, that node's CPUs and the bridges above it."""

    bus_id: str
    kind: str  # "gpu" or "nic"
    numa_node: int | None
    cpus: list[int]
    path: list[str] = field(default_factory=list)  # "cpu<numaid>" then bridge bus ids, from the top down


@dataclass
class NcclTopology:
    """The devices of one topology file, by normalized bus id."""

    source: str
    devices: dict[str, TopoDevice]

    def device(self, bus_id: str | None) -> TopoDevice | None:
        return self.devices.get(normalize_bus_id(bus_id)) if bus_id else None


def _kind(pci_class: str) -> str | None:
    value = int(pci_class, 16) if pci_class else 0
    return {0x03: "gpu", 0x02: "nic"}.get(value >> 16)


def _walk(node: ElementTree.Element, numa: int | None, cpus: list[int], path: list[str],
          out: dict[str, TopoDevice]) -> None:
    for child in node:
        if child.tag == "cpu":
            numaid = child.get("numaid")
            mask = child.get("affinity")
            _walk(child, int(numaid) if numaid not in (None, "") else None,
                  parse_hex_mask(mask) if mask else [], [f"cpu{numaid}"], out)
        elif child.tag == "pci" and child.get("busid"):
            bus_id = normalize_bus_id(child.get("busid", ""))
            kind = _kind(child.get("class", ""))
            if kind and not len(child.findall("pci")):
                out[bus_id] = TopoDevice(bus_id, kind, numa, cpus, list(path))
            _walk(child, numa, cpus, path + [bus_id], out)
        else:  # <nic>, <net>, <nvlink> ...: nothing placed below them
            _walk(child, numa, cpus, path, out)


def parse_topology(text: str, source: str) -> NcclTopology:
    """The GPUs and NICs of an NCCL topology XML document."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise UsageError(f"{source}: not an NCCL topology file ({exc})") from None
    devices: dict[str, TopoDevice] = {}
    _walk(root, None, [], [], devices)
    return NcclTopology(source, devices)


def topology_file(env: Mapping[str, str], root: Path = Path("/")) -> Path | None:
    """The topology file NCCL would read: NCCL_TOPO_FILE from the environment, else from /etc/nccl.conf."""
    named = env.get("NCCL_TOPO_FILE")
    if not named:
        try:
            conf = (root / "etc/nccl.conf").read_text()
        except OSError:
            return None
        match = re.search(r"^\s*NCCL_TOPO_FILE\s*=\s*(\S+)", conf, re.M)
        named = match.group(1) if match else None
    if not named:
        return None
    return root / named.lstrip("/") if str(root) != "/" else Path(named)


def read_topology(env: Mapping[str, str], root: Path = Path("/")) -> NcclTopology | None:
    """The topology NCCL would use here, None when none is set or the file cannot be read."""
    path = topology_file(env, root)
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError:
        return None
    return parse_topology(text, f"NCCL_TOPO_FILE={path}")


def classify(a: list[str], b: list[str], numa_a: int | None, numa_b: int | None) -> str:
    """The `nvidia-smi topo -m` link between two devices from the bridges above each (top first, the host bridge
    or "cpu<N>" first of all)."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == 0:  # different host bridges
        return "NODE" if numa_a is not None and numa_a == numa_b else "SYS"
    if common == 1:  # only the host bridge in common
        return "PHB"
    return "PIX" if len(a) - common <= 1 and len(b) - common <= 1 else "PXB"
