"""The health checks' fault codes are append-only, as DCGM's DCGM_FR_* codes are: a drain reason gpuval wrote names
one (`gpuval: XID_ERROR <run id>`), and the next gpuval reads it back (operate.node_state), so a released code is
never renamed or dropped, and a new one is added here, at the end, on purpose."""

from __future__ import annotations

from gpuval.checks.base import REGISTRY

RELEASED = [
    "GPU_MISSING", "DRIVER_OLD", "XID_ERROR", "ECC_ERRORS", "ROW_REMAP", "CLOCK_THROTTLE", "APP_CLOCKS_LOW",
    "PERSISTENCE_OFF", "PCIE_DEGRADED", "NVLINK_DOWN", "GPU_HOT", "FIRMWARE", "GPU_MODE", "CUDA_INIT", "H2D_D2H_SLOW",
    "GEMM_SLOW", "P2P_SLOW", "HBM_SLOW", "GEMM_SUSTAINED_SLOW", "CLOCKS_UNDER_LOAD", "NCCL_NODE_SLOW", "NCCL_IB_SLOW",
    "NCCL_NOT_IB", "IB_PORT_DOWN", "TOPOLOGY_MISMATCH", "FABRIC_NOT_READY", "POWER_CAPPED", "PCIE_ERRORS",
    "NVLINK_ERRORS", "IB_ERRORS", "GDR_MISSING", "SHM_SMALL", "MEMLOCK_LOW", "IB_WRITE_BW_LOW", "DCGM_DIAG",
    "XID_DURING_RUN",
    # appended
    "IMEX_NOT_READY",  # the imex check (docs/nvl72.md)
]


def test_every_released_code_is_kept_and_every_code_is_released():
    codes = {c.fault_code for c in REGISTRY.values()}
    assert len(RELEASED) == len(set(RELEASED))
    assert sorted(set(RELEASED) - codes) == []  # none renamed or dropped
    assert sorted(codes - set(RELEASED)) == []  # a new code is appended to RELEASED
