"""Per-rail runs: NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK as nccl-tests runs them (collectives/split.py says how
a rank's color is found), with a table per split instead of nccl-tests' one average over all of them, so a slow
rail or node stands out.

Each rank joins the whole job first (devices are listed with their split as nccl-tests' "Group" column), then
leaves it and joins the process group of its color, rendezvousing through the job's own store under a prefix per
color: the collective code runs unchanged on the sub-communicator. Every group measures at the same time; the
first rank of each group hands its -J document to rank 0 through the store; rank 0 prints a table per group with
its footer, a summary of the groups, and saves one record per group (params: split, split_group, split_ranks).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuval.collectives import nccltests_json, nccltests_text
from gpuval.collectives.driver import DeviceInfo, run_sweep
from gpuval.collectives.nccltests_parse import parse_json
from gpuval.collectives.split import groups
from gpuval.collectives.table import Table
from gpuval.errors import EngineError, GpuvalError
from gpuval.node.dist_env import DistEnv
from gpuval.results import save_results
from gpuval.workloads.base import this_host
from gpuval.workloads.collective.header import (
    check_root, device_info, emit, path_notes, print_header, recorded_env,
)
from gpuval.workloads.collective.rank import BenchRequest, join_bench
from gpuval.workloads.collective.records import collective_record
from gpuval.workloads.ranks import first_line, leave_group, require_torch

_KEY = "gpuval-split"


def _join_group(torch: Any, backend: str, members: list[int], rank: int, color: int, timeout_s: float) -> Any:
    """Leave the job's group, join the one of this color through the job's store; the store, kept for reports."""
    dist = torch.distributed
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    try:
        dist.init_process_group(backend, store=dist.PrefixStore(f"{_KEY}/{color}/", store), rank=members.index(rank),
                                world_size=len(members), timeout=timedelta(seconds=timeout_s))
    except Exception as exc:
        raise EngineError(f"rank {rank} could not join split group {color}: {first_line(exc)}") from None
    return store


def _document(req: BenchRequest, table: Table, devices: list[DeviceInfo], started: datetime, reason: str,
              notes: dict[str, Any]) -> dict[str, Any]:
    return nccltests_json.document(req.config, devices, table, started, datetime.now(timezone.utc), None,
                                   recorded_env(), [reason] if reason else [], req.argv, notes)


def run_split_rank(req: BenchRequest, env: DistEnv, spec: str) -> Table:
    """One rank of a split run; returns the table that decides this rank's exit code (rank 0: the worst group's).
    The header and device lines are the unsplit run's (header.py)."""
    torch = require_torch()
    cfg = req.config
    by_color = groups(spec, env.world_size)
    color = next(c for c, members in by_color.items() if env.rank in members)
    members = by_color[color]
    check_root(cfg, min(len(m) for m in by_color.values()), direct=False)  # a group of one: no sendrecv
    started = datetime.now(timezone.utc)
    joined = join_bench(torch, env, cfg)
    device, path = joined.device, joined.path
    gathered: list[Any] = [None] * env.world_size
    torch.distributed.all_gather_object(gathered, device_info(torch, env.rank, device, joined.placed))
    devices: list[DeviceInfo] = list(gathered)
    if env.rank == 0 and not req.quiet:
        print_header(cfg, devices, torch.__version__, device, path, {r: c for c, ms in by_color.items() for r in ms})
        emit(f"# {spec}: {len(by_color)} groups measured at once, a table each")
    store = _join_group(torch, joined.group, members, env.rank, color, cfg.timeout_s)
    table, reason = Table(collective=cfg.collective, nranks=len(members)), ""
    try:
        run_sweep(cfg, members.index(env.rank), len(members), device, lambda _row: None, table, path)
        torch.distributed.barrier()
    except GpuvalError as exc:
        reason = str(exc)
    except Exception as exc:  # a peer died, a timeout: keep torch's first line
        reason = f"rank {env.rank} (split group {color}): {first_line(exc)}"
    finally:
        if members.index(env.rank) == 0:
            doc = _document(req, table, [devices[r] for r in members], started, reason,
                            path_notes(cfg, device, path, [devices[r] for r in members]))
            store.set(f"{_KEY}/done/{color}", json.dumps(doc))
        leave_group(torch)
    if env.rank == 0:
        return _report(req, spec, store, by_color, devices, started, env.launcher)
    if reason:
        raise EngineError(reason)
    return table


def _collect(store: Any, by_color: dict[int, list[int]], timeout_s: float) -> dict[int, dict[str, Any]]:
    store.set_timeout(timedelta(seconds=timeout_s))
    return {c: json.loads(store.get(f"{_KEY}/done/{c}")) for c in by_color}


def _report(req: BenchRequest, spec: str, store: Any, by_color: dict[int, list[int]], devices: list[DeviceInfo],
            started: datetime, launcher: str) -> Table:
    """Rank 0: a table per group, a summary, -J documents and one record per group; the worst group's table."""
    cfg = req.config
    docs = _collect(store, by_color, cfg.timeout_s)
    tables = {c: parse_json(doc) for c, doc in docs.items()}
    for c, t in tables.items():
        t.collective, t.nranks = cfg.collective, len(by_color[c])
        if not req.quiet:
            emit(f"# Split group {c}: ranks {', '.join(map(str, by_color[c]))} on "
                  f"{', '.join(sorted({devices[r].hostname for r in by_color[c]}))}")
            for row in t.rows:
                emit(nccltests_text.row_line(row))
            for line in nccltests_text.footer_lines(t.total_wrong(), t.average_busbw(), cfg.program)[:2]:
                emit(line)
    if not req.quiet:
        emit("# Per split avg bus bandwidth: " + ", ".join(f"group {c} {t.average_busbw():g}" for c, t in tables.items()))
        emit(f"# Collective test concluded: {cfg.program}")
    _save(req, spec, docs, tables, by_color, devices, started, launcher)
    return min(tables.values(), key=lambda t: (-t.total_wrong(), t.average_busbw()))


def _save(req: BenchRequest, spec: str, docs: dict[int, dict[str, Any]], tables: dict[int, Table],
          by_color: dict[int, list[int]], devices: list[DeviceInfo], started: datetime, launcher: str) -> None:
    """-J: one document per group (NAME.group<c>.json beside --json NAME.json); the launching process's report is
    rank 0's group; one Result record per group."""
    if req.report_path:
        Path(req.report_path).write_text(json.dumps(docs[min(docs)], indent=2) + "\n")
    if req.json_path:
        base = Path(req.json_path)
        base.parent.mkdir(parents=True, exist_ok=True)
        for c, doc in docs.items():
            base.with_name(f"{base.stem}.group{c}{base.suffix or '.json'}").write_text(json.dumps(doc, indent=2) + "\n")
    if not req.record:
        return
    records = []
    for c, table in tables.items():
        errors = docs[c].get("errors") or []
        params = {**req.config.model_dump(), "split": spec, "split_group": c, "split_ranks": by_color[c]}
        where = this_host(ranks=len(by_color[c]), engine=launcher, sku=req.sku)
        records.append(collective_record(table, where, req.run_id, params, started, "; ".join(map(str, errors)),
                                         hosts=sorted({devices[r].hostname for r in by_color[c]})))
    save_results(records, Path(req.results_path) if req.results_path else None)
