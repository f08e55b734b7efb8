"""CPU binding of a job's local ranks, from the pinning plan (gpuval.node.pinning) of its SKU's recorded
GPU/NUMA layout: the same plan `gpuval pin plan --sku SKU` prints, so no engine carries hand-typed masks."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec
from gpuval.node.cpus import cpu_mask
from gpuval.node.pinning import RankBinding, plan_bindings, visible_gpu_order
from gpuval.node.recorded import RecordedMachine


def rank_bindings(spec: JobSpec) -> list[RankBinding] | None:
    """The plan of one node's local ranks, or None where no plan applies: no SKU preset with a recorded layout,
    or not one process per GPU (the plan's premise: local rank r drives visible GPU r)."""
    preset = spec.network
    if preset is None or preset.recorded is None or not spec.gpus_per_node \
            or spec.procs_per_node != spec.gpus_per_node:
        return None
    machine = RecordedMachine.load(preset.recorded)
    gpu_numa = [gpu.numa_node for gpu in machine.gpu_inventory().gpus]
    order = visible_gpu_order(spec.full_env().get("CUDA_VISIBLE_DEVICES"), len(gpu_numa))
    if order is None or len(order) < spec.procs_per_node:
        return None
    return plan_bindings(machine.numa_nodes(), gpu_numa, spec.procs_per_node, order)


def srun_cpu_bind(spec: JobSpec) -> str:
    """srun --cpu-bind: one mask per local rank from the plan (`mask_cpu:`), else whole cores."""
    bindings = rank_bindings(spec)
    if not bindings:
        return "cores"
    return "mask_cpu:" + ",".join(cpu_mask(b.cpus) for b in bindings)
