"""`gpuval pin plan` (binding per local rank for a launcher) and `gpuval pin check PID...` (real affinity)."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuval.cli._common import command_group, console, handle_errors, print_json

app = command_group("CPU pinning: plan the binding per rank, check running processes.")


def _layout(sku: str | None):  # type: ignore[no-untyped-def]
    """NUMA nodes and the NUMA node of each GPU: from the SKU's recording, or this machine."""
    from gpuval.node.machine import NoGpuDriver
    from gpuval.workloads.base import open_machine

    machine = open_machine(sku)
    try:
        gpu_numa = [g.numa_node for g in machine.gpu_inventory().gpus]
    except NoGpuDriver:
        gpu_numa = []
    return machine, machine.numa_nodes(), gpu_numa


@app.command("plan")
@handle_errors
def plan(
    launcher: str = typer.Option(..., "--launcher", help="mpirun, srun, torchrun or numactl."),
    ranks: int = typer.Option(..., "--ranks-per-node", help="Local ranks (one per GPU on a GPU node)."),
    sku: Optional[str] = typer.Option(None, "--sku", help="Plan for this SKU's recorded topology instead of this machine."),
    gpu_order: Optional[str] = typer.Option(
        None, "--gpu-order", envvar="CUDA_VISIBLE_DEVICES",
        help="GPU of each local rank, e.g. 2,1,7,5,3,0,6,4 (the NDv4 preset) [default: CUDA_VISIBLE_DEVICES, else 0..N-1]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print the CPU binding of each local rank, in the launcher's syntax."""
    from gpuval.errors import UsageError
    from gpuval.node.cpus import format_cpulist
    from gpuval.node.pinning import plan_bindings, render, visible_gpu_order

    machine, numa, gpu_numa = _layout(sku)
    order = visible_gpu_order(gpu_order, len(gpu_numa)) if gpu_numa else None
    if gpu_numa and order is None:
        raise UsageError(f"--gpu-order {gpu_order!r}: give GPU indexes 0..{len(gpu_numa) - 1}, comma-separated")
    bindings = plan_bindings(numa, gpu_numa, ranks, order)
    text = render(bindings, launcher)
    if as_json:
        print_json({"machine": machine.description, "launcher": launcher, "command": text,
                    "ranks": [{"local_rank": b.local_rank, "gpu": b.gpu, "numa_node": b.numa_node,
                               "cpus": format_cpulist(b.cpus)} for b in bindings]})
        return
    console.print(f"# {machine.description}: {ranks} ranks", soft_wrap=True)
    for b in bindings:
        console.print(f"#   local rank {b.local_rank}: " + (f"GPU {b.gpu}, " if b.gpu is not None else "") +
                      f"NUMA {b.numa_node}, CPUs {format_cpulist(b.cpus)}")
    console.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command("check")
@handle_errors
def check(
    pids: List[int] = typer.Argument(..., help="Process ids of the application's ranks."),
    sku: Optional[str] = typer.Option(None, "--sku", help="Judge against this SKU's recorded GPU/NUMA layout."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Read each process's and thread's CPU affinity; warn on the wrong NUMA node for its GPU or shared cores."""
    from gpuval.node.cpus import format_cpulist
    from gpuval.node.pinning import check_processes, read_process

    _, numa, gpu_numa = _layout(sku)
    procs = [read_process(pid, len(gpu_numa)) for pid in pids]
    check_processes(procs, numa, gpu_numa)
    if as_json:
        print_json([{"pid": p.pid, "name": p.name, "gpu": p.gpu, "local_rank": p.local_rank,
                     "cpus": format_cpulist(p.cpus), "warnings": p.warnings,
                     "threads": [{"tid": t.tid, "name": t.name, "cpus": format_cpulist(t.cpus)} for t in p.threads]}
                    for p in procs])
        return
    for p in procs:
        console.print(f"[bold]pid {p.pid}[/] {p.name}: {len(p.threads)} threads, CPUs {format_cpulist(p.cpus)}"
                      + (f", GPU {p.gpu}" if p.gpu is not None else ""))
        for t in p.threads:
            console.print(f"    tid {t.tid:<8} {t.name:16} CPUs {format_cpulist(t.cpus)}")
        for w in p.warnings:
            console.print(f"  [yellow]warning:[/] {w}")
    if not any(p.warnings for p in procs):
        console.print("[green]no pinning problem found[/]")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="pin")
