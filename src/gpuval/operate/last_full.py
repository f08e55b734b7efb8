"""The last full health check of a node, kept on the node, and how a quick check folds it in.

A full `gpuval health` (every check, the measuring ones included) ends by writing its verdict to
`STATE_DIR/last-full/NODE.json` (STATE_DIR: GPUVAL_STATE_DIR, else gpuval's data directory; /var/lib/gpuval in the
Kubernetes pods). `gpuval health --quick` only reads (NVML, InfiniBand ports, the kernel log): it cannot see a slow
GEMM or a slow all_reduce, so without the full verdict a quick PASS would lift the drain a full FAIL set (both carry
the `gpuval:` prefix). The rule, one function (`fold`):

- no full check kept: the quick checks alone judge (the `last_full` record is skipped, and says so);
- a full check younger than the max age (7 days by default): its verdict is one more verdict of the quick run. A
  full FAIL keeps the node drained (or drains it: the full run may have had no rights to), with the full run's
  fault codes and run id; a full PASS or WARN lets the quick checks decide;
- an older one: reported, not judged (skipped); but a stale full FAIL still holds gpuval's drain: only a later full
  check that passes lifts what a full check's failure set;
- a file that cannot be read: `error` (could not read), so the quick run lifts nothing.

Only a full run that judged the hardware (pass, warn, fail) replaces what is kept: one that could not run (error)
or judged nothing (skipped) says nothing about the hardware, so a failure stays until a full check passes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable

from gpuval.errors import UsageError
from gpuval.operate.node_state import check_node, verdict_of
from gpuval.results.model import Result, Status

STATE_VARIABLE = "GPUVAL_STATE_DIR"
DEFAULT_MAX_AGE = timedelta(days=7)
JUDGED = (Status.PASS, Status.WARN, Status.FAIL)
MAX_FINDINGS = 10  # a full run's failed and warned checks kept with the verdict, each one line
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def state_dir() -> Path:
    """Where a node keeps its last full result: GPUVAL_STATE_DIR, else gpuval's data directory."""
    import platformdirs

    return Path(os.environ.get(STATE_VARIABLE) or platformdirs.user_data_path("gpuval"))


def path_for(node: str, directory: Path | None = None) -> Path:
    """The file of one node's last full result (the node name is one safe name: it is the file's name)."""
    return (directory or state_dir()) / "last-full" / f"{check_node(node)}.json"


def parse_age(text: str) -> timedelta:
    """'7d', '12h', '30m', '90s' or seconds -> a timedelta; anything else is a one-line error."""
    match = _AGE.fullmatch(str(text).strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"--max-age {text!r}: give a positive age such as 7d, 12h, 30m or 3600")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _age(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}".replace(".0 ", " ")
    return f"{seconds} s"


@dataclass(frozen=True)
class LastFull:
    """A node's last full health check: its verdict, the fault codes of what failed, and when it ended."""

    node: str
    run_id: str
    verdict: Status
    finished_at: datetime
    fault_codes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # "check: reason" of the failed and warned checks
    host: str = ""
    sku: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "node": self.node, "run_id": self.run_id, "verdict": self.verdict.value,
                "finished_at": self.finished_at.isoformat(), "fault_codes": self.fault_codes,
                "findings": self.findings, "host": self.host, "sku": self.sku}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastFull:
        finished = datetime.fromisoformat(str(data["finished_at"]))
        return cls(node=str(data["node"]), run_id=str(data["run_id"]), verdict=Status(data["verdict"]),
                   finished_at=finished if finished.tzinfo else finished.replace(tzinfo=timezone.utc),
                   fault_codes=[str(c) for c in data.get("fault_codes") or []],
                   findings=[str(f) for f in data.get("findings") or []], host=str(data.get("host") or ""),
                   sku=data.get("sku"))


def remember(records: Iterable[Result], node: str, directory: Path | None = None) -> LastFull | None:
    """Keep a full run's verdict for its node (atomic: written beside the file, then renamed over it). A run that
    judged nothing of the hardware (error, skipped) keeps nothing and returns None: the earlier verdict stays."""
    chosen = list(records)
    verdict, codes = verdict_of(chosen)
    if verdict not in JUDGED:
        return None
    findings = [f"{r.name}: {r.reason}" for r in chosen if r.status in (Status.FAIL, Status.WARN)]
    first = chosen[0]
    last = LastFull(node=node, run_id=first.run_id, verdict=verdict, fault_codes=codes,
                    finished_at=max(r.finished_at for r in chosen), findings=findings[:MAX_FINDINGS],
                    host=first.where.hostname, sku=first.where.sku)
    target = path_for(node, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, prefix=f".{target.name}.", delete=False) as tmp:
        json.dump(last.to_json(), tmp, indent=1)
    os.chmod(tmp.name, 0o644)  # root's HealthCheckProgram and the job's account both read it
    os.replace(tmp.name, target)
    return last


def recall(node: str, directory: Path | None = None) -> tuple[LastFull | None, str]:
    """The node's last full result, or (None, "") when none is kept, or (None, why) when it cannot be read."""
    try:
        target = path_for(node, directory)
    except UsageError as exc:
        return None, str(exc)
    try:
        return LastFull.from_json(json.loads(target.read_text())), ""
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{target}: {exc.strerror or exc}"
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, a field missing or of the wrong kind
        return None, f"{target}: not a gpuval last full result ({type(exc).__name__}: {exc})"


@dataclass(frozen=True)
class Fold:
    """What the last full result adds to a quick run: the status and reason of its `last_full` record, the fault
    codes it carries (of a fresh FAIL), the run id that finds them, and `hold`: why the quick verdict must not
    lift gpuval's drain ("" when it may)."""

    status: Status
    reason: str
    codes: list[str] = field(default_factory=list)
    run_id: str = ""
    hold: str = ""
    last: LastFull | None = None
    age_s: float | None = None

    def details(self) -> dict[str, Any]:
        """What the record keeps of the full result (data.details)."""
        if self.last is None:
            return {}
        return {"full_run_id": self.last.run_id, "full_verdict": self.last.verdict.value,
                "full_finished_at": self.last.finished_at.isoformat(), "age_s": self.age_s,
                "fault_codes": self.last.fault_codes, "findings": self.last.findings}


def fold(last: LastFull | None, problem: str, max_age: timedelta = DEFAULT_MAX_AGE,
         now: datetime | None = None) -> Fold:
    """The last full result judged for a quick run (the module's rule, in one place; pure)."""
    if problem:
        return Fold(Status.ERROR, f"could not read the last full check: {problem}")
    if last is None:
        return Fold(Status.SKIPPED, "no full check of this node kept yet: only the quick checks judged")
    age = (now or datetime.now(timezone.utc)) - last.finished_at
    said = f"last full check {last.run_id}, {_age(age)} ago: {last.verdict.value}"
    if last.fault_codes:
        said += f" ({' '.join(last.fault_codes)})"
    if age > max_age:
        hold = (f"the last full check ({last.run_id}) failed; only a full check that passes lifts its drain"
                if last.verdict is Status.FAIL else "")
        return Fold(Status.SKIPPED, f"{said}; older than --max-age {_age(max_age)}: reported, not judged",
                    hold=hold, last=last, age_s=age.total_seconds())
    detail = f": {'; '.join(last.findings)}" if last.findings and last.verdict is not Status.PASS else ""
    codes = last.fault_codes if last.verdict is Status.FAIL else []
    return Fold(last.verdict, said + detail, codes=codes, run_id=last.run_id, last=last,
                age_s=age.total_seconds())
