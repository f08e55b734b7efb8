"""Per GPU: its NUMA node, local CPUs and nearest NICs (the `nvidia-smi topo -m` view plus CPU lists).

The link between a GPU and a NIC is classified from the PCI bridges above each (PIX, PXB, PHB, NODE, SYS: see
node.nccl_topo.classify): from sysfs where it shows the real tree (bare metal), from the NCCL topology file where
one is set and lists the GPU (Azure VMs, whose vPCI tree sysfs flattens to one domain per device).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.node.machine import Gpu, GpuInventory, IbPort, Machine
from gpuval.node.nccl_topo import LINK_ORDER, NcclTopology, classify


@dataclass
class GpuPlace:
    """Where one GPU sits: NUMA node, its CPUs, the RDMA NICs nearest to it and on its NUMA node."""

    gpu: int
    pci_bus_id: str
    numa_node: int | None
    cpus: list[int]
    nearest_nics: list[str] = field(default_factory=list)  # the NICs of the closest link class (PIX first)
    local_nics: list[str] = field(default_factory=list)  # same NUMA node
    links: dict[str, str] = field(default_factory=dict)  # NIC -> PIX / PXB / PHB / NODE / SYS
    source: str = "sysfs"  # where the links come from: sysfs, or the NCCL topology file


def _path_and_numa(bus_id: str | None, path: list[str], numa: int | None,
                   topo: NcclTopology | None) -> tuple[list[str], int | None, bool]:
    """The bridges above a device and its NUMA node: from the topology file when it lists the device."""
    placed = topo.device(bus_id) if topo else None
    if placed is not None:
        return placed.path, placed.numa_node if numa is None else numa, True
    return path, numa, False


def _links(g: Gpu, ports: list[IbPort], topo: NcclTopology | None) -> tuple[dict[str, str], str]:
    gpu_path, gpu_numa, from_file = _path_and_numa(g.pci_bus_id, g.pci_path, g.numa_node, topo)
    links: dict[str, str] = {}
    for p in ports:
        nic_path, nic_numa, _ = _path_and_numa(p.pci_bus_id, p.pci_path, p.numa_node, topo)
        if not gpu_path or not nic_path:  # nothing to compare: only the NUMA nodes can say
            kind = "NODE" if gpu_numa is not None and gpu_numa == nic_numa else "SYS"
        else:
            kind = classify(gpu_path, nic_path, gpu_numa, nic_numa)
        best = links.get(p.hca)
        if best is None or LINK_ORDER.index(kind) < LINK_ORDER.index(best):
            links[p.hca] = kind
    return links, (topo.source if from_file and topo else "sysfs")


def gpu_topology(machine: Machine, inventory: GpuInventory) -> list[GpuPlace]:
    """Each GPU with its NUMA node, CPUs and nearest InfiniBand NICs."""
    ports = [p for p in machine.ib_ports() if p.link_layer.lower() == "infiniband"]
    cpus_of = {n.id: n.cpus for n in machine.numa_nodes()}
    topo = machine.nccl_topology()
    places = []
    for g in inventory.gpus:
        links, source = _links(g, ports, topo)
        closest = min((LINK_ORDER.index(k) for k in links.values()), default=None)
        places.append(GpuPlace(
            gpu=g.index, pci_bus_id=g.pci_bus_id, numa_node=g.numa_node,
            cpus=g.cpus or (cpus_of.get(g.numa_node, []) if g.numa_node is not None else []),
            nearest_nics=sorted(h for h, k in links.items() if closest is not None and LINK_ORDER.index(k) == closest),
            local_nics=sorted({p.hca for p in ports if g.numa_node is not None and p.numa_node == g.numa_node}),
            links=links, source=source,
        ))
    return places
