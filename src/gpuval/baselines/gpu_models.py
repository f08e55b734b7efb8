"""GPU-level expectations, keyed by the GPU itself (as DCGM's diag-skus.yaml keys its own): the PCI device id NVML
reads (nvmlDeviceGetPciInfo), narrowed by the subsystem id and the default power limit where boards of one device
differ, and the NVML name as the fallback where no id is known (a recording). One YAML file per GPU model in
`gpus/`; every figure names its source, and what is left out says why (`left_out`).

The host link sets the H2D/D2H expectation, not the GPU model: `_pcie_h2d.yaml` holds the figure per PCIe
generation at x16, scaled by the lanes the link trained at. A node of any make (no SKU) is judged by these; an
Azure SKU or a user's node profile adds the node-level expectations on top (gpuval.baselines.find_baseline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

import yaml

from gpuval.errors import UsageError

POWER_WARN_SOURCE = ("gpuval policy: a GPU allowed less than its board power runs slower under load (a setting or a "
                     "cap: warn)")
LANES_SOURCE = "gpuval derivation: a PCIe link's bandwidth scales with its lanes (each lane carries the generation's rate)"
LIMIT_KEYS = ("expected", "warn_below", "fail_below", "warn_above", "fail_above")
# The figures a datasheet peak bounds, and the peak's key in a model's `peak:` (both HBM figures count the bytes
# moved, as the datasheet's memory bandwidth does); H2D and D2H are bounded by the host link (_pcie_h2d.yaml).
PEAK_OF = {"gemm_bf16_tflops": ("gemm_bf16_tflops", "TFLOPS"), "gemm_fp16_tflops": ("gemm_fp16_tflops", "TFLOPS"),
           "hbm_memcpy_gbps": ("hbm_gbps", "GB/s"), "hbm_triad_gbps": ("hbm_gbps", "GB/s")}
LINK_PEAK_OF = ("h2d_gbps", "d2h_gbps")


@dataclass(frozen=True)
class GpuIdentity:
    """What identifies one GPU and its host link: NVML's name, PCI device id (the 16-bit device part: 0x2335),
    subsystem id (32 bits as NVML gives it: 0x18BF10DE), default power limit (W), PCIe generation and width, and
    whether it reports NVLinks."""

    name: str = ""
    device_id: int | None = None
    subsystem_id: int | None = None
    default_power_w: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlinks_reported: bool = False


@dataclass(frozen=True)
class Board:
    """One way a model is matched: its device id, optionally only one subsystem (board), with its default power."""

    device_id: int
    subsystem_id: int | None = None
    power_w: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Peak:
    """What a GPU, or its host link, can physically do for one figure (its datasheet's or the link's rate), with the
    source: the reference of the floor a figure is judged against where no band is (Baseline.judge_floor)."""

    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: how it is matched, its facts (NVLink) and its bands (metric -> band mapping)."""

    key: str
    title: str
    boards: tuple[Board, ...]
    names: tuple[str, ...]
    metrics: dict[str, dict[str, Any]]
    nvlink: dict[str, Any] = field(default_factory=dict)
    pcie_host_link: bool = True  # False: the GPU reaches host memory over NVLink-C2C (GH200), no PCIe H2D band
    left_out: dict[str, str] = field(default_factory=dict)
    load_dtype: str = "bf16"  # the dtype gpuval's GEMM load runs on this GPU (fp16 where it has no bf16 tensor cores)
    peaks: dict[str, Peak] = field(default_factory=dict)  # by metric judged (PEAK_OF), from the model's `peak:`


@dataclass(frozen=True)
class GpuLayer:
    """The GPU-level bands of a node (or one GPU): its model's, its board's power, its link's H2D; `key` names
    them for a kept result, `title` for a person, `how` says how the model was found."""

    key: str
    title: str
    how: str
    metrics: dict[str, dict[str, Any]]
    model: GpuModel | None = None
    peaks: dict[str, Peak] = field(default_factory=dict)  # datasheet and link peaks, by metric judged


def _number(value: Any, where: str) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 16)
    except ValueError:
        raise UsageError(f"{where}: {value!r} is not a PCI id (0x2335)") from None


