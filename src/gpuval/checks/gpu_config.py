"""Checks of what nvidia-smi -q shows and the inventory basics do not: whether CUDA starts on the GPUs NVML sees,
the modes a GPU runs in (compute mode, virtualization, confidential compute), its firmware (inforom, VBIOS) and its
temperatures against the limits the driver reports. Nothing here runs a workload.
"""

from __future__ import annotations

from gpuval.checks.base import Check, CheckContext, CheckResult, check, worst
from gpuval.node.cuda_attrs import CUDA_ERROR_SYSTEM_NOT_READY, DRIVER_MISMATCH, FABRIC_HINT, is_system_not_ready
from gpuval.node.machine import CudaStart, Gpu, GpuInventory
from gpuval.results.model import Status

HIDING = ("", "none", "void", "-1", "no")  # values that give a process no GPU at all
# compute modes under which gpuval cannot measure: its checks use a GPU from several processes (the suite's own,
# a copy worker per GPU, an NCCL rank per GPU); PROHIBITED lets no process use it at all
BLOCKING_MODES = {"exclusive_process": "Exclusive Process (one process per GPU: gpuval measures from several)",
                  "exclusive_thread": "Exclusive Thread (one thread per GPU)",
                  "prohibited": "Prohibited (no process may use the GPU)"}


def _names_a_gpu(token: str, inv: GpuInventory) -> bool:
    """A CUDA_VISIBLE_DEVICES entry that names one of these GPUs: an index NVML has, a (prefix of a) GPU UUID,
    a MIG instance NVML lists (MIG-<uuid>, or the older MIG-GPU-<uuid>/<gi>/<ci> of a GPU in MIG mode)."""
    token = token.strip()
    if token.isdigit():
        return int(token) < len(inv.gpus) + len(inv.not_ours) + len(inv.lost)
    if token.startswith("MIG-GPU-"):
        gpu = token.removeprefix("MIG-").split("/")[0].lower()
        return any(g.mig_current and g.uuid.lower() == gpu for g in inv.gpus)
    if token.startswith("MIG-"):
        return any(u.lower().startswith(token.lower()) for g in inv.gpus for u in g.mig_uuids)
    key = token.lower().removeprefix("gpu-")
    return bool(key) and any(g.uuid.lower().removeprefix("gpu-").startswith(key) for g in inv.gpus)


def hidden_by(env: dict[str, str], inv: GpuInventory) -> str | None:
    """The variable (with its value) that leaves CUDA no GPU of those NVML sees, or None. CUDA reads
    CUDA_VISIBLE_DEVICES up to its first entry that names no device."""
    nvidia = env.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None and nvidia.strip().lower() in HIDING:
        return f"NVIDIA_VISIBLE_DEVICES={nvidia!r}"
    cuda = env.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        first = cuda.split(",")[0]
        if first.strip().lower() in HIDING or not _names_a_gpu(first, inv):
            return f"CUDA_VISIBLE_DEVICES={cuda!r}"
    return None


def cuda_failure(start: CudaStart) -> str:
    """CUDA's error in its own words, with what 802 means."""
    text = start.error or ("CUDA counts no device" if start.error_code is None else f"CUDA error {start.error_code}")
    ready = start.error_code != CUDA_ERROR_SYSTEM_NOT_READY and not is_system_not_ready(text)
    return text + ("" if ready else f" ({FABRIC_HINT})")


def _started(me: Check, start: CudaStart, inv: GpuInventory, count: int) -> CheckResult:
    """CUDA started: PASS, unless it counts fewer devices than NVML's GPUs with nothing limiting what it may see
    (CUDA_VISIBLE_DEVICES) and MIG off (CUDA counts MIG instances, not GPUs): a GPU the driver lists that CUDA
    cannot use fails."""
    shown = f" ({', '.join(f'{k}={v}' for k, v in start.env.items())})" if start.env else ""
    mig = [g.index for g in inv.gpus if g.mig_current]
    devices = start.devices or 0
    if devices < count and "CUDA_VISIBLE_DEVICES" not in start.env and not mig:
        return me.result(Status.FAIL, devices, count, "devices",
                         f"CUDA counts {devices} device(s) of the {count} GPU(s) NVML sees, with nothing limiting what "
                         f"CUDA may see and MIG off: a GPU the driver lists cannot be used by CUDA (nvidia-smi shows "
                         f"{count}, torch {devices}){shown}")
    note = f"; MIG is on (GPU {', '.join(map(str, mig))}): CUDA counts MIG instances, not GPUs" if mig else ""
    return me.result(Status.PASS, devices, count, "devices",
                     f"CUDA starts: {devices} device(s), NVML sees {count} GPU(s){shown}{note}")


