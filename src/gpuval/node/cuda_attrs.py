"""CUDA device attributes NCCL decides by, read from the CUDA driver (libcuda.so.1) through ctypes, no toolkit and
no torch: whether a GPU supports NVLink SHARP multicast (NVLS), DMA-BUF and GPUDirect RDMA. Each GPU is named by
its PCI bus id, so the answer maps onto NVML's GPUs whatever CUDA_VISIBLE_DEVICES or the CUDA device order says.

CUdevice_attribute values are cuda.h's (CUDA 12.1+): GPU_DIRECT_RDMA_SUPPORTED 116, DMA_BUF_SUPPORTED 124,
MULTICAST_SUPPORTED 132. An attribute the driver is too old to know reads as absent, not as 0.
"""

from __future__ import annotations

import ctypes
from typing import Mapping

from gpuval.node.machine import CudaStart, HardwareUnavailable, NoGpuDriver
from gpuval.node.nccl_topo import normalize_bus_id

ATTRIBUTES = {"gpu_direct_rdma_supported": 116, "dma_buf_supported": 124, "multicast_supported": 132}
CUDA_ERROR_SYSTEM_NOT_READY = 802  # the fabric manager has not finished (HGX): CUDA refuses every call
# cuda.h: the CUDA driver library loaded (libcuda.so.1) does not go with the kernel driver: 803 a user-mode driver
# of another version (an image's cuda-compat package, a driver library copied into the image), 804 forward
# compatibility asked of a GPU that does not support it. The process's environment, not the GPU.
DRIVER_MISMATCH = {803: "the CUDA driver library this process loaded does not match the kernel driver {driver}",
                   804: "the CUDA forward-compatibility library this process loaded is not supported on these GPUs "
                        "(driver {driver})"}
FABRIC_HINT = (f"CUDA error {CUDA_ERROR_SYSTEM_NOT_READY}, system not yet initialized: on an NVSwitch system (HGX "
               "A100/H100/H200) the fabric manager is not running or the NVSwitch fabric is not trained (systemctl "
               "status nvidia-fabricmanager; nvidia-smi -q: Fabric)")


def _driver() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise NoGpuDriver("no NVIDIA driver: libcuda.so.1 cannot be loaded") from None


def _error(cuda: ctypes.CDLL, code: int) -> str:
    text = ctypes.c_char_p()
    if cuda.cuGetErrorString(code, ctypes.byref(text)) == 0 and text.value:
        return f"{text.value.decode()} (CUDA error {code})"
    return f"CUDA error {code}"


def read_attributes() -> dict[str, dict[str, int]]:
    """Per GPU PCI bus id (normalized, "0000:0b:00.0"): the attributes of ATTRIBUTES this driver knows.
    HardwareUnavailable when CUDA cannot start (e.g. 802: the NVSwitch fabric is not ready)."""
    cuda = _driver()
    code = cuda.cuInit(0)
    if code != 0:
        raise HardwareUnavailable(f"CUDA cannot start: {_error(cuda, code)}")
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        raise HardwareUnavailable("CUDA cannot count its devices")
    found: dict[str, dict[str, int]] = {}
    for ordinal in range(count.value):
        device = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        bus = ctypes.create_string_buffer(32)
        if cuda.cuDeviceGetPCIBusId(bus, len(bus), device) != 0:
            continue
        values: dict[str, int] = {}
        for name, attribute in ATTRIBUTES.items():
            value = ctypes.c_int()
            if cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) == 0:
                values[name] = value.value
        found[normalize_bus_id(bus.value.decode())] = values
    return found


# The variables that choose which GPUs CUDA may see: CUDA's own, and the NVIDIA container runtime's
VISIBILITY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def is_system_not_ready(text: str) -> bool:
    """CUDA's words for error 802 (the NVSwitch fabric is not ready: the fabric manager is not running)."""
    return str(CUDA_ERROR_SYSTEM_NOT_READY) in text or "system not yet initialized" in text


def start_cuda(env: Mapping[str, str]) -> CudaStart:
    """cuInit and the device count: what CUDA says here (NoGpuDriver without libcuda), with the visibility
    variables as `env` sets them."""
    cuda = _driver()
    chosen = {k: env[k] for k in VISIBILITY_VARIABLES if k in env}
    code = cuda.cuInit(0)
    if code != 0:
        return CudaStart(error_code=code, error=_error(cuda, code), env=chosen)
    count = ctypes.c_int()
    code = cuda.cuDeviceGetCount(ctypes.byref(count))
    if code != 0:
        return CudaStart(error_code=code, error=_error(cuda, code), env=chosen)
    return CudaStart(devices=count.value, env=chosen)
