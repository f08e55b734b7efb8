"""What NCCL needs of the node and of the environment a job runs in (often a container): GPUDirect RDMA
(nvidia_peermem or DMA-BUF), /dev/shm for its shared-memory transport, and an unlimited locked-memory limit for
registering buffers with the HCAs (NCCL's troubleshooting guide: `--shm-size=1g --ulimit memlock=-1`)."""

from __future__ import annotations

import re

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check
from gpuval.checks.fabric import infiniband_ports
from gpuval.node.machine import HardwareUnavailable, NoGpuDriver
from gpuval.node.nccl_topo import normalize_bus_id
from gpuval.results.model import Status

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")  # the driver's module (R470+), Mellanox's older one
DMABUF_KERNEL = (5, 12)  # the first kernel whose RDMA stack imports DMA-BUF (ibv_reg_dmabuf_mr)


def _driver(ctx: CheckContext) -> None:
    if ctx.machine.nvidia_driver() is None:
        raise NoGpuDriver(f"no NVIDIA driver on {ctx.machine.description}: NCCL does not run here")


def _dmabuf(ctx: CheckContext) -> tuple[bool, str]:
    """Whether NCCL can use DMA-BUF instead of nvidia_peermem here, and why (kernel 5.12+, every GPU supports it)."""
    release = ctx.machine.kernel_release()
    found = re.match(r"(\d+)\.(\d+)", release)
    if not found or (int(found.group(1)), int(found.group(2))) < DMABUF_KERNEL:
        return False, f"kernel {release} is older than 5.12 (no DMA-BUF for RDMA)"
    try:
        attrs = ctx.machine.cuda_attributes()
        gpus = ctx.inventory().gpus
    except HardwareUnavailable as exc:
        return False, f"whether the GPUs support DMA-BUF could not be read ({exc})"
    support = [attrs.get(normalize_bus_id(g.pci_bus_id), {}).get("dma_buf_supported") for g in gpus if g.pci_bus_id]
    if support and all(support):
        return True, f"kernel {release} and every GPU support DMA-BUF (CUDA): NCCL 2.19+ registers GPU memory with it"
    return False, f"CUDA says DMA-BUF is not supported on {support.count(0) or 'some'} GPU(s)"


@check("peermem", "GDR_MISSING")
def peermem(ctx: CheckContext, me: Check) -> CheckResult:
    """GPUDirect RDMA for NCCL over InfiniBand: the nvidia_peermem module loaded, or DMA-BUF (kernel 5.12+ and
    GPUs that support it). Without either NCCL stages through host memory (slower: a warn, as nccl_transport's)."""
    _driver(ctx)
    if not infiniband_ports(ctx):
        raise NotApplicable("no InfiniBand HCA on this machine: NCCL does no GPUDirect RDMA here")
    loaded = sorted(set(PEERMEM_MODULES) & ctx.machine.kernel_modules())
    if loaded:
        return me.result(Status.PASS, loaded[0], "nvidia_peermem", "", f"{loaded[0]} is loaded: GPUDirect RDMA")
    usable, why = _dmabuf(ctx)
    if usable:
        return me.result(Status.PASS, "dma-buf", "nvidia_peermem", "", f"nvidia_peermem is not loaded, {why}")
    return me.result(Status.WARN, "none", "nvidia_peermem", "",
                     f"no GPUDirect RDMA: nvidia_peermem is not loaded (modprobe nvidia_peermem) and {why}; NCCL "
                     "over InfiniBand copies through host memory")


@check("shm", "SHM_SMALL")
def shm(ctx: CheckContext, me: Check) -> CheckResult:
    """The size of /dev/shm, where NCCL keeps its shared-memory segments: too small and NCCL fails to initialize
    (Docker's default is 64 MB; NCCL's guide asks for --shm-size=1g)."""
    _driver(ctx)
    size = ctx.machine.resource_limits().shm_bytes
    if size is None:
        return me.result(Status.FAIL, 0, 1024, "MiB", "there is no /dev/shm: NCCL cannot create its shared-memory "
                                                      "segments (mount a tmpfs there, or docker run --shm-size=1g)")
    mib = size / 2**20
    judged = ctx.limits.judge("shm_mib", mib)
    if judged.status is Status.SKIPPED:
        return me.result(Status.PASS, mib, None, "MiB", f"/dev/shm is {mib:g} MiB (no limit in the baseline)")
    hint = " (docker run --shm-size=1g, or --ipc=host)" if judged.status is not Status.PASS else ""
    return me.result(judged.status, mib, judged.expected, "MiB", f"/dev/shm: {judged.reason}{hint}")


@check("memlock", "MEMLOCK_LOW")
def memlock(ctx: CheckContext, me: Check) -> CheckResult:
    """This process's locked-memory limit (ulimit -l), where the node has HCAs: NCCL registers its buffers with
    them, and NCCL's guide asks for an unlimited limit (--ulimit memlock=-1); a finite one warns."""
    _driver(ctx)
    if not ctx.machine.rdma_device_files() and not infiniband_ports(ctx):
        raise NotApplicable("no RDMA device on this machine: NCCL registers no memory with an HCA here")
    limit = ctx.machine.resource_limits().memlock_bytes
    band = ctx.limits.band("memlock_mib")
    if limit is None:
        return me.result(Status.PASS, "unlimited", "unlimited", "", "locked memory is unlimited")
    mib = limit / 2**20
    judged = ctx.limits.judge("memlock_mib", mib)
    if judged.status is Status.PASS or judged.status is Status.SKIPPED:
        return me.result(Status.PASS, mib, band.expected if band else None, "MiB",
                         f"locked memory limited to {mib:g} MiB, within the baseline")
    return me.result(judged.status, mib, "unlimited", "MiB",
                     f"locked memory is limited to {mib:g} MiB (ulimit -l); NCCL's guide asks for unlimited "
                     f"(--ulimit memlock=-1, or LimitMEMLOCK=infinity for a service): "
                     f"{band.warn_source or band.fail_source if band else ''}")
