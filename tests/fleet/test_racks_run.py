"""What a fleet check's jobs carry back about NVL72 racks and how their jobs are built: a tray's NVLink domain from
its fabric check's record (the recorded GB200 tray, node/recorded/gb200-tray.yaml: its fabric from
leptonai/gpud#1106), its uptime and failed checks' codes from its node test, a rack test's ranks' proof of
multi-node NVLink read from their own NCCL logs (recorded GB200 lines, NVIDIA/nccl#2303), the rack test's job, and
the racks Slurm names (topology/block lines; a Kubernetes rack label: tests/fleet/test_run_kubernetes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuval.engines.slurm.nodes import topology_units
from gpuval.errors import UsageError
from gpuval.fleet.plan.expect import TestSizes, rack_spec
from gpuval.fleet.plan.terms import Round, Test
from gpuval.fleet.run.job import JobSettings, round_jobs
from gpuval.fleet.run.lines import JobEnd, RoundReader, line
from gpuval.fleet.run.racks_read import domain_of, proof_env, proof_fields
from gpuval.fleet.run.worker_request import RankTestRequest
from gpuval.engines.spec import JobState, JobStatus
from gpuval.results.model import Result, Status
from tests.conftest import DATA

RUN = "20261201T120000Z-7ac0b1"
TRAY_DOMAIN = "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"  # leptonai/gpud#1106's GB200 tray
END = JobEnd(JobStatus(job_id="7", engine="slurm", state=JobState.SUCCEEDED, exit_code=0))


def _tray_records(recording: str = "gb200-tray") -> list:
    """The records of the fabric and nvlink checks on a recorded GB200 tray (what its node test prints)."""
    from gpuval.workloads.health.run import HealthRequest, run_health

    run = run_health(HealthRequest(RUN, recorded=recording, checks=("fabric",), results=Path(os.devnull),
                                   repeats=1))
    return run.records


def test_a_node_test_carries_its_trays_nvlink_domain_uptime_and_failed_codes_back():
    records = _tray_records()
    assert domain_of(records) == TRAY_DOMAIN
    node = Test("r0-suite-0", "node", ("tray1",), 3, "suite")
    reader = RoundReader(Round(0, (node,)))
    out = [line("start", round=0, node="tray1")] + [
        line("health", round=0, node="tray1", record=r.model_dump(mode="json")) for r in records] + [
        line("suite", round=0, node="tray1", status="pass", reason="ok", uptime_s=61.5),
        line("samples", round=0, node="tray1", collective="all_reduce", busbw=[600.0, 601.0], hosts=["tray1"] * 4,
             ranks=4)]
    reader.feed(("tray1", raw + "\n") for raw in out)
    got = reader.result(node, END)
    assert (got.domain, got.uptime_s, got.health_codes) == (TRAY_DOMAIN, 61.5, ())
    failed = records[0].model_copy(update={"status": Status.FAIL})
    reader = RoundReader(Round(0, (node,)))
    reader.feed(("tray1", raw + "\n") for raw in [
        line("start", round=0, node="tray1"), line("health", round=0, node="tray1",
                                                   record=failed.model_dump(mode="json")),
        line("suite", round=0, node="tray1", status="fail", reason="x", uptime_s="soon"),
        line("samples", round=0, node="tray1", collective="all_reduce", busbw=[1.0], hosts=["tray1"], ranks=4)])
    got = reader.result(node, END)
    assert got.health_codes == ("FABRIC_NOT_READY",) and got.uptime_s is None  # a word is no uptime


def test_a_tray_in_no_domain_or_in_two_has_no_domain(tmp_path: Path):
    """Azure/azhpc-images#506's zeros (clique 0, an all-zero cluster UUID) and a tray whose GPU 3 registered into
    another clique: no domain (its fabric check fails it); no fabric record: none."""
    zero = tmp_path / "tray-unregistered.yaml"
    zero.write_text("based_on: gb200-tray\ngpu_defaults:\n  fabric: {state: completed, status: success, clique_id: 0, "
                    "cluster_uuid: 00000000-0000-0000-0000-000000000000}\n")
    assert domain_of(_tray_records(str(zero))) is None
    split = Result.model_validate_json(_tray_records()[0].model_dump_json())  # as a node test's line carries it
    split.data.details["fabric"]["3"]["clique_id"] = 4027
    assert domain_of([split]) is None
    assert domain_of([]) is None


def test_a_rack_tests_ranks_read_their_own_nccl_logs_into_its_proof(tmp_path: Path):
    """Each rank reads its own NCCL_DEBUG_FILE (named by its pid, as NCCL's %p makes it) with THE NCCL_DEBUG reader;
    the reader of the job's lines tallies the ranks' `nvlink` lines."""
    env = proof_env(tmp_path)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p")
    assert proof_fields(tmp_path) is None  # no NCCL log (gloo ranks): nothing said
    on = (DATA / "nccl-debug" / "mnnvl-on-gb200-nccl-issue2303.log").read_text()
    (tmp_path / f"nccl.tray1.{os.getpid()}").write_text(on)
    (tmp_path / "nccl.tray1.1").write_text("another rank's")
    mine = proof_fields(tmp_path)
    assert mine is not None and (mine["mnnvl"], mine["unregistered"]) == (True, 0)
    rack = Test("r1-rack-0", "group", ("tray1", "tray2"), 2, "rack")
    reader = RoundReader(Round(1, (rack,)))
    off = {"mnnvl": False, "nvls": True, "unregistered": 0, "evidence": "comm 0x1 rank 5 nRanks 8 ... MNNVL 0"}
    out = [line("start", round=1, test=rack.id, node=n, rank=r) for r, n in enumerate(("tray1", "tray2"))] + [
        line("nvlink", round=1, test=rack.id, node="tray1", rank=0, **{**mine, "nvls": True}),
        line("nvlink", round=1, test=rack.id, node="tray2", rank=5, **off),
        line("nvlink", round=1, test=rack.id, node="tray2", rank=6, mnnvl="yes", nvls=None, unregistered=0,
             evidence=""),
        line("samples", round=1, test=rack.id, node="tray1", collective="all_reduce", busbw=[800.0, 801.0],
             hosts=["tray1", "tray2"], ranks=8)]
    reader.feed((raw_node, raw + "\n") for raw, raw_node in zip(out, ["tray1", "tray2", "tray1", "tray2", "tray2",
                                                                       "tray1"]))
    got = reader.result(rack, END)
    assert reader.dropped.malformed == 1  # mnnvl "yes": no worker prints it
    proof = got.nvlink
    assert proof is not None and (proof.ranks, proof.mnnvl, proof.nvls) == (2, 1, 2) and proof.fell_back
    assert proof.evidence.endswith("MNNVL 0")  # the rank that fell back is quoted


def test_a_rack_test_job_asks_for_the_proof_at_the_rack_bands_size():
    from importlib import resources

    from gpuval.baselines import find_baseline
    from gpuval.engines import get_engine
    from gpuval.fleet.plan.expect import TestRanks, message_sizes

    profile = resources.files("gpuval.baselines") / "profiles" / "gb200_nvl72_tray.yaml"
    baseline = find_baseline(None, [str(profile)])
    ranks = TestRanks(4, 4)
    sizes = message_sizes(baseline, None, ranks)
    spec = rack_spec(baseline, sizes, ranks)
    assert (sizes.rack, spec.trays, spec.band.expected) == (8 * 1024**3, 18, 840.7)
    assert "coreweave/nccl-tests#43" in spec.band.source and "NVIDIA/aicr#2787" in spec.band.source
    assert rack_spec(baseline, TestSizes(1024, 1024), ranks).band is None  # --size elsewhere: judged by racks only
    rack = Test("r1-rack-0", "group", ("t1", "t2"), 16, "rack")
    pair = Test("r1-screen-1", "pair", ("h1", "h2"), 8, "screen")
    settings = JobSettings(run_id=RUN, sizes=sizes, gpus_per_node=4)
    site = get_engine("slurm", {}).site()
    jobs = {j.tests[0].id: j.spec.command for j in round_jobs(Round(1, (rack, pair)), settings, site)}
    asked = RankTestRequest.parse(jobs["r1-rack-0"][3:])
    assert (asked.nvlink, asked.size) == (True, 8 * 1024**3)
    assert "--nvlink" not in jobs["r1-screen-1"] and RankTestRequest.parse(jobs["r1-screen-1"][3:]).size == sizes.multi


def test_slurm_blocks_and_switches_are_read_from_scontrol_show_topology():
    """The lines topology/block prints (SchedMD/slurm src/plugins/topology/block/topology_block.c,
    `_print_topo_record`: `BlockName=%s BlockIndex=%u Nodes=%s BlockSize=%u`, `AggregatedBlock=` for an aggregate)
    and topology/tree's switch lines; the suite's Slurm 22.05 has no topology/block (added in 23.11), its tree
    lines are read from a real slurmctld in tests/fleet/test_run_slurm.py."""
    text = ("BlockName=b1 BlockIndex=0 Nodes=gb[001-018] BlockSize=18\n"
            "BlockName=b2 BlockIndex=1 Nodes=gb[019-036] BlockSize=18\n"
            "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=gb[001-036] BlockSize=36\n")
    nodes = [f"gb{i:03d}" for i in range(1, 37)] + ["hgx1"]
    found = topology_units(text, nodes, "BlockName")
    assert len(found) == 36 and found["gb018"] == "b1" and found["gb019"] == "b2" and "hgx1" not in found
    tree = "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=hgx[1-2]\nSwitchName=top Level=1 LinkSpeed=1 Switches=s1\n"
    assert topology_units(tree, ["hgx1"], "SwitchName", {"Level": "0"}) == {"hgx1": "s1"}
    assert topology_units(tree, ["hgx1"], "BlockName") == {}


def test_a_rack_label_is_refused_where_it_names_nothing():
    from gpuval.engines import get_engine

    with pytest.raises(UsageError, match="--rack-label names a Kubernetes node label"):
        get_engine("slurm", {}).site(rack_label="nvidia.com/gpu.clique")

