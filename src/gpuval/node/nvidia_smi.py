"""`nvidia-smi -q` text, read into the fields gpuval judges (the layout of a recorded machine's GPU entry), so a
capture someone saved can be judged as a recording: power limits, ECC counts with SRAM and DRAM apart, remapped
rows, PCIe replays, the NVLink fabric (state, clique, cluster UUID, health), the GPU recovery action.

Names differ by driver: "Enforced Power Limit" (older) and "Current Power Limit" (R535+) under "Power Readings" or
"GPU Power Readings"; "SRAM Uncorrectable" (R510) or "SRAM Uncorrectable Parity" + "SRAM Uncorrectable SEC-DED"
(R535+). A value of N/A is left out (the field is unknown, not zero).
"""

from __future__ import annotations

import re
from typing import Any

from gpuval.node.fabric import health_from_smi

_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_PAIR = re.compile(r"^(\S.*?)\s+:\s?(.*)$")
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)")
_FABRIC_STATES = {"completed": "completed", "in progress": "in_progress", "not started": "not_started",
                  "not supported": "not_supported"}
_RECOVERY = {"none": 0, "gpu reset": 1, "node reboot": 2, "drain p2p": 3, "drain and reset": 4}


def _sections(text: str) -> list[dict[str, str]]:
    """Per GPU: "Section / Sub / Key" -> value, the path built from the 4-space indentation."""
    gpus: list[dict[str, str]] = []
    path: list[str] = []
    for raw in text.splitlines():
        if m := _GPU.match(raw.strip()) if not raw.startswith(" ") else None:
            gpus.append({"pci_bus_id": m.group(1)})
            path = []
            continue
        if not gpus or not raw.strip():
            continue
        level = max((len(raw) - len(raw.lstrip(" "))) // 4 - 1, 0)
        line = raw.strip()
        pair = _PAIR.match(line)
        key = (pair.group(1) if pair else line).strip()
        path = path[:level] + [key]
        if pair:
            gpus[-1][" / ".join(path)] = pair.group(2).strip()
    return gpus


def _num(fields: dict[str, str], *keys: str) -> float | None:
    for key in keys:
        value = fields.get(key)
        if value is not None and (m := _NUMBER.match(value)):
            return float(m.group(1))
    return None


def _int(fields: dict[str, str], *keys: str) -> int | None:
    value = _num(fields, *keys)
    return int(value) if value is not None else None


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc(f: dict[str, str]) -> dict[str, Any]:
    ecc: dict[str, Any] = {}
    for kind, label in (("volatile", "Volatile"), ("aggregate", "Aggregate")):
        base = f"ECC Errors / {label} / "
        sram_unc = _sum(_int(f, base + "SRAM Uncorrectable"), _int(f, base + "SRAM Uncorrectable Parity"),
                        _int(f, base + "SRAM Uncorrectable SEC-DED"))
        split = {f"sram_{kind}_corrected": _int(f, base + "SRAM Correctable"), f"sram_{kind}_uncorrected": sram_unc,
                 f"dram_{kind}_corrected": _int(f, base + "DRAM Correctable"),
                 f"dram_{kind}_uncorrected": _int(f, base + "DRAM Uncorrectable")}
        ecc.update(split)
        ecc[f"{kind}_corrected"] = _sum(split[f"sram_{kind}_corrected"], split[f"dram_{kind}_corrected"])
        ecc[f"{kind}_uncorrected"] = _sum(sram_unc, split[f"dram_{kind}_uncorrected"])
    # R535+ prints it inside the Aggregate block
    exceeded = next((v for k, v in f.items() if k.startswith("ECC Errors /") and k.endswith("SRAM Threshold Exceeded")),
                    None)
    if exceeded in ("Yes", "No"):
        ecc["sram_threshold_exceeded"] = exceeded == "Yes"
    return {k: v for k, v in ecc.items() if v is not None}


def _power(f: dict[str, str]) -> dict[str, float]:
    power = {}
    for section in ("GPU Power Readings", "Power Readings"):
        for field, names in (("enforced_w", ("Current Power Limit", "Enforced Power Limit")),
                             ("default_w", ("Default Power Limit",)), ("min_w", ("Min Power Limit",)),
                             ("max_w", ("Max Power Limit",))):
            value = _num(f, *(f"{section} / {n}" for n in names))
            if value is not None:
                power.setdefault(field, value)
    return power


def _fabric(f: dict[str, str]) -> dict[str, Any] | None:
    """The Fabric block: state, status, CliqueId, ClusterUUID and Health (node.fabric). N/A is left out; a clique
    that is not a whole number is kept as written, for the fabric check to say it could not read it."""
    state = _FABRIC_STATES.get(f.get("Fabric / State", "").lower())
    if state is None:
        return None
    status = f.get("Fabric / Status", "")
    fabric: dict[str, Any] = {"state": state, "status": status.lower() if status and status != "N/A" else None}
    clique = f.get("Fabric / CliqueId", "N/A")
    if clique != "N/A":
        fabric["clique_id"] = int(clique) if clique.isdigit() else clique
    if f.get("Fabric / ClusterUUID", "N/A") != "N/A":
        fabric["cluster_uuid"] = f["Fabric / ClusterUUID"]
    health = health_from_smi({k.split(" / ")[-1]: v for k, v in f.items() if k.startswith("Fabric / Health / ")})
    if health:
        fabric["health"] = health
    return fabric


def _row_remap(f: dict[str, str]) -> dict[str, Any] | None:
    if _int(f, "Remapped Rows / Correctable Error") is None:
        return None
    return {"corrected_rows": _int(f, "Remapped Rows / Correctable Error") or 0,
            "uncorrected_rows": _int(f, "Remapped Rows / Uncorrectable Error") or 0,
            "pending": f.get("Remapped Rows / Pending") == "Yes",
            "failure": f.get("Remapped Rows / Remapping Failure Occurred") == "Yes"}


def read_query(text: str) -> list[dict[str, Any]]:
    """Each GPU of an `nvidia-smi -q` output as a recorded GPU entry (only the fields the output states): how the
    tests turn a real `nvidia-smi -q` into a recorded machine; no command calls it."""
    gpus = []
    for f in _sections(text):
        gpu: dict[str, Any] = {"pci_bus_id": f["pci_bus_id"]}
        if "Product Name" in f:
            gpu["name"] = f["Product Name"]
        gpu["ecc"] = _ecc(f)
        gpu["power"] = _power(f)
        if (replays := _int(f, "PCI / Replays Since Reset")) is not None:
            gpu["pcie"] = {"replays": replays}
        if (fabric := _fabric(f)) is not None:
            gpu["fabric"] = fabric
        if (remap := _row_remap(f)) is not None:
            gpu["row_remap"] = remap
        action = f.get("GPU Recovery Action", "").lower()
        if action in _RECOVERY:
            gpu["recovery_action"] = _RECOVERY[action]
        gpus.append({k: v for k, v in gpu.items() if v not in ({}, None)})
    return gpus
