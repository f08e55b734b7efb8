"""The one threshold judge (`Band.judge`), the baseline it belongs to (`Baseline`) and a judgement."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gpuval.baselines.gpu_models import GpuLayer
from gpuval.errors import UsageError
from gpuval.results.model import Status

_BAND_KEYS = {"unit", "size_bytes", "expected", "expected_source", "warn_below", "warn_source", "fail_below",
              "fail_source", "warn_above", "fail_above", "note"}


UNKNOWN_SKU = "unknown SKU"  # the name of a baseline no SKU or profile names


class NoBaseline(UsageError):
    """No baseline is known for the SKU asked for."""


@dataclass(frozen=True)
class Judgement:
    """A value judged against a band: the status, the expected value, one line saying why."""

    status: Status
    expected: float | None
    reason: str


@dataclass(frozen=True)
class Band:
    """What one metric should be on this SKU, and when it is a warning or a failure."""

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

    def judge(self, value: float) -> Judgement:
        """FAIL beyond a fail limit, WARN beyond a warn limit, else PASS; the reason names the limit and source."""
        unit = f" {self.unit}" if self.unit else ""
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
        and limit, so a result judged against another SKU, GPU model or changed file is never taken for this."""
        digest = hashlib.sha256(json.dumps(self.raw, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return f"{self.sku}|{self.gpu.key if self.gpu else 'no GPU model'}|{digest}"

    @property
    def title(self) -> str:
        """What judges, in words: "Standard_ND96isr_H200_v5 on H200 SXM 141GB", "H200 SXM 141GB (no SKU)"."""
        if self.gpu is None:
            return self.sku
        if self.sku == UNKNOWN_SKU:
            return f"{self.gpu.title} (no SKU)"
        return f"{self.sku} on {self.gpu.title}"

    def band(self, metric: str) -> Band | None:
        """The band of a metric, or None when this baseline has none."""
        return self.bands.get(metric)

    def judge(self, metric: str, value: float) -> Judgement:
        """Judge a value; a metric without a band is SKIPPED: reported, not judged."""
        band = self.bands.get(metric)
        if band is None:
            return Judgement(Status.SKIPPED, None, f"{value:g}: no baseline for {metric} on {self.title}, reported, "
                                                   "not judged")
        return band.judge(value)
