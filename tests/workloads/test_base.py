"""workloads/base: this_host() is the only code that describes this machine (its SKU from GPUVAL_SKU or IMDS, asked
once per process); the registry, printed records and collect are exercised through the engines' tests."""

from __future__ import annotations

from gpuval.workloads.base import this_host


def test_where_names_the_sku_imds_reports_asking_once_per_process(imds_server, monkeypatch):
    """bench/lammps/train records get their SKU from this_host(): the same detection as `gpuval health` (a local IMDS
    stand-in here), asked once per process; GPUVAL_SKU and the caller's SKU still win."""
    monkeypatch.setenv("GPUVAL_IMDS_ENDPOINT", imds_server())
    assert this_host(gpu_count=0).sku == "Standard_ND96isr_H100_v5"
    assert this_host(ranks=8, engine="slurm", gpu_count=0).sku == "Standard_ND96isr_H100_v5"
    assert len(imds_server.hits) == 1
    assert this_host(gpu_count=0, sku="Standard_ND96asr_v4").sku == "Standard_ND96asr_v4"
    monkeypatch.setenv("GPUVAL_SKU", "Standard_ND40rs_v2")
    assert this_host(gpu_count=0).sku == "Standard_ND40rs_v2"


def test_where_without_imds_has_no_sku():
    assert this_host(gpu_count=0).sku is None  # conftest: IMDS is a closed port on 127.0.0.1


def test_this_host_takes_what_the_caller_knows():
    where = this_host(ranks=4, engine="mpirun", sku="Standard_ND96asr_v4", gpu_model="A100", gpu_count=8)
    assert (where.ranks, where.engine, where.sku, where.gpu_model, where.gpu_count) == (
        4, "mpirun", "Standard_ND96asr_v4", "A100", 8)


def test_records_of_other_machines_never_ask_this_one(monkeypatch, tmp_path):
    """Imported logs and a job's output are given their `where`: building their records reads neither NVML nor
    IMDS (a login node with GPUs of its own must not leak into them)."""
    from datetime import datetime, timezone

    from gpuval.node import imds
    from gpuval.workloads import base, ingest
    from tests.conftest import DATA
    from tests.engines.specs import nccl_spec

    def refuse(*_a, **_k):
        raise AssertionError("this machine was asked")

    monkeypatch.setattr(base, "_gpus", refuse)
    monkeypatch.setattr(imds, "imds_vm_size", refuse)
    monkeypatch.setattr(base, "this_host", refuse)
    for log in (DATA / "nccl-tests" / "ndv4-1node-allreduce.txt", DATA / "lammps" / "log.29Sep21.lj.debian.2",
                DATA / "nccl-debug" / "socket-ib-disabled-azureml.log"):
        found = ingest.import_file(log, ingest.Origin("r", sku="Standard_ND96asr_v4"))
        assert found.error is None and found.records, log
        assert all(r.where.engine == "import" for r in found.records)
    ctx = base.ResultContext(spec=nccl_spec(), engine="slurm", job_id="1", run_id="r",
                             started=datetime.now(timezone.utc))
    [record] = base.get_workload("nccl").read((DATA / "nccl-tests" / "ndv4-2node-allreduce.txt").read_text(), ctx)
    assert record.where.engine == "slurm" and record.where.gpu_count == 8


def test_printed_records_keep_their_host_and_are_read_once():
    """A job's records were built on its nodes: the reader keeps their host and adds only the engine and job id;
    a record printed twice (a JSON line and a --json list) is one record."""
    from datetime import datetime, timezone

    from gpuval.workloads.base import ResultContext, printed_results
    from tests.engines.specs import nccl_spec
    from tests.helpers.records import record

    line = record(host="node-7").model_dump_json()
    output = f"gpuval health: node-7\n{line}\n  PASS ecc\n[{line}]\n"
    ctx = ResultContext(spec=nccl_spec(), engine="slurm", job_id="42", run_id="r", started=datetime.now(timezone.utc))
    [back] = printed_results(output, ctx, kind="health")
    assert (back.where.hostname, back.where.engine, back.where.job_id) == ("node-7", "slurm", "42")
    assert printed_results(output, ctx, kind="lammps") == []


def test_a_nodes_records_are_its_own_as_read_and_one_string_splits_at_newlines_only():
    """`node_results`: each record named by the node the engine says printed it, whatever host it names, with the
    job's run id; dated within the job's run or when read; a record on no node's line dropped; a piece of one node
    never completes another's. `output_lines` of one string ends a line at "\\n" only."""
    from datetime import datetime, timedelta, timezone

    from gpuval.results.pieces import MARK
    from gpuval.workloads.base import ResultContext, output_lines
    from gpuval.workloads.node_output import node_results
    from tests.engines.specs import nccl_spec
    from tests.helpers.records import record

    started = datetime.now(timezone.utc) - timedelta(minutes=1)
    ctx = ResultContext(spec=nccl_spec(), engine="slurm", job_id="42", run_id="20260101T000000Z-abcdef",
                        started=started)
    own = record(host="machine", name="ecc", at=started + timedelta(seconds=5)).model_dump_json()
    claims_n1 = record(host="n1", name="gpu_count", at=datetime(2099, 1, 1, tzinfo=timezone.utc)).model_dump_json()
    nowhere = record(host="n1", name="xid").model_dump_json()
    half = f"{MARK} k1 0/2 {own[:40]}\n"
    read = node_results([("n2", own + "\n"), ("n2", claims_n1 + "\n"), (None, nowhere + "\n"), ("n1", half),
                         ("n2", f"{MARK} k1 1/2 {own[40:]}\n")], ctx, kind="health")
    by_name = {r.name: r for r in read.results}
    assert sorted(by_name) == ["ecc", "gpu_count"] and {r.where.hostname for r in read.results} == {"n2"}
    assert all(r.run_id == ctx.run_id and r.where.job_id == "42" for r in read.results)
    assert by_name["ecc"].finished_at == started + timedelta(seconds=5)  # plausible: kept
    assert by_name["gpu_count"].finished_at.year == datetime.now(timezone.utc).year  # 2099: dated when read
    assert (read.unplaced, read.retimed) == (1, 1) and "dropped" in read.note() and "dated when read" in read.note()
    assert list(output_lines("a\rb\x0bc\u2028d\ne")) == ["a\rb\x0bc\u2028d\n", "e"]


def test_every_workload_has_the_same_parts():
    """One package per workload, each with run.py, job.py (its WORKLOAD) and records.py."""
    from importlib import import_module
    from importlib.util import find_spec

    from gpuval.workloads.base import WORKLOADS, get_workload

    for name, module in WORKLOADS.items():
        package = module.rsplit(".", 1)[0]
        assert module.endswith(".job") and get_workload(name).name == name
        for part in ("run", "job", "records"):
            assert find_spec(f"{package}.{part}") is not None, f"{package}.{part}"
        assert import_module(module).WORKLOAD.read is not None
