"""The one threshold judge (`Band.judge`), the baseline it belongs to (`Baseline`), a judgement, and THE all_reduce
band rule (`Baseline.allreduce_band`): which band judges an all_reduce over N nodes and R ranks, at what size."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import astuple, dataclass, field
from typing import TYPE_CHECKING, Any

from gpuval.baselines.gpu_models import GpuLayer
from gpuval.errors import GpuvalError, UsageError
from gpuval.results.model import Status

if TYPE_CHECKING:
    from gpuval.collectives.table import Row

LIMIT_NAMES = ("expected", "warn_below", "fail_below", "warn_above", "fail_above")
_BAND_KEYS = {"unit", "size_bytes", "expected", "expected_source", "warn_below", "warn_source", "fail_below",
              "fail_source", "warn_above", "fail_above", "note", "kind", "method", "derived_from"}

UNKNOWN_SKU = "unknown SKU"  # the name of a baseline no SKU or profile names
FLOOR = "floor_pct_of_peak"  # the limit (in % of the datasheet peak) under which a figure fails (_defaults.yaml)

ALLREDUCE_ONE_NODE = "allreduce_busbw_gbps"  # one node's GPUs, one rank per GPU
ALLREDUCE_ANY_NODES = "allreduce_busbw_multinode_gbps"  # held at every node count where none names its own
ALLREDUCE_DEFAULT_BYTES = 1024**3  # without a band: bandwidth-bound on every fabric (97% of the 8 GiB figure, AML)
ALLREDUCE_CPU_BYTES = 64 * 1024**2  # CPU ranks (gloo): no band judges them; a sweep that ends in well under a minute


class NoBaseline(UsageError):
    """No baseline is known for the SKU asked for."""


class NotFinite(GpuvalError):
    """A measured figure that is no finite number (NaN, infinite): nothing is judged by it, the check could not
    measure (ERROR, exit 2), never a PASS."""


def finite(value: float) -> bool:
    """Whether a figure is a finite number (NaN and infinities judge nothing)."""
    try:
        return math.isfinite(value)
    except TypeError:
        return False


@dataclass(frozen=True)
class Judgement:
    """A value judged against a band: the status, the expected value, one line saying why."""

    status: Status
    expected: float | None
    reason: str


@dataclass(frozen=True)
class Band:
    """What one metric should be on this SKU, and when it is a warning or a failure. `kind` says what the figures
    are (gpuval.baselines.kinds: gpuval's own measurement, another program's measured the same way, derived from
    another band, a limit), `method` how a measured figure was measured, `derived_from` the band it comes from."""

    name: str
    unit: str = ""
    expected: float | None = None
    expected_source: str = ""
    warn_below: float | None = None
    fail_below: float | None = None
    warn_above: float | None = None
    fail_above: float | None = None
    warn_source: str = ""
    fail_source: str = ""
    size_bytes: int | None = None
    kind: str = ""
    method: str = ""
    derived_from: str = ""

    def judge(self, value: float) -> Judgement:
        """FAIL beyond a fail limit, WARN beyond a warn limit, else PASS; the reason names the limit and source. A
        figure that is no finite number is ERROR: not judged, never a PASS."""
        unit = f" {self.unit}" if self.unit else ""
        if not finite(value):
            return Judgement(Status.ERROR, self.expected, f"{value} is not a finite figure: not judged (the "
                                                          "measurement itself failed)")
        shown = f"{value:g}{unit}"
        for limit, status, source, below in (
            (self.fail_below, Status.FAIL, self.fail_source, True), (self.fail_above, Status.FAIL, self.fail_source, False),
            (self.warn_below, Status.WARN, self.warn_source, True), (self.warn_above, Status.WARN, self.warn_source, False),
        ):
            if limit is not None and (value < limit if below else value > limit):
                word = "under" if below else "over"
                kind = "fail" if status is Status.FAIL else "warn"
                return Judgement(status, self.expected, f"{shown} is {word} the {kind} limit {limit:g}{unit} ({source})")
        return Judgement(Status.PASS, self.expected,
                         f"{shown}, expected {self.expected:g}{unit} ({self.expected_source})" if self.expected is not None
                         else f"{shown} is within limits")


def allreduce_band_name(nodes: int) -> str:
    """The name of the band of an all_reduce over exactly `nodes` nodes (allreduce_busbw_<N>node_gbps for N > 1)."""
    return ALLREDUCE_ONE_NODE if nodes == 1 else f"allreduce_busbw_{nodes}node_gbps"


@dataclass
class Baseline:
    """The baseline of one SKU: metric bands, GPU model, minimum driver, topology, fatal Xids."""

    sku: str
    bands: dict[str, Band] = field(default_factory=dict)
    gpu_model: str | None = None
    driver_min: str | None = None
    topology: dict[str, Any] = field(default_factory=dict)
    fatal_xids: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # where it came from, packaged first
    raw: dict[str, Any] = field(default_factory=dict)
    gpu: GpuLayer | None = None  # the GPU-level bands under the SKU's (model, board power, host link)
    layers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # the SKU's / profile's files, in order

    @property
    def key(self) -> str:
        """A stable identity of what judges: SKU or profile, GPU model, board and link, and a digest of every band
        and the facts the checks judge by (driver, Xids, topology, fabric), so a result judged against another SKU,
        GPU model or changed file is never taken for this. Built from those typed parts, never from the file as
        read: its size is the bands', whatever the file held."""
        judged = {"bands": {n: astuple(b) for n, b in sorted(self.bands.items())}, "driver_min": self.driver_min,
                  "peaks": {m: astuple(p) for m, p in sorted(self.gpu.peaks.items())} if self.gpu else {},
                  "fatal_xids": self.fatal_xids, "topology": self.topology, "fabric": self.raw.get("fabric"),
                  "sxid": self.raw.get("sxid")}
        digest = hashlib.sha256(json.dumps(judged, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return f"{self.sku}|{self.gpu.key if self.gpu else 'no GPU model'}|{digest}"

    @property
    def title(self) -> str:
        """What judges, in words: "Standard_ND96isr_H200_v5 on H200 SXM 141GB", "H200 SXM 141GB (no SKU)"."""
        if self.gpu is None:
            return self.sku
        if self.sku == UNKNOWN_SKU:
            return f"{self.gpu.title} (no SKU)"
        return f"{self.sku} on {self.gpu.title}"

    @property
    def gpus(self) -> int | None:
        """The GPUs per node this baseline names (its gpu_count band), None where it names none."""
        band = self.bands.get("gpu_count")
        return int(band.expected) if band is not None and band.expected else None

    def band(self, metric: str) -> Band | None:
        """The band of a metric, or None when this baseline has none."""
        return self.bands.get(metric)

    def allreduce_band(self, nodes: int, ranks: int | None) -> Band | None:
        """THE band of an all_reduce over `nodes` nodes and `ranks` ranks in all (None: not known), judged at its
        `size_bytes`; None where no band judges that measurement:

        - one rank: busbw is 0 by definition (no all_reduce between GPUs), nothing is judged;
        - a baseline that names its GPUs per node judges only one rank per GPU of every node (ranks = nodes x
          gpu_count): a figure over 4 of 8 GPUs, or of unknown ranks, is another measurement;
        - 1 node: `allreduce_busbw_gbps`; N nodes: `allreduce_busbw_<N>node_gbps` where the file has one, else
          `allreduce_busbw_multinode_gbps` (busbw is defined to be independent of the rank count, nccl-tests
          doc/PERFORMANCE.md)."""
        if nodes < 1 or (ranks is not None and ranks < 2):
            return None
        gpus = self.gpus
        if gpus is not None and ranks != nodes * gpus:
            return None
        exact = self.bands.get(allreduce_band_name(nodes))
        return exact if exact is not None or nodes == 1 else self.bands.get(ALLREDUCE_ANY_NODES)

    def judge(self, metric: str, value: float) -> Judgement:
        """Judge a figure a check measured; a metric without a band is SKIPPED: reported, not judged. A figure that
        is no finite number raises NotFinite: the check could not measure (ERROR), whatever any band says."""
        if not finite(value):
            raise NotFinite(f"{metric} measured {value}: not a finite figure, nothing judged")
        band = self.bands.get(metric)
        if band is None:
            return Judgement(Status.SKIPPED, None, f"{value:g}: no baseline for {metric} on {self.title}, reported, "
                                                   "not judged")
        return band.judge(value)

    def judge_floor(self, metric: str, value: float) -> Judgement:
        """A figure against the floor under what its GPU (or host link) can physically do: the `floor_pct_of_peak`
        limit (a share of the datasheet peak, _defaults.yaml) through Band.judge, on the figure as measured. A limit,
        not a band: it fails a GPU far under its peak, it never says what a healthy one reads. SKIPPED where no peak
        is known; NotFinite for a figure that is no finite number, as `judge`."""
        if not finite(value):
            raise NotFinite(f"{metric} measured {value}: not a finite figure, nothing judged")
        peak = self.gpu.peaks.get(metric) if self.gpu is not None else None
        floor = self.bands.get(FLOOR)
        if peak is None or floor is None or floor.fail_below is None:
            return Judgement(Status.SKIPPED, None, f"no datasheet peak of {metric} on {self.title}")
        pct = value / peak.value * 100
        judged = floor.judge(pct)
        line = floor.fail_below / 100 * peak.value
        verdict = (f"under the floor {line:g} {peak.unit} ({floor.fail_source})" if judged.status is Status.FAIL
                   else f"over the floor {line:g} {peak.unit}")
        return Judgement(judged.status, None, f"{value:g} {peak.unit} is {pct:.1f}% of its peak {peak.value:g} "
                                              f"{peak.unit} ({peak.source.split(':')[0]}): {verdict}")


def allreduce_size(baseline: Baseline | None, nodes: int, ranks: int | None, on_gpus: bool = True) -> int:
    """The message size an all_reduce over `nodes` nodes and `ranks` ranks runs to: on GPUs its band's size (judged
    there), else ALLREDUCE_DEFAULT_BYTES; on CPU ranks ALLREDUCE_CPU_BYTES (8 GiB over gloo is tens of minutes
    measuring nothing a band judges)."""
    if not on_gpus:
        return ALLREDUCE_CPU_BYTES
    band = baseline.allreduce_band(nodes, ranks) if baseline is not None else None
    return int(band.size_bytes) if band is not None and band.size_bytes else ALLREDUCE_DEFAULT_BYTES


def allreduce_figure(row: Row) -> float | None:
    """The figure an all_reduce band judges at its size: the mean of out-of-place and in-place busbw (nccl-tests'
    Avg bus bandwidth at one size, the figure AzNHC compares and gpuval's health check measures); None for a row
    without a measured side."""
    sides = row.sides()
    return math.fsum(s.bus_bw for s in sides) / len(sides) if sides else None
