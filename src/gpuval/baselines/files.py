"""Loading baselines: the packaged SKU files, a user's `--baseline` files and `--profile` node profiles on top, and
the GPU-level bands beneath them (gpuval.baselines.gpu_models), merged into one Baseline: defaults, then the GPU
model (its board's power, its host link's H2D), then the SKU or profile, then the user's files.

A node profile is a file a user writes for a node type no packaged SKU describes (AWS p5, GCP a3, a DGX, a
workstation): `profile: <name>`, optionally `inherits: <SKU>`, and the node-level metrics (GPU count, HCAs,
all_reduce ...), every figure with its source. A bad one is a one-line UsageError (exit 2).
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from gpuval.baselines.gpu_models import GpuIdentity, GpuLayer, gpu_layer, identify, model_by_key, safe_load
from gpuval.baselines.kinds import check_kind
from gpuval.baselines.model import _BAND_KEYS, LIMIT_NAMES, UNKNOWN_SKU, Band, Baseline, NoBaseline
from gpuval.errors import UsageError
from gpuval.node.yaml_input import read_yaml

_COMMON_KEYS = {"inherits", "gpu", "description", "metrics", "topology", "fabric", "driver_min", "driver_min_source",
                "gpu_model", "gpu_model_source", "xid", "sxid", "left_out", "learned"}
PROFILE_KEYS = {"profile", *_COMMON_KEYS}
SKU_KEYS = {"sku", *_COMMON_KEYS}  # a baseline file's top-level keys (the packaged SKU files' own)
LIMITS = (("expected", "expected_source"), ("warn_below", "warn_source"), ("warn_above", "warn_source"),
          ("fail_below", "fail_source"), ("fail_above", "fail_source"))


def _key(sku: str) -> str:
    return sku.strip().lower().removeprefix("standard_")


def _load_yaml(text: str, where: str, user: bool = False) -> dict[str, Any]:
    """A packaged file through the plain safe loader; a user's through THE reader of a user's YAML (no aliases,
    bounded nesting and size)."""
    if user:
        data = read_yaml(text, where)
    else:
        try:
            data = safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a baseline file is a mapping with 'sku' (or 'profile') and 'metrics'")
    return data


def _packaged() -> dict[str, tuple[str, dict[str, Any]]]:
    """The packaged SKU files, by file name: a copy the caller may change (they are read once per process)."""
    return copy.deepcopy(_read_packaged())


@lru_cache(maxsize=1)
def _read_packaged() -> dict[str, tuple[str, dict[str, Any]]]:
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


def _limit(value: Any, name: str, limit: str, where: str) -> float:
    """A limit as a finite number; NaN, infinities and words are refused (NaN compares false with every figure: a
    NaN limit would pass anything, an infinite one fail everything)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: metric {name}: limits must be numbers ({limit}: {value!r})") from None
    if not math.isfinite(number):
        raise UsageError(f"{where}: metric {name}: {limit} {value!r} is not a finite number (limits are finite "
                         "numbers)")
    return number


def check_profile(data: dict[str, Any], where: str, keys: set[str] = PROFILE_KEYS) -> None:
    """A node profile's (or a user's baseline file's: `keys` SKU_KEYS) shape: known keys, a GPU model gpuval has,
    every metric a mapping whose numbers each name their source (a figure without one is refused, never judged)."""
    unknown = set(data) - keys
    if unknown:
        kind = "a profile" if "profile" in keys else "a baseline file"
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} ({kind} has "
                         f"{', '.join(sorted(keys))})")
    if data.get("gpu") and model_by_key(str(data["gpu"])) is None:
        raise UsageError(f"{where}: gpu {data['gpu']!r} is no packaged GPU model (gpuval/baselines/gpus)")
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise UsageError(f"{where}: 'metrics' is a mapping of metric name to band")
    for name, band in metrics.items():
        if not isinstance(band, dict):
            raise UsageError(f"{where}: metric {name} must be a mapping (expected, fail_below, ...)")
        for limit, source in LIMITS:
            if band.get(limit) is None:
                continue
            if not band.get(source):
                raise UsageError(f"{where}: metric {name}: {limit} {band[limit]} has no {source} (every figure "
                                 "names where it comes from)")
            _limit(band[limit], name, limit, where)


