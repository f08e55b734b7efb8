"""The one node verdict and its exit contract: 0 pass or warn, 1 any fail, 2 could not run or nothing judged."""

from __future__ import annotations

import pytest

from gpuval.results import Status
from gpuval.results.verdict import exit_code_of, node_verdict
from tests.helpers.records import record


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
    v = node_verdict(record(s, name=f"c{i}") for i, s in enumerate(statuses))
    assert (v.status, v.exit_code, exit_code_of(verdict)) == (verdict, code, code)


def test_a_failure_names_its_codes_and_what_could_not_run() -> None:
    v = node_verdict([record(Status.FAIL, name="ecc", code="ECC_DBE ECC_SBE"), record(Status.ERROR, name="ib_ports"),
                      record(Status.FAIL, name="pcie"), record(Status.PASS, name="clocks")])
    assert v.fault_codes == ("ECC_DBE", "ECC_SBE", "pcie")
    assert v.failed == ("ecc", "pcie") and v.could_not_run == ("ib_ports",)
    assert "could not run: ib_ports" in v.reason and v.judged


def test_nothing_judged_is_never_a_pass() -> None:
    v = node_verdict([record(Status.SKIPPED, name="ib_ports")])
    assert not v.judged and "nothing was judged" in v.reason
