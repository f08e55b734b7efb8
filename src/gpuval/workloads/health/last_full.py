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
- a file that cannot be read: `error` (could not read), so the quick run lifts nothing. Read defensively, since
  the state folder may be writable by the accounts that run full checks: a regular file only (no FIFO, no symlink),
  at most MAX_BYTES and MAX_DEPTH levels of nesting, its `node` this node's, its verdict a judgement (pass, warn,
  fail: "skipped" would lift a drain), fault codes cut to a safe alphabet and counted, findings cut; the codes it
  re-checked only those a health check has (a FLEET_* code written into the file re-checks nothing);
- a judgement made against another baseline (another SKU or GPU model, `baseline_key`) is reported, not judged: a
  full FAIL by another SKU's figures says nothing of this node against its own.

Only a full run that judged the hardware (pass, warn, fail) replaces what is kept: one that could not run (error)
or judged nothing (skipped) says nothing about the hardware, so a failure stays until a full check passes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from gpuval.checks.suite import check_codes
from gpuval.errors import UsageError
from gpuval.operate.node_state import check_node, rechecked_codes, safe_codes, verdict_of
from gpuval.results.files import open_regular, write_beside
from gpuval.results.model import Result, Status

STATE_VARIABLE = "GPUVAL_STATE_DIR"
DEFAULT_MAX_AGE = timedelta(days=7)
JUDGED = (Status.PASS, Status.WARN, Status.FAIL)
MAX_FINDINGS = 10  # a full run's failed and warned checks kept with the verdict, each one line
MAX_FINDING = 500  # characters of one finding
MAX_CODES = 64
MAX_RECHECKED = 256  # gpuval's health checks have about 30 codes
LOCK_TIMEOUT_S = 30.0
MAX_BYTES = 1024 * 1024  # a kept result is a few kB; a bigger file is no result gpuval wrote
MAX_DEPTH = 8  # its JSON nests 2 levels; 200k "[" would end the reader in a RecursionError
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def state_dir() -> Path:
    """Where a node keeps its last full result: GPUVAL_STATE_DIR, else gpuval's data directory."""
    import platformdirs

    return Path(os.environ.get(STATE_VARIABLE) or platformdirs.user_data_path("gpuval"))


def path_for(node: str, directory: Path | None = None) -> Path:
    """The file of one node's last full result (the node name is one safe name: it is the file's name)."""
    return (directory or state_dir()) / "last-full" / f"{check_node(node)}.json"


def baseline_key(sku: str | None, gpu_model: str | None) -> str:
    """What a run was judged against when only its records say it (their SKU and GPU model name); a health run
    passes the baselines' own identity (`Baseline.key`: SKU or profile, GPU model, a digest of every band) instead.
    A quick run folds a kept judgement only under the same key."""
    return f"sku={sku or '-'} gpu={gpu_model or '-'}"


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
    baseline: str = ""  # baseline_key of what it was judged against
    rechecked: list[str] = field(default_factory=list)  # the codes of its checks that passed or warned (health's)

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "node": self.node, "run_id": self.run_id, "verdict": self.verdict.value,
                "finished_at": self.finished_at.isoformat(), "fault_codes": self.fault_codes,
                "findings": self.findings, "host": self.host, "sku": self.sku, "baseline": self.baseline,
                "rechecked": self.rechecked}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastFull:
        """A kept result from its JSON, every value cut to what gpuval writes (the file is not trusted)."""
        finished = datetime.fromisoformat(str(data["finished_at"]))
        sku = str(data["sku"])[:128] if data.get("sku") else None
        codes = data.get("fault_codes") or []
        findings = data.get("findings") or []
        rechecked = data.get("rechecked") or []
        if not all(isinstance(x, list) for x in (codes, findings, rechecked)):
            raise TypeError("fault_codes, findings and rechecked must be lists")
        return cls(node=str(data["node"]), run_id=str(data["run_id"])[:128], verdict=Status(data["verdict"]),
                   finished_at=finished if finished.tzinfo else finished.replace(tzinfo=timezone.utc),
                   fault_codes=safe_codes(codes)[:MAX_CODES],
                   findings=[str(f)[:MAX_FINDING] for f in findings[:MAX_FINDINGS]],
                   host=str(data.get("host") or "")[:255], sku=sku,
                   baseline=str(data.get("baseline") or baseline_key(sku, None))[:300],
                   rechecked=[c for c in safe_codes(rechecked)[:MAX_RECHECKED] if c in check_codes()])


