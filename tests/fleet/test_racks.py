"""The planner's rack rules one by one on small simulated fleets (benchmarks/fleet_racks.py's model): where the racks
come from (the site, else the trays' NVLink domains), rack consistency (a tray in another domain, a rack of the wrong
size), NCCL's proof of multi-node NVLink (fell back, not shown), and the drain brake counting racks."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.fleet_isolation import expectation
from benchmarks.fleet_racks import BAND, TRAYS, RackFleet, make_rack_fleet
from gpuval.fleet.plan import Cause, FleetConfig, TestResult, new_fleet, plan_next, take_round, verdicts
from gpuval.fleet.plan.racks_book import RackSpec
from gpuval.fleet.plan.terms import FleetVerdicts, NvlinkProof
from gpuval.fleet.run.outcome import fault_codes
from gpuval.operate.brake import RACK_TOLERANCE, rack_faults, rack_reason
from gpuval.results.model import Status


def _run(fleet: RackFleet, spec: RackSpec) -> FleetVerdicts:
    state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups, spec)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, fleet.run(rnd))
    return verdicts(state)


def _racks(found: FleetVerdicts) -> dict[str, object]:
    return {g.subject: g for g in found.groups if g.subject.startswith("rack ")}


def test_racks_named_by_the_site_a_tray_in_another_domain_is_convicted_and_its_rack_tested_without_it():
    """Rack A is trays 0-16 and 18, rack B tray 17 and 19-35 (a label or block that is wrong for two trays): tray 18
    reports rack0001's NVLink domain in a rack whose other 17 trays report rack0000's."""
    fleet = make_rack_fleet(0, 2, 0, seed=1)
    given = {t: "A" if i < 17 or i == 18 else "B" for i, t in enumerate(fleet.nodes)}
    found = _run(fleet, RackSpec(given, "the node label example.com/rack", TRAYS, BAND))
    for tray in ("tray00017", "tray00018"):
        v = found.nodes[tray]
        assert (v.status, v.cause) == (Status.FAIL, Cause.NVL_DOMAIN), v.reason
        assert "registered in another NVLink partition, or the rack is named wrong" in v.reason
        assert fault_codes(v, []) == ["FLEET_NVL_DOMAIN"]  # what its drain names (append-only FleetFault)
    racks = _racks(found)
    assert set(racks) == {"rack A", "rack B"} and {g.status for g in racks.values()} == {Status.PASS}
    tested = [e for e in racks["rack A"].evidence if e.test.purpose == "rack"]
    assert len(tested[0].test.nodes) == 17 and "tray00018" not in tested[0].test.nodes
    assert found.racks["tray00018"] == "A"


def test_a_rack_of_the_wrong_size_is_named():
    """The racks are the trays' NVLink domains: 20 trays in one domain fail (two partitions share a name), 16 of a
    domain in the check warn (two trays out of the check, unavailable, or registered elsewhere)."""
    fleet = make_rack_fleet(0, 3, 0, seed=2)
    moved = fleet.racks["rack0002"][:2]
    for tray in moved:  # two of rack 2's trays report rack 0's domain
        fleet.rack_of[tray] = "rack0000"
    racks = _racks(_run(fleet, RackSpec(trays=TRAYS, band=BAND)))
    sizes = {len(g.members): (g.status, g.cause, g.reason) for g in racks.values()}
    assert sizes[20][:2] == (Status.FAIL, Cause.RACK) and "20 trays in it, more than the 18" in sizes[20][2]
    assert sizes[16][0] is Status.WARN and "16 trays in it, fewer than the 18" in sizes[16][2]
    assert sizes[18][0] is Status.PASS


class _FellBack(RackFleet):
    """Rack 1's NCCL falls back from multi-node NVLink (no IMEX channel: NCCL_MNNVL_ENABLE=2 unmet, MNNVL 0)."""

    def rack_test(self, test_id: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        found = super().rack_test(test_id, nodes, samples)
        if self.rack_of[nodes[0]] != "rack0001" or found.nvlink is None:
            return found
        ranks = found.nvlink.ranks
        return replace(found, nvlink=NvlinkProof(ranks, 0, ranks, 0, "comm 0x9a39870 rank 0 nRanks 72 nNodes 18 "
                                                                     "localRanks 4 localRank 0 MNNVL 0"))


def test_a_rack_whose_nccl_fell_back_from_nvlink_fails_and_never_passes():
    base = make_rack_fleet(0, 4, 0, seed=4)
    fleet = _FellBack(**{k: getattr(base, k) for k in RackFleet.__dataclass_fields__})
    found = _run(fleet, RackSpec(trays=TRAYS, band=BAND))
    [rack] = [g for g in _racks(found).values() if set(g.members) == set(fleet.racks["rack0001"])]
    assert (rack.status, rack.cause) == (Status.FAIL, Cause.FELL_BACK)
    assert "0 of 72 ranks MNNVL 1" in rack.reason and "MNNVL 0" in rack.reason
    assert {found.nodes[t].status for t in rack.members} == {Status.SKIPPED}  # the rack's fault, no tray convicted
    assert [g.status for g in _racks(found).values()].count(Status.PASS) == 3


class _NoLog(RackFleet):
    """gloo ranks: no NCCL log, nothing says what carried the all_reduce."""

    def rack_test(self, test_id: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        return replace(super().rack_test(test_id, nodes, samples), nvlink=None)


def test_a_rack_with_no_proof_of_nvlink_is_not_judged_and_its_trays_go_to_pair_tests():
    base = make_rack_fleet(0, 3, 0, seed=6)
    found = _run(_NoLog(**{k: getattr(base, k) for k in RackFleet.__dataclass_fields__}), RackSpec(trays=TRAYS,
                                                                                                     band=BAND))
    racks = _racks(found).values()
    assert {(g.status, g.cause) for g in racks} == {(Status.SKIPPED, Cause.NOT_JUDGED)}
    assert all("MNNVL and NVLS not shown" in g.reason for g in racks)
    assert {v.status for v in found.nodes.values()} == {Status.PASS}  # judged as any node: by their pair tests
    assert all(any(e.test.kind == "pair" for e in v.evidence) for v in found.nodes.values())


def test_the_brake_counts_trays_per_rack():
    rack_of = {f"t{i}": "R1" if i < 18 else "R2" for i in range(36)}
    failed = ["t0", "t1", "t2", "t18", "t19", "hgx7"]
    assert RACK_TOLERANCE == 2
    assert rack_faults(failed, rack_of) == {"R1": ["t0", "t1", "t2"]}  # two of R2 is what a rack tolerates
    assert rack_reason("t1", rack_faults(failed, rack_of), rack_of).startswith("3 trays of rack R1 fail at once")
    assert rack_reason("t18", rack_faults(failed, rack_of), rack_of) == ""
    assert rack_reason("hgx7", rack_faults(failed, rack_of), rack_of) == ""
