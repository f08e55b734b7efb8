"""Real sysfs trees laid out under a test root from their published listings (tests/data/sysfs/SOURCE.md): GPUd's
/sys/class/infiniband of an H100 node, and the AER files of prometheus/procfs's fixture (their ttar archive)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import DATA

SYSFS = DATA / "sysfs"


def infiniband_tree(root: Path) -> Path:
    """/sys/class/infiniband of GPUd's H100 node under `root`, one file per `path = content` line."""
    base = root / "sys/class/infiniband"
    for line in (SYSFS / "infiniband-h100-gpud.txt").read_text().splitlines():
        if line.startswith("#") or " = " not in line:
            continue
        rel, value = line.split(" = ", 1)
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(value + "\n")
    return root


def aer_files(device: Path) -> Path:
    """The aer_dev_* files of procfs's fixture, written into `device` (a PCI device's sysfs directory)."""
    text = (SYSFS / "aer-short-names-procfs.ttar").read_text()
    for name, body in re.findall(r"^Path: \S+/(aer_dev_\w+)\nLines: \d+\n(.*?)(?=^Mode:|\Z)", text, re.M | re.S):
        device.mkdir(parents=True, exist_ok=True)
        (device / name).write_text(body)
    return device


def abi_correctable_sample() -> str:
    """The long-name sample of aer_dev_correctable in the kernel's ABI document (Receiver Error 2 ... TOTAL 2)."""
    doc = (SYSFS / "aer-stats-abi-linux.txt").read_text()
    block = doc.split("# cat aer_dev_correctable", 1)[1].split("What:", 1)[0]
    return "\n".join(line.strip() for line in block.strip().splitlines()) + "\n"
