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
node-level bands on top (GPU count, HCAs, topology, all_reduce, IB). Every band says what its figures are
(`kind`: gpuval's own measurement, another program's measured the same way, derived, a limit; `kinds`), so a band
judges only a figure measured the way gpuval measures it. Limits are finite numbers; a figure that is not judges
nothing (ERROR). The all_reduce band of N nodes x R ranks, and its size, is `Baseline.allreduce_band` (the one
rule validate, the diagnosis, the fleet and the collective jobs ask). `baseline_source(files)` is the one source a
command builds from `--baseline` / `--profile`. Layout: `model` (the judge, the all_reduce rule), `files` (loading
and merging), `gpu_models` (the GPU level), `kinds` (what a figure is). docs/baselines.md lists every figure and
its source, and what is not judged and why.
"""

from __future__ import annotations

from gpuval.baselines.files import (
    BaselineSource, baseline_source, check_learned, check_profile, find_baseline, generic_baseline, load_baseline,
    no_baselines, packaged_skus, with_gpus,
)
from gpuval.baselines.gpu_models import GpuIdentity, GpuLayer, gpu_models, identify
from gpuval.baselines.model import (
    ALLREDUCE_CPU_BYTES, ALLREDUCE_DEFAULT_BYTES, UNKNOWN_SKU, Band, Baseline, Judgement, NoBaseline, NotFinite, allreduce_figure,
    allreduce_size,
)

__all__ = ["ALLREDUCE_CPU_BYTES", "ALLREDUCE_DEFAULT_BYTES", "Band", "Baseline", "BaselineSource", "GpuIdentity", "GpuLayer", "Judgement",
           "NoBaseline", "NotFinite", "UNKNOWN_SKU", "allreduce_figure", "allreduce_size", "baseline_source",
           "check_learned", "check_profile", "find_baseline", "generic_baseline", "gpu_models", "identify",
           "load_baseline", "no_baselines", "packaged_skus", "with_gpus"]
