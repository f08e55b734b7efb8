"""Expected values per Azure SKU, as data (YAML files in this folder, each value with its source), and THE one
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
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from gpuval.errors import UsageError
from gpuval.results.model import Status

_BAND_KEYS = {"unit", "size_bytes", "expected", "expected_source", "warn_below", "warn_source", "fail_below",
              "fail_source", "warn_above", "fail_above", "note"}


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

    def band(self, metric: str) -> Band | None:
        """The band of a metric, or None when this baseline has none."""
        return self.bands.get(metric)

    def judge(self, metric: str, value: float) -> Judgement:
        """Judge a value; a metric without a band is SKIPPED: reported, not judged."""
        band = self.bands.get(metric)
        if band is None:
            return Judgement(Status.SKIPPED, None, f"{value:g}: no baseline for {metric} on {self.sku}, reported, not judged")
        return band.judge(value)


# ---- loading ---------------------------------------------------------------------------------------------------


def _key(sku: str) -> str:
    return sku.strip().lower().removeprefix("standard_")


def _load_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a baseline file is a mapping with 'sku' and 'metrics'")
    return data


def _packaged() -> dict[str, tuple[str, dict[str, Any]]]:
    folder = resources.files("gpuval.baselines")
    found = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            data = _load_yaml(entry.read_text(), entry.name)
            found[entry.name] = (f"gpuval:{entry.name}", data)
    return found


def packaged_skus() -> list[str]:
    """SKUs with a baseline in the package."""
    return sorted(data["sku"] for name, (_, data) in _packaged().items() if not name.startswith("_"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _user_files(paths: Iterable[str | Path]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the baseline file ({exc.strerror})") from None
        data = _load_yaml(text, str(path))
        if not data.get("sku"):
            raise UsageError(f"{path}: a baseline file needs 'sku: <VM size>' (and 'inherits: <SKU>' to start from one)")
        out.append((str(path), data))
    return out


def _build(sku: str, data: dict[str, Any], files: list[str]) -> Baseline:
    bands = {}
    for name, values in (data.get("metrics") or {}).items():
        if not isinstance(values, dict):
            raise UsageError(f"{files[-1]}: metric {name} must be a mapping (expected, fail_below, ...)")
        unknown = set(values) - _BAND_KEYS
        if unknown:
            raise UsageError(f"{files[-1]}: metric {name}: unknown key(s) {', '.join(sorted(unknown))}")
        try:
            bands[name] = Band(name=name, **{k: (float(v) if k in ("expected", "warn_below", "fail_below", "warn_above",
                                                                      "fail_above") and v is not None else v)
                                             for k, v in values.items() if k != "note"})
        except (TypeError, ValueError):
            raise UsageError(f"{files[-1]}: metric {name}: limits must be numbers") from None
    xid = data.get("xid") or {}
    return Baseline(sku=sku, bands=bands, gpu_model=data.get("gpu_model"), driver_min=data.get("driver_min"),
                    topology=dict(data.get("topology") or {}), fatal_xids=[int(x) for x in xid.get("fatal", [])],
                    files=files, raw=data)


def find_baseline(sku: str | None, extra_files: Iterable[str | Path] = ()) -> Baseline | None:
    """The baseline of `sku` (packaged, then the user's files on top), or None when none is known.

    With no SKU and user files that name exactly one SKU, that one is used (a user's own machine type)."""
    packaged = _packaged()
    defaults = packaged.get("_defaults.yaml", ("", {}))[1]
    by_sku = {_key(data["sku"]): (where, data) for name, (where, data) in packaged.items() if not name.startswith("_")}
    user = _user_files(extra_files)
    if sku is None:
        named = {_key(d["sku"]) for _, d in user}
        if len(named) != 1:
            return None
        sku = user[0][1]["sku"]
    wanted = _key(sku)
    layers: list[tuple[str, dict[str, Any]]] = []
    if wanted in by_sku:
        layers.append(by_sku[wanted])
    for where, data in user:
        if _key(data["sku"]) != wanted:
            continue
        parent = data.get("inherits")
        if parent and not layers:
            if _key(parent) not in by_sku:
                raise UsageError(f"{where}: inherits {parent!r}, which has no baseline "
                                 f"(known: {', '.join(packaged_skus())})")
            layers.append(by_sku[_key(parent)])
        layers.append((where, data))
    if not layers:
        return None
    merged = defaults
    for _, data in layers:
        merged = _merge(merged, {k: v for k, v in data.items() if k != "inherits"})
    name = next((d["sku"] for _, d in reversed(layers) if _key(d["sku"]) == wanted), sku)
    return _build(name, merged, [w for w, _ in layers])


def load_baseline(sku: str, extra_files: Iterable[str | Path] = ()) -> Baseline:
    """The baseline of `sku`; NoBaseline (a one-line error) when none is known."""
    found = find_baseline(sku, extra_files)
    if found is None:
        raise NoBaseline(f"no baseline for {sku}: known SKUs are {', '.join(packaged_skus())} "
                         "(add your own with --baseline FILE)")
    return found


# Given a SKU (None: the record does not say), its baseline, or None when none is known.
BaselineSource = Callable[[str | None], Baseline | None]


def no_baselines(_sku: str | None) -> Baseline | None:
    """The source that knows no baseline: nothing is judged against one."""
    return None


def baseline_source(extra_files: Iterable[str | Path] = ()) -> BaselineSource:
    """The packaged baselines (and the user's files on top) as a source, each SKU loaded once."""
    files = tuple(extra_files)
    cache: dict[str, Baseline | None] = {}

    def for_sku(sku: str | None) -> Baseline | None:
        if not sku:
            return None
        if sku not in cache:
            cache[sku] = find_baseline(sku, files)
        return cache[sku]

    return for_sku


def generic_baseline() -> Baseline:
    """The limits every SKU shares (_defaults.yaml), for a machine whose SKU has no baseline."""
    return _build("unknown SKU", _packaged().get("_defaults.yaml", ("", {}))[1], ["gpuval:_defaults.yaml"])
