"""The one node verdict and its exit contract: 0 pass or warn, 1 any fail, 2 could not run or nothing judged."""

from __future__ import annotations

import pytest

from gpuval.results import Result, Status, Where
from gpuval.results.data import HealthData
from gpuval.results.verdict import exit_code_of, node_verdict


def _rec(name: str, status: Status, code: str = "") -> Result:
    return Result(run_id="r", kind="health", name=name, where=Where(hostname="n1"), status=status,
                  data=HealthData(fault_code=code))


@pytest.mark.parametrize("statuses, verdict, code", [
    ([Status.PASS, Status.PASS], Status.PASS, 0),
    ([Status.PASS, Status.WARN, Status.SKIPPED], Status.WARN, 0),
    ([Status.PASS, Status.ERROR], Status.ERROR, 2),
    ([Status.ERROR, Status.SKIPPED], Status.ERROR, 2),
    ([Status.ERROR, Status.FAIL, Status.PASS], Status.FAIL, 1),
    ([Status.SKIPPED, Status.SKIPPED], Status.SKIPPED, 2),
    ([], Status.SKIPPED, 2),
])
def test_the_verdict_and_its_exit_code(statuses: list[Status], verdict: Status, code: int) -> None:
    v = node_verdict(_rec(f"c{i}", s) for i, s in enumerate(statuses))
    assert (v.status, v.exit_code, exit_code_of(verdict)) == (verdict, code, code)


def test_a_failure_names_its_codes_and_what_could_not_run() -> None:
    v = node_verdict([_rec("ecc", Status.FAIL, "ECC_DBE ECC_SBE"), _rec("ib_ports", Status.ERROR),
                      _rec("pcie", Status.FAIL), _rec("clocks", Status.PASS)])
    assert v.fault_codes == ("ECC_DBE", "ECC_SBE", "pcie")
    assert v.failed == ("ecc", "pcie") and v.could_not_run == ("ib_ports",)
    assert "could not run: ib_ports" in v.reason and v.judged


def test_nothing_judged_is_never_a_pass() -> None:
    v = node_verdict([_rec("ib_ports", Status.SKIPPED)])
    assert not v.judged and "nothing was judged" in v.reason
