"""Expected values per GPU model (gpus/*.yaml, keyed by PCI device id) and per Azure SKU or user's node profile
(YAML files in this folder), as data, each value with its source, and THE one
threshold judge: `Band.judge`. Health checks, `gpuval validate`, `gpuval import` and the diagnosis behind the report
all judge a figure through it, on the figure as measured (never rounded first), so one figure gets one verdict.
The one NCCL transport verdict lives beside it, in `gpuval.baselines.transport`.

Public API:

    >>> from gpuval.baselines import load_baseline
    >>> base = load_baseline("Standard_ND96asr_v4")
    >>> base.judge("allreduce_busbw_gbps", 229.0)
    Judgement(status=<Status.WARN: 'warn'>, expected=234.0, reason='229 GB/s is under the warn limit 230 ...')

A metric's band says `expected` (with `expected_source`) and any of `warn_below`, `fail_below`, `warn_above`,
`fail_above`, each with its `*_source`. `_defaults.yaml` holds limits every SKU shares. A user's file adds a SKU
or overrides values of one; `inherits: <SKU>` starts it from a packaged SKU, so a node with fewer GPUs or links
than its family is one small file, not a special case in code:

    sku: Standard_ND96asr_v4_half      # or the packaged SKU's own name, to override it
    inherits: Standard_ND96asr_v4
    metrics:
      gpu_count: {expected: 4, fail_below: 4, expected_source: "our 4-GPU partition"}

GPU-level bands (HBM, GEMM, board power, NVLink, H2D by the link's PCIe generation and width) come from the GPU
model found on the node (`with_gpus`), so a node with no SKU is judged too; the SKU or a `--profile` file adds the
node-level bands on top (GPU count, HCAs, topology, all_reduce, IB). Layout: `model` (the judge), `files` (loading
and merging), `gpu_models` (the GPU level). docs/baselines.md lists every figure and its source.
"""

from __future__ import annotations

from gpuval.baselines.files import (
    BaselineSource, baseline_source, check_profile, find_baseline, generic_baseline, load_baseline, no_baselines,
    packaged_skus, with_gpus,
)
from gpuval.baselines.gpu_models import GpuIdentity, GpuLayer, gpu_models, identify
from gpuval.baselines.model import UNKNOWN_SKU, Band, Baseline, Judgement, NoBaseline

__all__ = ["Band", "Baseline", "BaselineSource", "GpuIdentity", "GpuLayer", "Judgement", "NoBaseline", "UNKNOWN_SKU",
           "baseline_source", "check_profile", "find_baseline", "generic_baseline", "gpu_models", "identify",
           "load_baseline", "no_baselines", "packaged_skus", "with_gpus"]