@check("cuda_init", "CUDA_INIT")
def cuda_init(ctx: CheckContext, me: Check) -> CheckResult:
    """CUDA starts on the GPUs NVML sees: failing with nothing hiding them (802: fabric manager down, 999), or
    counting fewer with nothing limiting it and MIG off, fails; hidden by CUDA_VISIBLE_DEVICES or
    NVIDIA_VISIBLE_DEVICES (a stale GPU or MIG UUID too), or a CUDA driver library that does not match the kernel
    driver (803, 804), is an error naming the cause."""
    count = ctx.gpus_present()
    start = ctx.machine.cuda_start()
    inv = ctx.inventory()
    hidden = hidden_by(start.env, inv)
    if start.error_code is None and start.devices:
        return _started(me, start, inv, count)
    if hidden:
        return me.result(Status.ERROR, 0, count, "devices", f"could not run: {hidden} hides the {count} GPU(s) NVML "
                         f"sees from CUDA ({cuda_failure(start)}): nothing on this GPU can be measured; unset it or "
                         "name the GPUs", variable=hidden.split("=")[0], cause="variable", error_code=start.error_code)
    if start.error_code in DRIVER_MISMATCH:
        return me.result(Status.ERROR, 0, count, "devices", f"could not run: {cuda_failure(start)}: "
                         f"{DRIVER_MISMATCH[start.error_code].format(driver=inv.driver_version)}: the image or environment (a "
                         "cuda-compat package on LD_LIBRARY_PATH, a driver library copied into the image), not this "
                         "node's GPUs", cause="driver_mismatch", error_code=start.error_code)
    return me.result(Status.FAIL, 0, count, "devices", f"NVML sees {count} GPU(s) but CUDA cannot start: "
                     f"{cuda_failure(start)}", error_code=start.error_code, error=start.error)


def _mode_of(inv: GpuInventory) -> str:
    """How the GPUs run, in words: virtualization and confidential compute (what a figure is read against)."""
    kinds = sorted({g.virtualization for g in inv.gpus if g.virtualization})
    words = {"none": "bare metal", "pass_through": "PCI pass-through (a VM)", "vgpu": "a vGPU (a share of a GPU)",
             "host_vgpu": "a vGPU host", "host_vsga": "a vSGA host"}
    parts = [f"virtualization: {', '.join(words.get(k, k) for k in kinds)}"] if kinds else []
    if inv.confidential_compute is not None:
        parts.append(f"confidential compute {'on' if inv.confidential_compute else 'off'}")
    return "; ".join(parts)


@check("gpu_mode", "GPU_MODE")
def gpu_mode(ctx: CheckContext, me: Check) -> CheckResult:
    """Compute mode (Exclusive Process or Prohibited: gpuval's measurements cannot run), with the virtualization
    mode and confidential compute reported (a vGPU shares a GPU; with CC on, host copies are encrypted)."""
    inv = ctx.inventory()
    known = [g for g in inv.gpus if g.compute_mode is not None]
    mode = _mode_of(inv)
    if not known:
        if not mode:
            return me.result(Status.SKIPPED, reason="the driver reports no compute mode")
        return me.result(Status.SKIPPED, reason=f"the driver reports no compute mode ({mode}): not judged")
    findings = [(Status.WARN, f"GPU {g.index}: compute mode {BLOCKING_MODES[g.compute_mode]}: jobs and gpuval's "
                              "measurements are refused (nvidia-smi -c DEFAULT)")
                for g in known if g.compute_mode in BLOCKING_MODES]
    vgpu = [g.index for g in inv.gpus if g.virtualization == "vgpu"]
    if vgpu:
        findings.append((Status.WARN, f"GPU {', '.join(map(str, vgpu))}: a vGPU: its figures are of a share of a "
                                      "GPU, not comparable with a whole GPU's"))
    status, reason = worst(findings)
    modes = sorted({g.compute_mode for g in known if g.compute_mode})
    return me.result(status, ", ".join(modes), "default", "",
                     (reason or f"compute mode {', '.join(modes)} on {len(known)} GPUs")
                     + (f"; {mode}" if mode else ""),
                     compute_mode={g.index: g.compute_mode for g in known},
                     virtualization={g.index: g.virtualization for g in inv.gpus if g.virtualization},
                     confidential_compute=inv.confidential_compute)


