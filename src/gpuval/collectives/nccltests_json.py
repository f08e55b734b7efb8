"""nccl-tests' `-J` JSON document (src/util.cu, JSON_FILE_VERSION 2), written with the same keys and quirks
(root as its printed "%6i" text, booleans as the strings "true"/"false") so tools that read nccl-tests JSON
read gpuval's."""

from __future__ import annotations

import math
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuval.collectives.table import Row, Side, Table

if TYPE_CHECKING:
    from gpuval.collectives.driver import BenchConfig, DeviceInfo

JSON_FILE_VERSION = 2
# the settings a -J document records; never the whole environment, which holds secrets (results.dsn.recorded_env)
ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_MCA_", "CUDA_", "GPUVAL_")


def _stamp(when: datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def document(
    cfg: BenchConfig, devices: list[DeviceInfo], table: Table, started: datetime, ended: datetime,
    nccl_version: int | None, env: list[str], errors: list[str] | None = None, argv: list[str] | None = None,
    notes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole -J document for one finished (or interrupted) sweep; `env` the settings it ran with, as the
    caller recorded them (ENV_PREFIXES, secrets hidden). `notes` (gpuval's own, under the key
    `gpuval`, which nccl-tests' readers ignore): the path that drove NCCL, what still differs, why a side is N/A
    (its `out_of_place` or `in_place` is then null)."""
    config: dict[str, Any] = {
        "nthreads": 1,
        "ngpus": 1,
        "minimum_bytes": cfg.min_bytes,
        "maximum_bytes": cfg.max_bytes,
    }
    config.update({"step_factor": cfg.step_factor} if cfg.step_factor > 1 else {"step_bytes": cfg.step_bytes})
    config.update(
        warmup_iters=cfg.warmup, iterations=cfg.iters, aggregated_iterations=cfg.agg_iters, validation=cfg.check,
        graph=cfg.graph, blocking_collectives=_bool(False), per_iter_timing=_bool(False), parallel_init=_bool(False),
    )
    results = []
    for row in table.rows:
        entry = row.to_json()
        entry["root"] = f"{row.root if row.root is not None else -1:6d}"
        entry["actual_iterations"] = cfg.iters
        entry["experiment_name"] = cfg.program
        results.append(entry)
    avg = table.average_busbw()
    return {
        "version": JSON_FILE_VERSION,
        "start_time": _stamp(started),
        "args": list(argv if argv is not None else sys.argv),
        "env": env,
        "nccl_version": nccl_version,
        "config": config,
        "devices": [d.to_json() for d in devices],
        "results": results,
        "out_of_bounds": {"count": table.total_wrong(), "okay": _bool(table.total_wrong() == 0)},
        "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked"},
        "errors": errors or [],
        "end_time": _stamp(ended),
        **({"gpuval": notes} if notes else {}),
    }


# ---- reading a -J document back -------------------------------------------------------------------------------


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number


def _dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, found {type(value).__name__}")
    return value


def _side_from_json(data: Any) -> Side | None:
    if not data:
        return None
    data = _dict(data)
    nwrong = data.get("nwrong")
    return Side(_finite(data.get("time", data.get("cpu_time", 0.0))), _finite(data["alg_bw"]),
                _finite(data["bus_bw"]), None if nwrong is None else _finite(nwrong))


def rows_from_json(results: list[dict[str, Any]]) -> list[Row]:
    """-J `results[]` entries as Rows (root may be nccl-tests' padded text or a number); a figure that is not a
    finite number is a ValueError."""
    rows = []
    for r in results:
        root = r.get("root")
        rows.append(Row(
            size=int(_finite(r["size"])), count=int(_finite(r["count"])), type=str(r["type"]), redop=r.get("redop"),
            root=int(str(root).strip()) if root is not None and str(root).strip() else None,
            out_of_place=_side_from_json(r.get("out_of_place")), in_place=_side_from_json(r.get("in_place")),
        ))
    return rows


def program_names(doc: dict[str, Any]) -> list[str]:
    """What names the program in a -J document: each result's experiment_name, then argv[0]."""
    args = doc.get("args")
    names = [r.get("experiment_name") for r in doc.get("results") or [] if isinstance(r, dict)]
    names += list(args)[:1] if isinstance(args, list) else []
    return [str(n)[-256:] for n in names if n]


def table_from_json(doc: dict[str, Any]) -> Table:
    """A -J document as a Table without its collective (TypeError, ValueError or KeyError when it is not one)."""
    results = doc.get("results") or []
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise TypeError("results must be a list of objects")
    oob, avg = _dict(doc.get("out_of_bounds")), _dict(doc.get("average_bus_bandwidth"))
    devices = doc.get("devices") if isinstance(doc.get("devices"), list) else []
    return Table(
        nranks=len(devices) or None, rows=rows_from_json(results),
        out_of_bounds=int(_finite(oob["count"])) if "count" in oob else None,
        avg_busbw=_finite(avg["bandwidth"]) if "bandwidth" in avg else None,
        hosts=list(dict.fromkeys(str(d["hostname"]) for d in devices if isinstance(d, dict) and d.get("hostname"))),
    )
