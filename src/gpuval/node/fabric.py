"""A GPU's NVLink fabric registration as the driver reports it (NVML nvmlDeviceGetGpuFabricInfo*, `nvidia-smi -q`'s
"Fabric" block): state, status, clique, cluster UUID and the health the driver decodes into its health mask.

On an HGX node the host's fabric manager trains the NVSwitches; on a GB200/GB300 NVL72 rack the switch trays' NMX
controller does, and each GPU registers into a multi-node NVLink domain named by `ClusterUUID.CliqueId`
(NVIDIA/nccl#1301: the clique alone is not unique). The health mask's layout is nvml.h's
NVML_GPU_FABRIC_HEALTH_MASK_* (R550+, read here from nvidia-ml-py 13.615.71's copy of it): two bits per condition,
1 true, 2 false, 0 not supported, and four bits for the incorrect-configuration code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# nvml.h: (field, shift, width mask) of each two-state condition; value 1 is "true", 2 "false", 0 not supported.
# GFM (the global fabric manager) reports 1 connected, 2 disconnected: stored as `gfm_connected`.
_CONDITIONS = (("degraded_bandwidth", 0), ("route_recovery", 2), ("route_unhealthy", 4),
               ("access_timeout_recovery", 6), ("partition_assigned", 12), ("gfm_connected", 14))
_INCORRECT_SHIFT, _INCORRECT_MASK = 8, 0xF
# NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (0: not supported)
INCORRECT_CONFIGURATION = {1: "none", 2: "incorrect SysGUID", 3: "incorrect chassis serial number",
                           4: "no partition", 5: "insufficient NVLinks", 6: "incompatible GPU firmware",
                           7: "invalid location", 8: "GPU state invalid"}
# NVML_GPU_FABRIC_HEALTH_SUMMARY_* (0: not supported)
SUMMARIES = {1: "healthy", 2: "unhealthy", 3: "limited capacity"}


@dataclass
class FabricHealth:
    """What the driver says of a GPU's fabric health; None wherever it does not report it (older drivers, HGX)."""

    summary: str | None = None  # healthy | unhealthy | limited capacity
    degraded_bandwidth: bool | None = None
    route_recovery: bool | None = None  # route recovery in progress
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: str | None = None  # "none", or what is wrong (INCORRECT_CONFIGURATION)
    partition_assigned: bool | None = None
    gfm_connected: bool | None = None

    def reported(self) -> bool:
        """Whether the driver reported any of it."""
        return any(getattr(self, f.name) is not None for f in fields(self))


@dataclass
class FabricInfo:
    """A GPU's view of the NVLink fabric (Hopper and later; nvidia-smi -q "Fabric"): CUDA refuses to start until
    its registration is `completed` with status `success`."""

    state: str  # not_supported | not_started | in_progress | completed
    status: str | None = None  # "success", or what NVML says went wrong
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health: FabricHealth | None = None

    @property
    def degraded_bandwidth(self) -> bool | None:
        """NVML's health mask: the fabric runs at reduced bandwidth (None: not reported)."""
        return self.health.degraded_bandwidth if self.health else None


def decode_health(mask: int | None, summary: int | None = None) -> FabricHealth | None:
    """The health mask (and summary, v3+) NVML gives, decoded; None where neither is reported."""
    if mask is None and summary is None:
        return None
    health = FabricHealth(summary=SUMMARIES.get(int(summary or 0)))
    if mask is not None:
        for name, shift in _CONDITIONS:
            value = (int(mask) >> shift) & 0x3
            setattr(health, name, {1: True, 2: False}.get(value))
        code = (int(mask) >> _INCORRECT_SHIFT) & _INCORRECT_MASK
        health.incorrect_configuration = INCORRECT_CONFIGURATION.get(code, f"code {code}" if code else None)
    return health


def uuid_of(raw: bytes) -> str:
    """NVML's 16 cluster-UUID bytes as nvidia-smi prints them."""
    text = bytes(raw).hex()
    return "-".join(text[i:j] for i, j in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)))


# `nvidia-smi -q` (R580) prints the health under Fabric / Health; each label -> field, with the words it uses
_SMI_HEALTH = {"Summary": "summary", "Bandwidth": "degraded_bandwidth", "Route Recovery in progress": "route_recovery",
               "Route Unhealthy": "route_unhealthy", "Access Timeout Recovery": "access_timeout_recovery",
               "Incorrect Configuration": "incorrect_configuration", "Partition Assigned": "partition_assigned"}
_SMI_WORDS = {"full": False, "degraded": True, "true": True, "false": False, "yes": True, "no": False}


def health_from_smi(values: dict[str, str]) -> dict[str, Any]:
    """The Health lines of an `nvidia-smi -q` Fabric block (label -> value) as a recorded `health` mapping: N/A and
    Not Supported are left out (not reported, never false); a word it does not know is kept as written, for the
    check to say it could not read it."""
    health: dict[str, Any] = {}
    for label, value in values.items():
        name = _SMI_HEALTH.get(label)
        word = value.strip()
        if name is None or word.lower() in ("n/a", "not supported", ""):
            continue
        if name in ("summary", "incorrect_configuration"):
            health[name] = word.lower()
        else:
            health[name] = _SMI_WORDS.get(word.lower(), word)
    return health
