"""One test inside an NVL72 rack weighed (its all_reduce, a pair of its trays), and each rack's verdict.

A rack's all_reduce is judged three ways, as the rest of the fleet's tests are (weighing.py), plus one:
- NCCL's own log must show multi-node NVLink and NVLS in use on every rank (`MNNVL 1` in each communicator's
  line, NVLS multicast available or connected, no GPU in `fabric UUID 0.0 cliqueId 0x0`; collectives.nccl_debug):
  a rack whose NCCL fell back to the network measures the network, never its NVLink: FAIL "fell back", never a
  pass; where no log was read (gloo ranks) the rack is not judged;
- against the SKU's rack band (the NVLink domain's all_reduce, baselines' `nvl_domain_allreduce_busbw_gbps`, each
  figure with its source) through the one judge, with the fleet's measured noise (`baselines.noisy.judge_mean`);
- against the other racks' median (one all_reduce per rack: an unbiased sample of the racks; 3 racks at least).
Tests of two trays inside a rack are judged against the other pairs of the same rack (a rack whose all_reduce
failed pairs all its trays), else pairs of two known-good trays of racks that passed (a tray that joined late): one
shape, so no assumption that two trays' busbw is a
full rack's (one GB200 tray reads 679.6 GB/s at 8 GiB, Azure/AI-benchmarking-guide, where a full rack reads 840:
busbw falls with fewer GPUs), and never a bad rack's pairs; with fewer than 3 such pairs, against the racks' median (busbw held independent of the rank count, nccl-tests doc/PERFORMANCE.md, as the
multi-node band is). The rack band judges full racks only.
"""

from __future__ import annotations

from statistics import fmean

from gpuval.baselines.noisy import judge_mean
from gpuval.diagnosis import stats
from gpuval.results.model import Status, worst_status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.knowledge import FleetKnowledge, NodeStage
from gpuval.fleet.plan.racks_book import Rack, RackStage
from gpuval.fleet.plan.terms import Evidence, Standing, Test, TestResult, Verdict
from gpuval.fleet.plan.weighing import classify

MIN_PEERS = 3  # tests of a kind before their median is a reference
RACK_NOT_SHOWN = ("MNNVL and NVLS not shown: NCCL's log of the rack's ranks was not read (gloo ranks, or no "
                  "NCCL_DEBUG output), so nothing says its NVLink carried the all_reduce")


def reference(state: FleetKnowledge, test: Test) -> tuple[float, str] | None:
    """The figure (GB/s) a rack test is judged against, and what it is; None with too few peers. A rack's all_reduce:
    the racks' median. Two trays of a rack: the median of the pairs of their own rack (the same shape, the same
    domain: a tray stands out against its rack-mates), else of pairs of two known-good trays of racks that passed
    (never any pair of another rack: a bad rack's would count), else the racks' median."""
    book = state.racks
    rack = book.rack(test.nodes[0])
    pairs = test.purpose != "rack"
    own = rack.pair_means if rack is not None and pairs else []
    for means, what in ((own, "pairs of this rack's trays"), (book.good_pairs if pairs else [],
                                                               "pairs of known-good trays of passed racks"),
                        (book.rack_means, "racks' all_reduce")):
        if len(means) >= MIN_PEERS:
            return stats.band(means).center, f"median of {len(means)} {what}"
    return None


def weigh_rack(state: FleetKnowledge, test: Test, result: TestResult, index: int) -> Evidence:
    """The evidence of one rack test: could not run, crashed, fell back, or its figure against the racks and the
    band (the band for a full rack only)."""
    def ev(status: Status, cause: Cause, reason: str, figures: dict[str, float] | None = None) -> Evidence:
        return Evidence(test, index, status, None, None, figures or {}, "", reason, cause=cause)

    if result.not_run:
        return ev(Status.ERROR, Cause.COULD_NOT_RUN, f"could not run: {result.not_run}")
    if result.error:
        blame = f" (reported on {', '.join(result.blame)})" if result.blame else ""
        return ev(Status.FAIL, Cause.CRASHED, f"ran and failed: {result.error}{blame}")
    samples = [x for s in result.busbw.values() for x in s]
    if not samples:
        return ev(Status.ERROR, Cause.COULD_NOT_RUN, "no figures came back")
    figures = {c: fmean(s) for c, s in result.busbw.items() if s}
    proof = result.nvlink
    if test.purpose == "rack" and proof is not None and proof.fell_back:
        return ev(Status.FAIL, Cause.FELL_BACK, f"NCCL fell back from multi-node NVLink: {proof.mnnvl} of "
                  f"{proof.ranks} ranks MNNVL 1, {proof.nvls} with NVLS, {proof.unregistered} GPUs in no NVLink "
                  f"domain" + (f" ({proof.evidence})" if proof.evidence else ""), figures)
    return _measured(state, test, samples, figures, index, proven=proof is not None)


