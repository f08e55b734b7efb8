"""A node test's GPU figures, from the health records its node printed: what the planner compares across the nodes of
one GPU model (fleet/plan/node_figures.py).

Each figure is read by THE reader of a health record's figures, the one `gpuval baseline learn` reads them with
(baselines.learn_read.health_figures: each GPU's row in `details.gpus`, each GPU pair's P2P read, each HCA's write
bandwidth, the node's all_reduce at its size over its ranks), named by its band's metric and how it was measured
("gemm_sustained_bf16_tflops of 10 s"), so two measurements are never compared. A GPU is named as every per-GPU
figure names it, by NVML index and PCI bus id. A record that could not run (ERROR) gives none. The GPU model is the
node's (its `gpu_count` record's models, joined when it has several; else its records' `where`): a node with no
model known gives none.
"""

from __future__ import annotations

import re
from typing import Iterable

from gpuval.baselines.learn_read import health_figures
from gpuval.results.data import HealthData
from gpuval.results.model import Result, Status
from gpuval.fleet.plan.terms import Measured, NodeFigures

_GPU = re.compile(r"GPU (\d+)\b")


def node_figures(records: Iterable[Result]) -> NodeFigures | None:
    """The GPU figures of one node's health records, or None where they hold none (a node without GPUs, a quick
    suite) or name no GPU model."""
    listed: list[str] = []  # the gpu_count check's models
    seen = ""  # else the model the records' `where` names
    figures: dict[str, Measured] = {}
    for record in records:
        if record.kind != "health" or not isinstance(record.data, HealthData) or record.status is Status.ERROR:
            continue
        listed = listed or _listed(record.name, record.data)
        seen = seen or record.where.gpu_model or ""
        found = health_figures(record.name, record.data)
        if not found:
            continue  # most checks measure no figure: their rows are not read
        labels = {gpu.index: f"GPU {gpu.index} ({gpu.bus_id})" for gpu in record.data.per_gpu() if gpu.bus_id}
        for measure, values in found.items():
            name = " ".join(part for part in (measure.metric, measure.words()) if part)
            figures[name] = Measured(measure.unit, tuple((_labelled(who, labels), float(v))
                                                         for who, v in values.pairs()))
    model = " + ".join(listed) or seen
    return NodeFigures(model, figures) if figures and model else None


def _listed(name: str, data: HealthData) -> list[str]:
    """The GPU models the gpu_count check found on the node (sorted, each once); [] from any other check."""
    models = data.details.get("models") if name == "gpu_count" else None
    if isinstance(models, list) and all(isinstance(m, str) and m for m in models):
        return sorted(set(models))
    return []


def _labelled(who: str, labels: dict[int, str]) -> str:
    """'GPU 3 alone' as 'GPU 3 (00000004:00:00.0) alone' where the record gives its bus id."""
    found = _GPU.match(who)
    if found is None or int(found.group(1)) not in labels:
        return who
    return labels[int(found.group(1))] + who[found.end():]
