"""`gpuval tune`: application clocks and persistence mode through NVML (root only for changes)."""

from __future__ import annotations

import os
from typing import List, Optional

import typer

from gpuval.cli._common import command_group, console, handle_errors, print_json
from gpuval.errors import GpuvalError

app = command_group("GPU settings through NVML: application clocks and persistence mode.")


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise GpuvalError(f"{what} needs root: run it as root (sudo gpuval tune ...); `gpuval tune clocks --list` "
                          "works as any user")


def _print(states, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from gpuval.node.recorded import as_data

    if as_json:
        print_json(as_data(states))
        return
    console.print(f"{'GPU':>3}  {'name':24} {'application SM/mem MHz':>24} {'max SM/mem MHz':>16}  persistence")
    for s in states:
        console.print(f"{s.index:>3}  {s.name:24} {f'{s.sm_application}/{s.mem_application}':>24} "
                      f"{f'{s.sm_max}/{s.mem_max}':>16}  {'on' if s.persistence_mode else 'off'}")


@app.command("clocks")
@handle_errors
def clocks(
    maximum: bool = typer.Option(False, "--max", help="Set application clocks to the highest the GPU supports."),
    reset: bool = typer.Option(False, "--reset", help="Put application clocks back to the driver's defaults."),
    list_: bool = typer.Option(False, "--list", help="Show application and maximum clocks."),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="Only this GPU index (repeatable) [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Application clocks per GPU: --max, --reset or --list (as max_gpu_app_clocks.sh does)."""
    from gpuval.node import nvml

    if sum((maximum, reset, list_)) != 1:
        raise GpuvalError("give exactly one of --max, --reset, --list")
    if list_:
        states = nvml.list_clocks(gpu)
    else:
        _need_root("changing application clocks")
        states = nvml.set_max_clocks(gpu) if maximum else nvml.reset_clocks(gpu)
    _print(states, as_json)


@app.command("persistence")
@handle_errors
def persistence(
    mode: str = typer.Argument(..., help="on or off"),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="Only this GPU index (repeatable) [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Persistence mode on or off (keeps the driver loaded between jobs, so settings stick)."""
    from gpuval.node import nvml

    if mode not in ("on", "off"):
        raise GpuvalError(f"persistence mode is 'on' or 'off', not {mode!r}")
    _need_root(f"turning persistence mode {mode}")
    _print(nvml.set_persistence(mode == "on", gpu), as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tune")
