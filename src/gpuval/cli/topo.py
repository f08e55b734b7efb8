"""`gpuval topo`: per GPU its NUMA node, CPU list and nearest NICs; NUMA nodes and NICs on any machine."""

from __future__ import annotations

from typing import Optional

import typer

from gpuval.cli._common import console, handle_errors, print_json, recorded_option


def topo(
    recorded: Optional[str] = recorded_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show where each GPU sits: NUMA node, local CPUs, nearest InfiniBand NICs (nvidia-smi topo -m, plus CPUs)."""
    from gpuval.node.cpus import format_cpulist
    from gpuval.node.machine import NoGpuDriver
    from gpuval.node.recorded import as_data
    from gpuval.node.topology import gpu_topology
    from gpuval.workloads.base import open_machine

    machine = open_machine(recorded)
    numa = machine.numa_nodes()
    ports = machine.ib_ports()
    try:
        places = gpu_topology(machine, machine.gpu_inventory())
        no_gpu = None
    except NoGpuDriver as exc:
        places, no_gpu = [], str(exc)
    if as_json:
        print_json({"machine": machine.description, "numa_nodes": [{"id": n.id, "cpus": format_cpulist(n.cpus)}
                                                                     for n in numa],
                    "gpus": [as_data(p) | {"cpus": format_cpulist(p.cpus)} for p in places], "gpu_note": no_gpu,
                    "nics": [as_data(p) for p in ports]})
        return
    console.print(f"[bold]{machine.description}[/]", soft_wrap=True)
    console.print(f"{'NUMA':>4}  CPUs")
    for n in numa:
        console.print(f"{n.id:>4}  {format_cpulist(n.cpus)}")
    if places:
        console.print(f"\n{'GPU':>3}  {'PCI bus id':18} {'NUMA':>4}  {'CPUs':14} nearest NICs")
        for p in places:
            console.print(f"{p.gpu:>3}  {p.pci_bus_id:18} {p.numa_node if p.numa_node is not None else '-':>4}  "
                          f"{format_cpulist(p.cpus) or '-':14} {', '.join(p.nearest_nics) or '-'}")
    else:
        console.print(f"\nGPUs: none ({no_gpu})")
    if ports:
        console.print(f"\n{'NIC':10} {'port':>4} {'state':7} {'rate':>9} {'link layer':11} {'NUMA':>4}  PCI")
        for p in ports:
            console.print(f"{p.hca:10} {p.port:>4} {p.state:7} {(f'{p.rate_gbps:g} Gb/s' if p.rate_gbps else '-'):>9} "
                          f"{p.link_layer:11} {p.numa_node if p.numa_node is not None else '-':>4}  {p.pci_bus_id or '-'}")
    else:
        console.print("\nNICs: no RDMA device (/sys/class/infiniband is empty)")


def register(app: typer.Typer) -> None:
    app.command("topo")(handle_errors(topo))