def _peaks(data: dict[str, Any], where: str) -> dict[str, Peak]:
    """A model's datasheet peaks by metric judged: `peak: {source, gemm_bf16_tflops, gemm_fp16_tflops, hbm_gbps}`,
    each a positive number, the source named."""
    if not data:
        return {}
    source = str(data.get("source") or "")
    figures = {k: v for k, v in data.items() if k != "source"}
    known = {key for key, _ in PEAK_OF.values()}
    if not source or set(figures) - known or not all(isinstance(v, (int, float)) and v > 0 for v in figures.values()):
        raise UsageError(f"{where}: peak names its source and positive figures of {', '.join(sorted(known))}")
    return {metric: Peak(float(figures[key]), unit, source) for metric, (key, unit) in PEAK_OF.items()
            if key in figures}


def _model(key: str, data: dict[str, Any]) -> GpuModel:
    where = f"gpuval:gpus/{key}.yaml"
    boards = tuple(Board(_number(b["device_id"], where), _number(b["subsystem_id"], where)
                         if b.get("subsystem_id") is not None else None,
                         float(b["power_w"]) if b.get("power_w") is not None else None, str(b.get("source", "")))
                   for b in data.get("match") or [])
    return GpuModel(key, str(data["model"]), boards, tuple(data.get("nvml_names") or []),
                    dict(data.get("metrics") or {}), dict(data.get("nvlink") or {}),
                    bool(data.get("pcie_host_link", True)), dict(data.get("left_out") or {}),
                    str(data.get("load_dtype", "bf16")), _peaks(data.get("peak") or {}, where))


