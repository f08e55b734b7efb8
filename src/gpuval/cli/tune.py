"""`gpuval tune`: application clocks, locked clocks and persistence mode through NVML (root only for changes)."""

from __future__ import annotations

import os
from typing import List, Optional

import typer

from gpuval.cli._common import command_group, console, handle_errors, print_json
from gpuval.errors import GpuvalError

app = command_group("GPU settings through NVML: application clocks, locked clocks and persistence mode.")


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise GpuvalError(f"{what} needs root: run it as root (sudo gpuval tune ...); `gpuval tune clocks --list` "
                          "works as any user")


def _print(states, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from gpuval.node.recorded import as_data

    if as_json:
        print_json(as_data(states))
        return
    console.print(f"{'GPU':>3}  {'name':24} {'application SM/mem MHz':>24} {'default SM/mem':>15} "
                  f"{'max SM/mem MHz':>16}  persistence")
    for s in states:
        console.print(f"{s.index:>3}  {s.name:24} {f'{s.sm_application}/{s.mem_application}':>24} "
                      f"{f'{s.sm_default}/{s.mem_default}':>15} {f'{s.sm_max}/{s.mem_max}':>16}  "
                      f"{'on' if s.persistence_mode else 'off'}")
        for note in s.notes:
            console.print(f"     note: {note}", soft_wrap=True)


@app.command("clocks")
@handle_errors
def clocks(
    maximum: bool = typer.Option(False, "--max", help="Set application clocks to the highest the GPU supports "
                                 "(turns auto-boost off)."),
    lock: bool = typer.Option(False, "--lock", help="Lock the SM clock (and memory clock where supported) at its "
                              "maximum, as nvidia-smi -lgc / AzNHC do before bandwidth checks."),
    unlock: bool = typer.Option(False, "--unlock", help="Release locked SM and memory clocks."),
    reset: bool = typer.Option(False, "--reset", help="Application clocks back to the driver's defaults and locked "
                               "clocks released."),
    list_: bool = typer.Option(False, "--list", help="Show application, default and maximum clocks."),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="Only this GPU index (repeatable) [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Clocks per GPU: --list, --max, --lock, --unlock or --reset. Default application clocks do not cap the clock
    on Pascal and later GPUs; locked clocks do."""
    from gpuval.node import tuning

    chosen = {"--max": maximum, "--lock": lock, "--unlock": unlock, "--reset": reset, "--list": list_}
    if sum(chosen.values()) != 1:
        raise GpuvalError(f"give exactly one of {', '.join(chosen)}")
    if list_:
        states = tuning.list_clocks(gpu)
    else:
        _need_root("changing clocks")
        change = {"--max": tuning.set_max_clocks, "--lock": tuning.lock_clocks, "--unlock": tuning.unlock_clocks,
                  "--reset": tuning.reset_clocks}[next(k for k, v in chosen.items() if v)]
        states = change(gpu)
    _print(states, as_json)


@app.command("persistence")
@handle_errors
def persistence(
    mode: str = typer.Argument(..., help="on or off"),
    gpu: Optional[List[int]] = typer.Option(None, "--gpu", help="Only this GPU index (repeatable) [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Persistence mode on or off (keeps the driver loaded between jobs, so settings stick)."""
    from gpuval.node import tuning

    if mode not in ("on", "off"):
        raise GpuvalError(f"persistence mode is 'on' or 'off', not {mode!r}")
    _need_root(f"turning persistence mode {mode}")
    _print(tuning.set_persistence(mode == "on", gpu), as_json)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tune")