def remember(records: Iterable[Result], node: str, directory: Path | None = None,
             baseline: str = "") -> LastFull | None:
    """Keep a full run's verdict for its node (atomic: written beside the file, then renamed over it), with what it
    was judged against (`baseline`: the baselines' own `Baseline.key`; from the records' SKU and GPU model where
    none is given). A run that judged nothing of the hardware (error, skipped) keeps nothing and returns None: the
    earlier verdict stays."""
    chosen = list(records)
    verdict, codes = verdict_of(chosen)
    if verdict not in JUDGED:
        return None
    findings = [f"{r.name}: {r.reason}" for r in chosen if r.status in (Status.FAIL, Status.WARN)]
    first = chosen[0]
    last = LastFull(node=node, run_id=first.run_id, verdict=verdict, fault_codes=codes,
                    finished_at=max(r.finished_at for r in chosen), findings=findings[:MAX_FINDINGS],
                    host=first.where.hostname, sku=first.where.sku,
                    baseline=baseline or baseline_key(first.where.sku, first.where.gpu_model),
                    rechecked=rechecked_codes(chosen))
    target = path_for(node, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    # root's HealthCheckProgram and the job's account both read it; the folder is never followed through a
    # symlink (root must not write where a job's account pointed it)
    write_beside(target.parent, target.name, json.dumps(last.to_json(), indent=1), 0o644)
    return last


@contextmanager
def node_lock(node: str, directory: Path | None = None, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
    """Hold the node's lock (flock on last-full/.NODE.lock) while reading the kept result and acting on the node:
    a quick check's resume and a full check's drain on the same node never interleave. Yields whether it was
    taken (False after `timeout_s`, or where the state folder cannot hold it: a pass then lifts nothing)."""
    try:
        folder = (directory or state_dir()) / "last-full"
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f".{check_node(node)}.lock", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    except (OSError, UsageError):
        yield False
        return
    try:
        yield _flock(fd, time.monotonic() + timeout_s)
    finally:
        os.close(fd)  # closing releases the lock


def _flock(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def _read_small(target: Path) -> str:
    """The file's text if it is a regular file (not a symlink, FIFO or device) of at most MAX_BYTES."""
    try:
        with open_regular(target) as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):  # a symlink, a FIFO or a device: never followed nor read
            raise ValueError(exc.strerror) from None
        raise
    if len(data) > MAX_BYTES:
        raise ValueError(f"over {MAX_BYTES} bytes")
    text = data.decode("utf-8", errors="replace")
    if _nested_deeper(text, MAX_DEPTH):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return text


def _nested_deeper(text: str, limit: int) -> bool:
    """Whether the JSON text nests deeper than `limit` (brackets inside strings not counted)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def recall(node: str, directory: Path | None = None) -> tuple[LastFull | None, str]:
    """The node's last full result, or (None, "") when none is kept, or (None, why) when it cannot be read or is
    not this node's judgement."""
    try:
        target = path_for(node, directory)
    except UsageError as exc:
        return None, str(exc)
    try:
        data = json.loads(_read_small(target))
        if not isinstance(data, dict):
            raise TypeError("not an object")
        last = LastFull.from_json(data)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{target}: {exc.strerror or exc}"
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # not JSON, a field missing or of wrong kind
        return None, f"{target}: not a gpuval last full result ({type(exc).__name__}: {str(exc)[:200]})"
    if last.node != node:
        return None, f"{target}: the result of node {last.node[:64]}, not of node {node}"
    if last.verdict not in JUDGED:
        return None, f"{target}: verdict {last.verdict.value!r} judged nothing of the hardware"
    return last, ""


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
    rechecked: list[str] = field(default_factory=list)  # codes a fresh full pass or warn re-checked

    def details(self) -> dict[str, Any]:
        """What the record keeps of the full result (data.details)."""
        if self.last is None:
            return {}
        return {"full_run_id": self.last.run_id, "full_verdict": self.last.verdict.value,
                "full_finished_at": self.last.finished_at.isoformat(), "age_s": self.age_s,
                "fault_codes": self.last.fault_codes, "findings": self.last.findings}


def fold(last: LastFull | None, problem: str, max_age: timedelta = DEFAULT_MAX_AGE,
         now: datetime | None = None, baseline: str | None = None) -> Fold:
    """The last full result judged for a quick run (the module's rule, in one place; pure). `baseline`: the
    quick run's `baseline_key`; a result judged against another is reported, not judged."""
    if problem:
        return Fold(Status.ERROR, f"could not read the last full check: {problem}")
    if last is None:
        return Fold(Status.SKIPPED, "no full check of this node kept yet: only the quick checks judged")
    age = (now or datetime.now(timezone.utc)) - last.finished_at
    said = f"last full check {last.run_id}, {_age(age)} ago: {last.verdict.value}"
    if last.fault_codes:
        said += f" ({' '.join(last.fault_codes)})"
    hold = (f"the last full check ({last.run_id}) failed; only a full check that passes lifts its drain"
            if last.verdict is Status.FAIL else "")
    if age > max_age:
        return Fold(Status.SKIPPED, f"{said}; older than --max-age {_age(max_age)}: reported, not judged",
                    hold=hold, last=last, age_s=age.total_seconds())
    if baseline is not None and baseline != last.baseline:
        return Fold(Status.SKIPPED, f"{said}; judged against another baseline ({last.baseline}; this run: "
                    f"{baseline}): reported, not judged", hold=hold, last=last, age_s=age.total_seconds())
    detail = f": {'; '.join(last.findings)}" if last.findings and last.verdict is not Status.PASS else ""
    codes = last.fault_codes if last.verdict is Status.FAIL else []
    return Fold(last.verdict, said + detail, codes=codes, run_id=last.run_id, last=last,
                age_s=age.total_seconds(), rechecked=last.rechecked if last.verdict is not Status.FAIL else [])
