"""Reading streams: a file is read a piece at a time by every reader together, each test comes out
as soon as the next begins, overlong lines and CR-only files are handled, and a job's output is read line by line
as an engine streams it (printed JSON records behind a launcher's prefix included)."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuval.collectives.logtext import MAX_LINE
from gpuval.collectives.nccltests_parse import TextReader
from gpuval.engines.spec import JobSpec
from gpuval.results import Result, Status, Where
from gpuval.workloads.base import ResultContext, json_documents, printed_results
from gpuval.workloads.collective.job import read as nccl_read
from gpuval.workloads.ingest import iter_documents, text_chunks
from tests.conftest import DATA

TABLE = (DATA / "nccl-tests" / "ndv4-1node-allreduce.txt").read_text()


def test_each_test_comes_out_when_the_next_begins():
    reader = TextReader()
    assert reader.feed(TABLE) == []  # the test may go on
    [first] = reader.feed("# nThread 1 nGpus 1\n")  # a new test begins: the first is done, and handed over
    assert len(first.rows) == 31
    assert reader.feed(TABLE) == [] and len(reader.close()[0].rows) == 31


def test_a_file_is_read_in_pieces_of_whole_lines(tmp_path):
    path = tmp_path / "many.log"
    path.write_text(TABLE * 50)
    pieces = list(text_chunks(path, chunk=4096))
    assert len(pieces) > 50 and all(p.endswith("\n") for p in pieces) and "".join(pieces) == TABLE * 50
    assert sum(1 for _ in iter_documents(path)) == 50  # each copy begins at its column header: a test each


def test_overlong_lines_are_cut_and_cr_only_files_read(tmp_path):
    long = tmp_path / "long.log"
    long.write_text("x" * (3 * MAX_LINE) + "\n" + TABLE)
    pieces = list(text_chunks(long, chunk=1000))
    assert max(len(line) for p in pieces for line in p.splitlines()) <= MAX_LINE
    assert [len(d.table.rows) for _, d in iter_documents(long)] == [31]
    old_mac = tmp_path / "cr.log"
    old_mac.write_text(TABLE.replace("\n", "\r"))
    assert [len(d.table.rows) for _, d in iter_documents(old_mac)] == [31]


def _ctx() -> ResultContext:
    spec = JobSpec(name="j", command=["gpuval", "bench", "all_reduce", "-b", "8", "-e", "8G", "-f", "2"],
                   workload="nccl", gpus_per_node=8)
    return ResultContext(spec, "slurm", "42", "run", datetime.now(timezone.utc))


def test_job_output_is_read_line_by_line():
    lines = iter(("[1,0]<stdout>:" + line + "\n") for line in TABLE.splitlines())  # tag-output, as an MPIJob logs
    [record] = nccl_read(lines, _ctx())
    assert record.metric("busbw").value == 234.15 and record.where.job_id == "42"


def test_printed_records_are_found_one_document_at_a_time():
    record = Result(run_id="r", kind="health", name="ecc", status=Status.PASS, where=Where(hostname="n1"))
    pretty = record.model_dump_json(indent=2).splitlines(keepends=True)
    noise = ["NCCL INFO x\n", "[1,0]<stdout>:" + record.model_dump_json() + "\n", "{not json\n", "}\n"]
    docs = list(json_documents(iter(pretty + noise)))
    assert len(docs) == 2 and docs[0]["name"] == "ecc"
    [back] = printed_results(iter(pretty + noise), _ctx(), kind="health")
    assert back.where.engine == "slurm"
