"""Network presets: per-SKU NCCL/UCX settings, read from data/network-presets.yaml (data, not code)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from gpuval.errors import UsageError


class NetworkPreset(BaseModel):
    """How to launch on one SKU so NCCL finds the right HCAs, NUMA nodes and topology."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    source: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    mpi_args: list[str] = Field(default_factory=list, description="Extra mpirun options (binding, mapping); "
                                "{procs_per_node} stands for the job's processes per node.")
    mounts: list[str] = Field(default_factory=list, description="SRC:DST host paths the container needs.")
    topology_file: str | None = Field(None, description="NCCL_TOPO_FILE path inside the job.")
    recorded: str | None = Field(None, description="Recorded machine (gpuval/node/recorded) with this SKU's GPU and "
                                 "NUMA layout: the pinning plan binds ranks from it.")


@lru_cache(maxsize=1)
def presets() -> dict[str, NetworkPreset]:
    """Every preset shipped with gpuval, by SKU name."""
    text = resources.files("gpuval.engines").joinpath("data/network-presets.yaml").read_text()
    raw = yaml.safe_load(text)
    return {name: NetworkPreset(name=name, **body) for name, body in raw.items()}


def preset_for(sku: str) -> NetworkPreset:
    """The preset of a SKU (case-insensitive); an unknown SKU is a one-line error listing the known ones."""
    by_lower = {name.lower(): preset for name, preset in presets().items()}
    found = by_lower.get(sku.lower())
    if found is None:
        raise UsageError(f"no network preset for SKU {sku!r}; known: {', '.join(sorted(presets()))}")
    return found
