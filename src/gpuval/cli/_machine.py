"""Options the node-facing commands share: which machine (this one, or a recording) and which SKU."""

from __future__ import annotations

from typing import Optional

import typer

RECORDED_HELP = ("Judge a recorded machine instead of this one: a packaged SKU (Standard_ND96asr_v4, "
                 "Standard_ND96isr_H100_v5) or a YAML file.")
SKU_HELP = "Azure VM size, e.g. Standard_ND96asr_v4 [default: GPUVAL_SKU, else the instance metadata service]."


def recorded_option() -> Optional[str]:
    return typer.Option(None, "--recorded", metavar="SKU|FILE", help=RECORDED_HELP)


def sku_option() -> Optional[str]:
    return typer.Option(None, "--sku", help=SKU_HELP)


def open_machine(recorded: str | None):  # type: ignore[no-untyped-def]
    """This machine (NVML + sysfs), or a recording."""
    from gpuval.node.recorded import RecordedMachine
    from gpuval.node.sysfs import LinuxMachine

    return RecordedMachine.load(recorded) if recorded else LinuxMachine()