def read_user_files(paths: Iterable[str | Path]) -> list[tuple[str, dict[str, Any]]]:
    """The user's baseline and profile files, each read and checked (UsageError, one line); a profile's name
    stands where a baseline file's SKU does."""
    out = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the baseline file ({exc.strerror})") from None
        data = _load_yaml(text, str(path), user=True)
        if "profile" in data:
            if not data.get("profile") or not isinstance(data["profile"], str):
                raise UsageError(f"{path}: 'profile' names the node type (profile: my-dgx-h100)")
            check_profile(data, str(path))
            data = {**data, "sku": data["profile"]}
        elif not data.get("sku") or not isinstance(data["sku"], str):
            raise UsageError(f"{path}: a baseline file needs 'sku: <VM size>' (and 'inherits: <SKU>' to start from "
                             "one), a node profile 'profile: <name>'")
        else:
            check_profile(data, str(path), SKU_KEYS)
        out.append((str(path), data))
    return out


def _band(name: str, values: Any, where: str, siblings: dict[str, Any]) -> Band:
    if not isinstance(values, dict):
        raise UsageError(f"{where}: metric {name} must be a mapping (expected, fail_below, ...)")
    unknown = set(values) - _BAND_KEYS
    if unknown:
        raise UsageError(f"{where}: metric {name}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    check_kind(name, values, where, siblings)
    return Band(name=name, **{k: (_limit(v, name, k, where) if k in LIMIT_NAMES and v is not None else v)
                              for k, v in values.items() if k != "note"})


def _build(sku: str, data: dict[str, Any], files: list[str]) -> Baseline:
    metrics = data.get("metrics") or {}
    bands = {str(name): _band(str(name), values, files[-1], metrics) for name, values in metrics.items()}
    xid = data.get("xid") or {}
    return Baseline(sku=sku, bands=bands, gpu_model=data.get("gpu_model"), driver_min=data.get("driver_min"),
                    topology=dict(data.get("topology") or {}), fatal_xids=[int(x) for x in xid.get("fatal", [])],
                    files=files, raw=data)


def _declared_gpu(layers: list[tuple[str, dict[str, Any]]]) -> GpuLayer | None:
    """The GPU model the SKU or profile names (`gpu: <model>`), the last that names one."""
    key = next((str(d["gpu"]) for _, d in reversed(layers) if d.get("gpu")), None)
    model = model_by_key(key) if key else None
    if model is None:
        return None
    return GpuLayer(model.key, model.title, f"named by {layers[-1][0]}", dict(model.metrics), model,
                    dict(model.peaks))


def _assemble(name: str, layers: list[tuple[str, dict[str, Any]]], gpu: GpuLayer | None) -> Baseline:
    """Defaults, then the GPU level, then each SKU / profile / user layer: a later one wins, band by band."""
    merged = _packaged().get("_defaults.yaml", ("", {}))[1]
    if gpu is not None:  # named by Baseline.gpu (and its key); `files` stays the SKU's and user's files
        merged = _merge(merged, {"metrics": gpu.metrics})
    for _, data in layers:
        merged = _merge(merged, {k: v for k, v in data.items() if k != "inherits"})
    base = _build(name, merged, [w for w, _ in layers] or ["gpuval:_defaults.yaml"])
    base.gpu, base.layers = gpu, layers
    return base


def _layers(sku: str | None, user: list[tuple[str, dict[str, Any]]]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The name judged and its layers: a profile wins over the SKU asked for (it names this node's type); with no
    SKU, the one SKU the user's files name."""
    packaged = _packaged()
    by_sku = {_key(data["sku"]): (where, data) for name, (where, data) in packaged.items() if not name.startswith("_")}
    profiles = [d for _, d in user if "profile" in d]
    if len(profiles) > 1:
        raise UsageError(f"one --profile at a time: {', '.join(d['profile'] for d in profiles)}")
    if profiles:
        sku = profiles[0]["profile"]
    if sku is None:
        named = {_key(d["sku"]) for _, d in user}
        if len(named) != 1:
            return UNKNOWN_SKU, []
        sku = user[0][1]["sku"]
    wanted = _key(sku)
    layers: list[tuple[str, dict[str, Any]]] = [by_sku[wanted]] if wanted in by_sku else []
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
    name = next((d["sku"] for _, d in reversed(layers) if _key(d["sku"]) == wanted), sku)
    return name, layers


def find_baseline(sku: str | None, extra_files: Iterable[str | Path] = ()) -> Baseline | None:
    """The baseline of `sku` (packaged, then the user's files on top; a `--profile` file names the node itself),
    with the GPU model it names beneath, or None when none is known.

    With no SKU and user files that name exactly one SKU, that one is used (a user's own machine type)."""
    return _find(sku, read_user_files(extra_files))


def _find(sku: str | None, user: list[tuple[str, dict[str, Any]]]) -> Baseline | None:
    name, layers = _layers(sku, user)
    if not layers:
        return None
    return _assemble(name, layers, _declared_gpu(layers))


def with_gpus(baseline: Baseline | None, gpus: Iterable[GpuIdentity]) -> Baseline:
    """The limits a node's (or one GPU's) figures are judged by: the GPU model found from the GPUs themselves (PCI
    device id, subsystem, default power; the NVML name as the fallback) and their host link, under the SKU's or
    profile's bands. Where the GPUs' model is unknown, the model the SKU names stands in; with neither, the link's
    bands alone, else the limits every SKU shares."""
    layer = gpu_layer(gpus)
    declared = baseline.gpu if baseline is not None else None
    if layer is not None and layer.model is None and declared is not None and not layer.key.startswith("mixed:"):
        layer = GpuLayer(f"{declared.key}/{layer.key}", declared.title, f"{layer.how}; {declared.how}",
                         {**layer.metrics, **declared.metrics}, declared.model, {**layer.peaks, **declared.peaks})
    if layer is None:
        return baseline or generic_baseline()
    return _assemble(baseline.sku if baseline else UNKNOWN_SKU, baseline.layers if baseline else [], layer)


def check_learned(paths: Iterable[str | Path], sku: str | None, gpus: list[GpuIdentity]) -> None:
    """A learned baseline (`gpuval baseline learn`: a file with `learned:`) judges only nodes of the SKU and GPU
    model it was learned from. Where learned files are given and none is this node's, a one-line UsageError (exit 2)
    says so, before anything is judged: never a node judged by another model's figures, never one silently judged
    by none of them. Files of other SKUs beside this node's own are for other nodes (a fleet's)."""
    learned = [(w, d) for w, d in read_user_files(paths) if isinstance(d.get("learned"), dict)]
    ours = [(w, d) for w, d in learned if sku is None or _key(d["sku"]) == _key(sku)]
    if learned and not ours:
        where, data = learned[0]
        raise UsageError(f"{where}: learned on {data['sku']} nodes; this node is {sku}: a learned baseline judges "
                         "only the SKU and GPU model it was learned from")
    if not ours or not gpus or any(_same_model(d, gpus) for _, d in ours):
        return
    where, data = ours[0]
    found = sorted({(identify(g)[0].title if identify(g)[0] else g.name) or "unknown GPU" for g in gpus})
    raise UsageError(f"{where}: learned from {data['learned'].get('population', {}).get('gpu_model', '?')} GPUs; "
                     f"this node's are {', '.join(found)}: a learned baseline judges only the GPU model it was "
                     "learned from")


def _same_model(data: dict[str, Any], gpus: list[GpuIdentity]) -> bool:
    """Whether every GPU is the model a learned file was learned from (its packaged model, else its NVML name)."""
    population = data["learned"].get("population")
    name = str(population.get("gpu_model") or "") if isinstance(population, dict) else ""
    key = data.get("gpu")
    for gpu in gpus:
        model = identify(gpu)[0]
        same = model.key == key if key and model is not None else bool(name) and gpu.name == name
        if not same:
            return False
    return True


def load_baseline(sku: str, extra_files: Iterable[str | Path] = ()) -> Baseline:
    """The baseline of `sku`; NoBaseline (a one-line error) when none is known."""
    found = find_baseline(sku, extra_files)
    if found is None:
        raise NoBaseline(f"no baseline for {sku}: known SKUs are {', '.join(packaged_skus())} "
                         "(add your own with --baseline FILE, or describe the node with --profile FILE)")
    return found


# Given a SKU (None: the record does not say), its baseline, or None when none is known.
BaselineSource = Callable[[str | None], Baseline | None]


def no_baselines(_sku: str | None) -> Baseline | None:
    """The source that knows no baseline: nothing is judged against one."""
    return None


def baseline_source(extra_files: Iterable[str | Path] = ()) -> BaselineSource:
    """THE baselines a command judges by: the packaged ones with the user's `--baseline` / `--profile` files on
    top, each SKU loaded once, by find_baseline's rule (a profile names the node type; with no SKU, the profile or
    the one SKU the user's files name, else none). The user's files are read and checked here, once: a bad one is
    refused (UsageError, exit 2) before the command does anything."""
    user = read_user_files(extra_files)
    cache: dict[str | None, Baseline | None] = {}

    def for_sku(sku: str | None) -> Baseline | None:
        sku = sku or None
        if sku not in cache:
            cache[sku] = _find(sku, user) if sku or user else None
        return cache[sku]

    return for_sku


def generic_baseline() -> Baseline:
    """The limits every SKU shares (_defaults.yaml), for a machine whose SKU has no baseline."""
    return _build(UNKNOWN_SKU, _packaged().get("_defaults.yaml", ("", {}))[1], ["gpuval:_defaults.yaml"])
