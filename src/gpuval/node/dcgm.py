"""DCGM's diagnostic (`dcgmi diag -r 1|2|3 -j`): running it and reading its JSON, DCGM 3.x and 4.x.

DCGM 3.x wraps its tests in "DCGM GPU Diagnostic" and names a GPU by `gpu_id` (a string, "5"); DCGM 4.x wraps them
in "DCGM Diagnostic", names each entity by `entity_group` / `entity_id` (an integer) and gives each test a
`test_summary` (NVIDIA's schema: DCGM testing/python3/dcgm_diag_schema.json). A result's `info` is one
comma-joined string in 3.x and a list in 4.x. Statuses are Pass, Fail, Warn, Skip and Not Run (dcgmi/Diag.cpp).
A result that passes yet carries warnings is kept with them (DCGM #284: an allocation failure reported as Pass).
Text around the JSON (warnings printed before it) is ignored.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

from gpuval.node.machine import HardwareUnavailable

TIMEOUT_S = {1: 300, 2: 1200, 3: 3600}  # r1 takes seconds, r2 minutes, r3 up to a quarter hour per DCGM's docs
_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


@dataclass(frozen=True)
class DcgmWarning:
    """A warning of a result: DCGM's error id (DCGM_FR_*), category, severity and text."""

    text: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None


@dataclass
class DcgmResult:
    """One entity's (GPU's) result of one test."""

    gpu: int | None
    status: str  # pass | fail | warn | skip | not run
    info: list[str] = field(default_factory=list)
    warnings: list[DcgmWarning] = field(default_factory=list)


@dataclass
class DcgmTest:
    """One test (software, memory, pcie, diagnostic, targeted_power ...) and its per-GPU results."""

    category: str
    name: str
    status: str
    results: list[DcgmResult] = field(default_factory=list)


@dataclass
class DcgmDiag:
    """A `dcgmi diag -j` document."""

    schema: str  # "3.x" or "4.x"
    tests: list[DcgmTest] = field(default_factory=list)
    runtime_error: str | None = None
    driver: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "dcgm-diag", "schema": self.schema, "runtime_error": self.runtime_error, "driver": self.driver,
                "tests": [{"category": t.category, "name": t.name, "status": t.status,
                           "results": [{"gpu": r.gpu, "status": r.status, "info": r.info,
                                        "warnings": [w.__dict__ for w in r.warnings]} for r in t.results]}
                          for t in self.tests]}


_ORDER = ["fail", "warn", "pass", "skip", "not run"]


def _status(value: Any) -> str:
    text = str(value or "").strip().lower()
    return text if text in _ORDER else text or "not run"


def _gpu(result: dict[str, Any]) -> int | None:
    if "entity_id" in result and str(result.get("entity_group", "GPU")).upper() != "GPU":
        return None
    raw = result.get("entity_id", result.get("gpu_id"))
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _result(raw: dict[str, Any]) -> DcgmResult:
    info = raw.get("info") or []
    info = [info] if isinstance(info, str) else [str(i) for i in info]
    warnings = [DcgmWarning(str(w.get("warning", "")), w.get("error_id"), w.get("error_category"),
                            w.get("error_severity")) if isinstance(w, dict) else DcgmWarning(str(w))
                for w in raw.get("warnings") or []]
    return DcgmResult(_gpu(raw), _status(raw.get("status")), info, warnings)


def _worst(statuses: list[str]) -> str:
    return min(statuses, key=lambda s: _ORDER.index(s) if s in _ORDER else len(_ORDER)) if statuses else "not run"


def _document(text: str) -> dict[str, Any]:
    """The first JSON object in `text` that is a DCGM diagnostic."""
    decoder = json.JSONDecoder(strict=False)  # a pasted or wrapped output may break lines inside strings
    start = text.find("{")
    while start != -1:
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(doc, dict) and any(k in doc for k in _KEYS):
            return doc
        start = text.find("{", end)  # past this object: a key nested inside another document is not one
    raise HardwareUnavailable("dcgmi printed no diagnostic JSON: "
                              + (next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")))


def parse_diag(text: str) -> DcgmDiag:
    """A `dcgmi diag -j` output, 3.x or 4.x; HardwareUnavailable when it holds no diagnostic."""
    doc = _document(text)
    key = next(k for k in _KEYS if k in doc)
    body = doc[key] or {}
    diag = DcgmDiag("4.x" if key == "DCGM Diagnostic" else "3.x", runtime_error=body.get("runtime_error"),
                    driver=(doc.get("metadata") or {}).get("Driver Version Detected") or body.get("Driver Version Detected"))
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            results = [_result(r) for r in test.get("results") or [] if isinstance(r, dict)]
            summary = (test.get("test_summary") or {}).get("status")
            status = _status(summary) if summary else _worst([r.status for r in results])
            diag.tests.append(DcgmTest(str(category.get("category", "")), str(test.get("name", "")), status, results))
    return diag


def run_diag(exe: str, level: int, timeout_s: float | None = None) -> str:
    """`dcgmi diag -r LEVEL -j`; its output (it exits non-zero when a test fails, and still prints the JSON).
    HardwareUnavailable when it did not finish or printed nothing."""
    limit = timeout_s or TIMEOUT_S.get(level, 3600)
    try:
        done = subprocess.run([exe, "diag", "-r", str(level), "-j"], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise HardwareUnavailable(f"dcgmi diag -r {level} did not finish in {limit} s") from None
    if not done.stdout.strip():
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
        raise HardwareUnavailable(f"dcgmi diag -r {level}: {said}")
    return done.stdout
