"""DCGM as an optional source: `gpuval health --dcgm 1|2|3` runs `dcgmi diag -r LEVEL -j` and judges each of
its tests per GPU (DCGM 3.x and 4.x JSON). Without --dcgm the check is skipped and says how to ask for it; without
dcgmi it is skipped and says it is not installed."""

from __future__ import annotations

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, worst
from gpuval.node.dcgm import DcgmResult, DcgmTest, parse_diag
from gpuval.node.machine import ToolMissing
from gpuval.results.model import Status

_STATUS = {"fail": Status.FAIL, "warn": Status.WARN}


def _who(r: DcgmResult) -> str:
    return f"GPU {r.gpu}" if r.gpu is not None else "the node"


def _findings(test: DcgmTest) -> list[tuple[Status, str]]:
    """A failed or warned result, named by GPU and DCGM's warning; a result that passed with warnings warns
    (DCGM #284: an allocation failure reported as Pass)."""
    found = []
    for r in test.results:
        said = "; ".join(w.text.strip() + (f" (DCGM error {w.error_id})" if w.error_id is not None else "")
                         for w in r.warnings)
        if r.status in _STATUS:
            found.append((_STATUS[r.status], f"{test.name} {_who(r)}: {r.status}" + (f": {said}" if said else "")))
        elif r.status == "pass" and said:
            found.append((Status.WARN, f"{test.name} {_who(r)}: passed with a warning: {said}"))
    if not found and test.status in _STATUS:  # a test that failed as a whole, no result saying why
        found.append((_STATUS[test.status], f"{test.name}: {test.status}"))
    return found


@check("dcgm_diag", "DCGM_DIAG")
def dcgm_diag(ctx: CheckContext, me: Check) -> CheckResult:
    """NVIDIA DCGM's diagnostic (dcgmi diag -r 1|2|3), asked with --dcgm: each DCGM test's verdict per GPU."""
    level = ctx.dcgm_level
    if level is None:
        raise NotApplicable("not asked: gpuval health --dcgm 1|2|3 runs dcgmi diag at that level")
    if ctx.machine.tool("dcgmi") is None:
        raise ToolMissing(f"--dcgm {level}: dcgmi is not installed on {ctx.machine.description} (NVIDIA DCGM, "
                          "package datacenter-gpu-manager)")
    diag = parse_diag(ctx.machine.dcgm_diag(level))
    if diag.runtime_error:
        return me.result(Status.ERROR, reason=f"could not run: dcgmi diag -r {level}: {diag.runtime_error}")
    ran = [t for t in diag.tests if t.status not in ("skip", "not run")]
    tests = [{"name": t.name, "category": t.category, "status": t.status,
              "failed_gpus": [r.gpu for r in t.results if r.status == "fail"]} for t in diag.tests]
    if not ran:
        return me.result(Status.SKIPPED, reason=f"dcgmi diag -r {level} ran no test: all {len(diag.tests)} were "
                                                "skipped or not run", tests=tests, schema=diag.schema)
    findings = [f for t in diag.tests for f in _findings(t)]
    status, reason = worst(findings)
    failed = sum(1 for t in ran if t.status == "fail")
    passed = sum(1 for t in ran if t.status == "pass")
    return me.result(status, failed, 0, "tests failed",
                     reason or f"dcgmi diag -r {level}: {passed} of {len(ran)} tests passed "
                     f"({len(diag.tests) - len(ran)} skipped), DCGM {diag.schema} JSON",
                     tests=tests, schema=diag.schema, level=level)