def _measured(state: FleetKnowledge, test: Test, samples: list[float], figures: dict[str, float], index: int,
              proven: bool) -> Evidence:
    """A rack test with figures; a full rack's that passes without NCCL's word on NVLink (`proven`) is not judged."""
    cfg, mean = state.config, fmean(samples)
    se = state.calibration.se(len(samples))
    statuses, reasons, against = [], [], []
    d = d_se = None
    ref = reference(state, test)
    if ref is not None:
        d, d_se = 1.0 - mean / ref[0], se
        statuses.append(classify(d, se, cfg.cut, cfg))
        reasons.append(f"{100 * d:.1f}% ± {100 * se:.1f}% under the {ref[1]} (cut {100 * cfg.cut:.0f}%)")
        against.append(f"{ref[1]}: {ref[0]:.1f} GB/s")
    band = state.racks.spec.band
    if band is not None and test.purpose == "rack":
        judged = judge_mean(band.band, mean, se * mean, cfg.z, cfg.clear_z)
        statuses.append(judged.status)
        if d is None:
            d, d_se = 1.0 - mean / band.expected, se * mean / band.expected
        reasons.append(f"vs the rack band: {judged.reason} ({judged.status.value})")
        against.append(f"rack band {band.expected:.1f} GB/s ({band.source})")
    if not statuses:
        return Evidence(test, index, Status.SKIPPED, None, None, figures, "", "not judged: no rack band and fewer "
                        f"than {MIN_PEERS} racks to compare with", cause=Cause.NOT_JUDGED)
    status = worst_status(statuses)
    if status is Status.PASS and test.purpose == "rack" and not proven:
        return Evidence(test, index, Status.SKIPPED, d, d_se, figures, "; ".join(against),
                        "; ".join([*reasons, RACK_NOT_SHOWN]), cause=Cause.NOT_JUDGED)
    cause = Cause.SLOW if status is Status.FAIL else Cause.MEASURED
    return Evidence(test, index, status, d, d_se, figures, "; ".join(against), "; ".join(reasons), cause=cause)


# ---- each rack's verdict -----------------------------------------------------------------------------------------


def rack_verdicts(state: FleetKnowledge) -> tuple[Verdict, ...]:
    """One verdict per rack that has something to say (its all_reduce, a finding, its size, a debounce), as a
    group verdict named `rack NAME` with its trays as members."""
    out = []
    for name in sorted(state.racks.racks):
        rack = state.racks.racks[name]
        parts = [s for s in (_stage(state, rack), rack.size, _settled(state, rack)) if s is not None]
        if not parts:
            continue
        status = worst_status([p.status for p in parts])
        lead = next(p for p in parts if p.status is status)
        out.append(Verdict("group", f"rack {name}", tuple(rack.trays), status, "; ".join(p.reason for p in parts),
                           tuple(rack.evidence), cause=lead.cause))
    return tuple(out)


def _stage(state: FleetKnowledge, rack: Rack) -> Standing | None:
    if rack.standing is not None:
        return rack.standing
    nodes = state.nodes
    if rack.stage is RackStage.SPLIT:
        culprits = [t for t in rack.trays if nodes[t].state is NodeStage.FAILED
                    and nodes[t].cause in (Cause.SLOW, Cause.BROKEN)]
        open_ = [t for t in rack.trays if nodes[t].state in (NodeStage.SUSPECT, NodeStage.READY, NodeStage.UNDECIDED)]
        first = _first(rack)
        if culprits:
            return Standing(Status.FAIL, Cause.SLOW, f"its all_reduce failed ({first}); inside it "
                            f"{', '.join(culprits)} fail with known-good trays of the rack")
        return Standing(Status.WARN, Cause.UNDECIDED, f"its all_reduce failed ({first}); no tray of it was found "
                        f"to blame ({len(open_)} left undecided)")
    ready = [t for t in rack.trays if nodes[t].state is NodeStage.READY]
    if not ready:
        return None  # its trays failed or could not run their node tests: their verdicts say so
    return Standing(Status.SKIPPED, Cause.NOT_JUDGED, f"not judged: its all_reduce needs 2 trays, {len(ready)} "
                    "passed its node tests")


def _first(rack: Rack) -> str:
    """The reason of the rack's first all_reduce."""
    runs = [e for e in rack.evidence if e.test.purpose == "rack" and e.status is not Status.ERROR]
    return runs[0].reason if runs else "no all_reduce ran"


def _settled(state: FleetKnowledge, rack: Rack) -> Standing | None:
    """NVLink down right after its trays' boot and up after the settle time: one warning, nothing convicted."""
    trays = [t for t in rack.trays if t in state.racks.settled]
    if not trays:
        return None
    return Standing(Status.WARN, Cause.AFTER_REBOOT, f"NVLink or the fabric was down on {len(trays)} of its trays "
                    f"({', '.join(trays[:4])}{', ...' if len(trays) > 4 else ''}) within "
                    f"{state.config.settle_s:.0f} s of their boot and up after it: debounced, nothing convicted or "
                    "drained for it (links train after every boot: NVIDIA/NVSentinel#1715)")


def rack_explains(state: FleetKnowledge, node: str) -> Standing | None:
    """Why a tray of a rack found bad as a whole has no verdict of its own (None for every other node)."""
    rack = state.racks.rack(node)
    if rack is None or rack.stage is not RackStage.FAILED or rack.standing is None:
        return None
    if state.nodes[node].state in (NodeStage.FAILED, NodeStage.NOT_RUN, NodeStage.UNDECIDED):
        return None  # a verdict of its own (a tray that passed in pairs of a bad rack has none: its rack's is)
    return Standing(Status.SKIPPED, Cause.NOT_JUDGED, f"not judged on its own: rack {rack.name} is found bad as a "
                    f"whole ({rack.standing.cause.value}); see the rack's verdict")
