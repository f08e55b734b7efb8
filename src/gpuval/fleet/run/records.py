"""THE fleet Result factory: every measurement of a fleet check stored with the node it belongs to, and every
verdict, as records of kind "fleet" (data: results.data.FleetData).

- name "test", role "test": one record per node of each test (a pair's measurement is stored with both of its
  nodes, a group's with every member), status the test's evidence status, data the TestResult (per-cycle busbw
  samples, error, blame, could-not-run reason, health, a node test's GPU figures) and the evidence (its cause,
  shortfall, standard error, what it was judged against). These records are the check's raw data: `take_round()` replayed over them rebuilds the
  planner's knowledge (it is deterministic).
- name "node": one record per node, its fleet verdict (what `gpuval report` counts as the node's verdict), with its
  cause (data.cause) and fault codes (data.fault_codes); every verdict record carries its cause.
- name "link": a pair of nodes' verdict, stored with each of its two nodes.
- name "uplink": a switch uplink's verdict (where.hostname is the switch); name "group": a full-scale or bisection
  run's verdict (where.hostname its first node, data.members all).

The health records a node test printed keep their own kind ("health"), with the node's name as their host.
`where` is always built here from the names the check knows: building a record never asks which machine it runs on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from statistics import fmean
from typing import Any, Iterable

from gpuval.results import Metric, Result, Status, Where
from gpuval.fleet.plan.terms import Evidence, FleetVerdicts, Test, TestResult, Verdict


@dataclass(frozen=True)
class Origin:
    """Where a fleet record comes from: the check's run, engine and SKU; for a test's measurement also the job that
    ran it, its ranks and when it started (None: now)."""

    run_id: str
    engine: str
    sku: str | None = None
    job_id: str | None = None
    ranks: int | None = None
    started: datetime | None = None


def listed(nodes: tuple[str, ...]) -> list[str]:
    """A test's nodes as stored with each of them: a node or a pair by name; a group's members are stored once, in
    its group verdict record (a 4,096-node list on each of 4,096 records would make the store quadratic)."""
    return list(nodes) if len(nodes) <= 2 else []


def evidence_json(ev: Evidence) -> dict[str, Any]:
    """One judged test, for a record's data and `--json` (a group's nodes counted, not listed: see `listed`)."""
    return {"test": ev.test.id, "round": ev.round, "kind": ev.test.kind, "purpose": ev.test.purpose,
            "nodes": listed(ev.test.nodes), "node_count": len(ev.test.nodes), "status": ev.status.value,
            "cause": ev.cause.value, "shortfall": ev.shortfall, "se": ev.se, "figures": dict(ev.figures),
            "against": ev.against, "reason": ev.reason}


def fleet_record(origin: Origin, *, name: str, host: str, status: Status, reason: str, data: dict[str, Any],
                 metrics: list[Metric] | None = None, params: dict[str, Any] | None = None) -> Result:
    """One fleet record; `host` is the node (or switch) it belongs to."""
    now = datetime.now(timezone.utc)
    where = Where(hostname=host, sku=origin.sku, ranks=origin.ranks, engine=origin.engine, job_id=origin.job_id)
    return Result(run_id=origin.run_id, kind="fleet", name=name, started_at=origin.started or now, finished_at=now,
                  where=where, params=params or {}, metrics=metrics or [], status=status, reason=reason, data=data)


def measurement_records(test: Test, result: TestResult, ev: Evidence | None, *, origin: Origin,
                        size: int) -> list[Result]:
    """One record per node of a test (its measurement and its judgement, `size` bytes), from `origin` (the check's
    run, engine and SKU, the job that ran the test, its ranks)."""
    status = ev.status if ev else Status.ERROR if result.not_run else Status.SKIPPED
    reason = ev.reason if ev else result.not_run or result.error or "not judged"
    metrics = [Metric(name=f"{c}_busbw", value=fmean(s), unit="GB/s", size_bytes=size)
               for c, s in result.busbw.items() if s]
    data = {"role": "test", "subject": test.id, "members": listed(test.nodes), "round": ev.round if ev else None,
            "test": test.id, "purpose": test.purpose, "test_kind": test.kind,
            "samples": {c: list(s) for c, s in result.busbw.items()}, "error": result.error,
            "blame": list(result.blame), "not_run": result.not_run,
            "health": result.health.value if result.health else None, "health_reason": result.health_reason,
            "domain": result.domain, "uptime_s": result.uptime_s, "health_codes": list(result.health_codes),
            "nvlink": asdict(result.nvlink) if result.nvlink else None,
            "gpus": result.gpus.to_json() if result.gpus else None, "evidence": evidence_json(ev) if ev else None}
    params = {"test": test.id, "purpose": test.purpose, "nodes": listed(test.nodes), "node_count": len(test.nodes),
              "samples": test.samples, "size_bytes": size}
    return [fleet_record(origin, name="test", host=node, status=status, reason=reason, data=data, metrics=metrics,
                         params=params) for node in test.nodes]


def _verdict_record(origin: Origin, name: str, host: str, v: Verdict, rounds: int, **extra: Any) -> Result:
    data = {"role": "verdict", "subject": v.subject, "members": list(v.members), "verdict_kind": v.kind,
            "cause": v.cause.value, "rounds": rounds, "evidence": [evidence_json(e) for e in v.evidence], **extra}
    return fleet_record(origin, name=name, host=host, status=v.status, reason=v.reason, data=data)


def verdict_records(found: FleetVerdicts, run_id: str, engine: str, sku: str | None = None,
                    codes: dict[str, list[str]] | None = None) -> Iterable[Result]:
    """The check's verdicts as records: per node, per link (with each end), per switch uplink, per group run.
    `codes`: the fault codes of failed nodes (what a drain reason names)."""
    codes = codes or {}
    origin = Origin(run_id, engine, sku)
    for node, v in found.nodes.items():
        yield _verdict_record(origin, "node", node, v, found.rounds, fault_codes=codes.get(node, []))
    for v in found.links.values():
        for end in v.members:
            yield _verdict_record(origin, "link", end, v, found.rounds)
    for v in found.uplinks.values():
        yield _verdict_record(origin, "uplink", v.members[0], v, found.rounds)
    for v in found.groups:
        yield _verdict_record(origin, "group", v.members[0] if v.members else v.subject, v, found.rounds)