def safe_load(text: str) -> Any:
    """yaml.safe_load through libyaml where PyYAML has it (ten times the pure-Python parser's speed: the baselines
    are read by every command that judges)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


@lru_cache(maxsize=1)
def gpu_models() -> tuple[GpuModel, ...]:
    """Every packaged GPU model (gpus/*.yaml), by file name."""
    folder = resources.files("gpuval.baselines") / "gpus"
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            found.append(_model(entry.name[:-5], safe_load(entry.read_text())))
    return tuple(found)


def model_by_key(key: str) -> GpuModel | None:
    """The packaged model of this key (a SKU file's `gpu:`)."""
    return next((m for m in gpu_models() if m.key == key), None)


def _same_power(board: Board, gpu: GpuIdentity) -> bool:
    return gpu.default_power_w is not None and board.power_w is not None and abs(board.power_w - gpu.default_power_w) < 0.5


def _board(gpu: GpuIdentity) -> tuple[GpuModel, Board] | None:
    """The model and board of a PCI device id: the board of its subsystem first, then one of its default power,
    then the device id alone (a board not listed: its power is not the model's to say). A board's power is said
    only where the GPU's own default power (NVML) agrees with it, or NVML gives none: a board of that subsystem
    whose default is another figure keeps its model, not the entry's power."""
    tiers: list[list[tuple[GpuModel, Board]]] = [[], [], []]
    for model in gpu_models():
        for board in model.boards:
            if board.device_id != gpu.device_id:
                continue
            if board.subsystem_id is not None:
                if board.subsystem_id == gpu.subsystem_id:
                    agrees = gpu.default_power_w is None or board.power_w is None or _same_power(board, gpu)
                    tiers[0].append((model, board if agrees else Board(board.device_id, board.subsystem_id,
                                                                       source=board.source)))
            elif board.power_w is not None:
                if _same_power(board, gpu):
                    tiers[1].append((model, board))
                else:  # the model, on a board of another default power: its power is not this entry's to say
                    tiers[2].append((model, Board(board.device_id, source=board.source)))
            else:
                tiers[2].append((model, board))
    return next((tier[0] for tier in tiers if tier), None)


def identify(gpu: GpuIdentity) -> tuple[GpuModel | None, Board | None, str]:
    """The model of one GPU, its board, and how it was found; a device id no model lists is no model (its name
    is not trusted over its id)."""
    if gpu.device_id is not None:
        found = _board(gpu)
        ids = f"PCI device 0x{gpu.device_id:04X}" + (f", subsystem 0x{gpu.subsystem_id:08X}"
                                                      if gpu.subsystem_id is not None else "")
        if found is None:
            return None, None, f"{ids} ({gpu.name or 'no name'}): no packaged GPU model"
        return found[0], found[1], ids
    wanted = gpu.name.strip().lower()
    for model in gpu_models():
        if wanted and wanted in (n.lower() for n in model.names):
            return model, None, f"NVML name {gpu.name!r} (no PCI device id read)"
    return None, None, f"{gpu.name or 'a GPU'}: no PCI device id and no packaged model of that name"


def _scaled(band: dict[str, Any], factor: float, lanes: int) -> dict[str, Any]:
    out = dict(band)
    for key in LIMIT_KEYS:
        if out.get(key) is not None:
            out[key] = round(float(out[key]) * factor, 2)
    for key in ("expected_source", "warn_source", "fail_source"):
        if out.get(key):
            out[key] = f"{out[key]}; x{lanes} of x16: {LANES_SOURCE}"
    return out


@lru_cache(maxsize=1)
def _h2d_file() -> dict[str, Any]:
    return dict(safe_load((resources.files("gpuval.baselines") / "_pcie_h2d.yaml").read_text()))


def _h2d_table() -> dict[int, dict[str, dict[str, Any]]]:
    return {int(gen): dict(bands) for gen, bands in (_h2d_file().get("links") or {}).items()}


def link_peaks(gen: int | None, width: int | None) -> dict[str, Peak]:
    """What a PCIe link of this generation and width carries each way (GB/s): the peak of H2D and D2H alone."""
    rates = _h2d_file().get("peak") or {}
    if gen is None or not width or gen not in rates:
        return {}
    lanes = f" at x{width}: x{width} of x16" if width != 16 else ""
    peak = Peak(round(float(rates[gen]) * width / 16, 2), "GB/s", f"{rates['source']}{lanes}")
    return {metric: peak for metric in LINK_PEAK_OF}


def link_bands(gen: int | None, width: int | None) -> dict[str, dict[str, Any]]:
    """H2D/D2H bands of a PCIe link of this generation and width (none for a generation without a figure)."""
    if gen is None or not width or gen not in _h2d_table():
        return {}
    return {name: _scaled(band, width / 16, width) if width != 16 else dict(band)
            for name, band in _h2d_table()[gen].items()}


def _power_band(board: Board) -> dict[str, Any]:
    return {"unit": "W", "expected": board.power_w, "expected_source": board.source, "warn_below": board.power_w,
            "warn_source": POWER_WARN_SOURCE, "kind": "limit"}


def _nvlink_band(model: GpuModel) -> dict[str, Any]:
    return {"unit": "links", "expected": model.nvlink["links"], "expected_source": model.nvlink.get("source", ""),
            "fail_below": model.nvlink["links"], "fail_source": "a link down", "kind": "limit"}


def _one(gpu: GpuIdentity) -> GpuLayer:
    model, board, how = identify(gpu)
    metrics: dict[str, dict[str, Any]] = {}
    peaks: dict[str, Peak] = {}
    parts = [model.key if model else "unknown"]
    if model is None or model.pcie_host_link:
        metrics.update(link_bands(gpu.pcie_gen, gpu.pcie_width))
        peaks.update(link_peaks(gpu.pcie_gen, gpu.pcie_width))
        parts.append(f"gen{gpu.pcie_gen}x{gpu.pcie_width}" if metrics else "no-link-figure")
    if model is not None:
        metrics.update({k: dict(v) for k, v in model.metrics.items()})
        peaks.update(model.peaks)
        if board is not None and board.power_w is not None:
            metrics["power_limit_w"] = _power_band(board)
            parts.append(f"{board.power_w:g}W")
        # the links a node wires are the node's (a one-GPU VM of an SXM board shows none): judged where reported
        if model.nvlink.get("links") and gpu.nvlinks_reported:
            metrics["nvlinks_per_gpu"] = _nvlink_band(model)
    title = model.title if model else (gpu.name or "unknown GPU")
    return GpuLayer("/".join(parts), title, how, metrics, model, peaks)


def gpu_layer(gpus: Iterable[GpuIdentity]) -> GpuLayer | None:
    """The GPU-level bands of these GPUs: those of one GPU where every GPU gives the same (model, board, link);
    where they differ, only the bands they share (each GPU is judged by its own through `gpu_layer([gpu])`)."""
    layers = [_one(g) for g in gpus]
    if not layers:
        return None
    first = layers[0]
    if all(layer.key == first.key for layer in layers):
        return first
    shared = {k: v for k, v in first.metrics.items() if all(layer.metrics.get(k) == v for layer in layers)}
    peaks = {k: v for k, v in first.peaks.items() if all(layer.peaks.get(k) == v for layer in layers)}
    titles = sorted({layer.title for layer in layers})
    return GpuLayer("mixed:" + ",".join(sorted({layer.key for layer in layers})), " + ".join(titles),
                    "GPUs of different models or links: each judged by its own", shared, None, peaks)
