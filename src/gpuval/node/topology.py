"""Per GPU: its NUMA node, local CPUs and nearest NICs (the `nvidia-smi topo -m` view plus CPU lists)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.node.machine import GpuInventory, IbPort, Machine


@dataclass
class GpuPlace:
    """Where one GPU sits: NUMA node, its CPUs, the RDMA NICs on the same PCI bridge or NUMA node."""

    gpu: int
    pci_bus_id: str
    numa_node: int | None
    cpus: list[int]
    nearest_nics: list[str] = field(default_factory=list)  # same PCI bridge (PIX/PXB in topo -m terms) first
    local_nics: list[str] = field(default_factory=list)  # same NUMA node


def _nic_names(ports: list[IbPort]) -> list[str]:
    return sorted({p.hca for p in ports})


def gpu_topology(machine: Machine, inventory: GpuInventory) -> list[GpuPlace]:
    """Each GPU with its NUMA node, CPUs and nearest InfiniBand NICs."""
    ports = [p for p in machine.ib_ports() if p.link_layer.lower() == "infiniband"]
    cpus_of = {n.id: n.cpus for n in machine.numa_nodes()}
    places = []
    for g in inventory.gpus:
        same_numa = [p for p in ports if g.numa_node is not None and p.numa_node == g.numa_node]
        same_bridge = [p for p in same_numa if g.pci_path and p.pci_path and p.pci_path[-1] == g.pci_path[-1]]
        places.append(GpuPlace(
            gpu=g.index, pci_bus_id=g.pci_bus_id, numa_node=g.numa_node,
            cpus=g.cpus or (cpus_of.get(g.numa_node, []) if g.numa_node is not None else []),
            nearest_nics=_nic_names(same_bridge) or _nic_names(same_numa), local_nics=_nic_names(same_numa),
        ))
    return places