def blocking_mode(gpus: list[Gpu]) -> str | None:
    """Why gpuval cannot measure on these GPUs because of their compute mode, or None."""
    blocked = [f"GPU {g.index} in compute mode {BLOCKING_MODES[g.compute_mode]}" for g in gpus
               if g.compute_mode in BLOCKING_MODES]
    return "; ".join(blocked) or None


@check("firmware", "FIRMWARE")
def firmware(ctx: CheckContext, me: Check) -> CheckResult:
    """Inforom validity (a corrupted inforom fails, as DCGM's inforom test) and one VBIOS version across the node's
    GPUs of a model (AzNHC checks the same)."""
    inv = ctx.inventory()
    findings = [(Status.FAIL, f"GPU {g.index}: inforom invalid ({g.inforom_error or 'NVML: corrupted inforom'}): "
                              "the GPU needs a firmware reflash or replacing")
                for g in inv.gpus if g.inforom_valid is False]
    by_model: dict[str, dict[str, list[int]]] = {}
    for g in inv.gpus:
        if g.vbios:
            by_model.setdefault(g.name, {}).setdefault(g.vbios, []).append(g.index)
    for model, versions in by_model.items():
        if len(versions) > 1:
            shown = "; ".join(f"{v} on GPU {', '.join(map(str, i))}" for v, i in sorted(versions.items()))
            findings.append((Status.WARN, f"{model}: VBIOS versions differ ({shown})"))
    checked = [g for g in inv.gpus if g.inforom_valid is not None or g.vbios]
    if not checked:
        return me.result(Status.SKIPPED, reason="the driver reports neither inforom validity nor VBIOS versions")
    status, reason = worst(findings)
    vbios = sorted({g.vbios for g in inv.gpus if g.vbios})
    valid = sum(1 for g in inv.gpus if g.inforom_valid)
    return me.result(status, ", ".join(vbios), None, "", reason or
                     f"VBIOS {', '.join(vbios) or 'not reported'} on {len(checked)} GPUs; inforom valid on {valid}",
                     vbios={g.index: g.vbios for g in inv.gpus if g.vbios})


def _heat(g: Gpu) -> tuple[list[tuple[Status, str]], bool]:
    """Findings on one idle GPU's temperatures against its limits, and whether any limit was known: only at or over
    a limit (a GPU that hot at idle has a cooling fault); how close the load brings it is clocks_under_load's."""
    t = g.temperature
    findings, judged = [], False
    for label, now, limit, meaning in (("GPU", t.gpu_c, t.gpu_slowdown_c, "its slowdown temperature"),
                                       ("HBM", t.memory_c, t.memory_max_c, "the HBM's maximum operating temperature")):
        if now is None or limit is None:
            continue
        judged = True
        if now >= limit:
            findings.append((Status.FAIL, f"GPU {g.index}: {label} {now} C at or over {meaning} ({limit} C)"))
    return findings, judged


@check("temperature", "GPU_HOT")
def temperature(ctx: CheckContext, me: Check) -> CheckResult:
    """GPU and HBM temperatures at idle, reported with the limits the driver reports (slowdown, memory maximum
    operating); only one at or over its limit fails (under load they are judged by clocks_under_load)."""
    inv = ctx.inventory()
    findings, judged_any = [], False
    for g in inv.gpus:
        found, judged = _heat(g)
        findings += found
        judged_any |= judged
    temps = [(g.temperature.gpu_c, g.temperature.memory_c) for g in inv.gpus]
    hottest = max((c for c, _ in temps if c is not None), default=None)
    hbm = max((m for _, m in temps if m is not None), default=None)
    shown = f"hottest GPU {hottest} C" + (f", HBM {hbm} C" if hbm is not None else "")
    if hottest is None and hbm is None:
        return me.result(Status.SKIPPED, reason="the driver reports no temperature")
    if not judged_any:
        return me.result(Status.SKIPPED, hottest, None, "C", f"{shown}: the driver reports no limit, not judged")
    status, reason = worst(findings)
    return me.result(status, hottest, None, "C", reason or f"{shown}, each under its limit on {len(inv.gpus)} GPUs "
                     "(idle; under load: clocks_under_load)",
                     temperatures={g.index: {"gpu": g.temperature.gpu_c, "memory": g.temperature.memory_c}
                                   for g in inv.gpus})
