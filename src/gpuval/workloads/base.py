"""What every workload shares: the Workload a package declares, the request it is built from, the registry, reading
a job's output back, and `this_host()`, the only code that describes the machine gpuval runs on.

Every workload is one package with the same parts (workloads/lammps/ is a short example):

    run.py      what runs on a rank or a node (here, or as one rank of an engine's job)
    job.py      what it submits as a job: `WORKLOAD = Workload(name, help, build, read)`
    records.py  how its output becomes Result records (its one Result factory; `where` is always an argument)

`build(req)` turns a WorkloadRequest into a JobSpec (UsageError on bad input, before anything is sent); `read(lines,
ctx)` turns the job's output, line by line as the engine streams it (`Engine.log_lines`), into Result records ([]
when it holds nothing it can read); it never holds the whole output. Adding a workload is its package and one line
in WORKLOADS below.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Union

from pydantic import BaseModel, Field, ValidationError

from gpuval.collectives.logtext import clip, strip_prefix
from gpuval.engines.presets import preset_for
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher, Mount
from gpuval.errors import UsageError, validation_error
from gpuval.node import host
from gpuval.node.imds import detect_sku
from gpuval.results import Result, Status, Where, save_results, worst_status
from gpuval.results.pieces import MARK as PIECE_MARK
from gpuval.results.pieces import PieceJoiner
from gpuval.results.verdict import exit_code_of, node_verdict

if TYPE_CHECKING:
    from gpuval.engines.base import Engine
    from gpuval.node.machine import Machine

# name -> the module whose WORKLOAD it is: the one list of workloads, imported only when asked for.
WORKLOADS = {
    "nccl": "gpuval.workloads.collective.job",
    "health": "gpuval.workloads.health.job",
    "lammps": "gpuval.workloads.lammps.job",
    "train": "gpuval.workloads.train.job",
    "burn": "gpuval.workloads.burn.job",
}


class WorkloadRequest(BaseModel):
    """What the user asked for on `gpuval submit`: sizes, where, and the workload's own words."""

    workload: str
    name: str | None = None
    nodes: int = Field(1, ge=1)
    procs_per_node: int | None = Field(None, ge=1, description="Default: the workload's choice.")
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_proc: int | None = Field(None, ge=1)
    image: str | None = None
    sku: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    time_limit_min: int | None = Field(None, ge=1)
    shm_size: str | None = None
    launcher: Launcher | None = Field(None, description="Default: the workload's choice.")
    use: str | None = Field(None, description="Program variant, e.g. nccl-tests for the nccl workload.")
    args: list[str] = Field(default_factory=list, description="The workload's own arguments.")
    baselines: list[str] = Field(default_factory=list, description="The user's --baseline / --profile files "
                                 "(absolute paths): what judges the job's figures, here and on its nodes.")
    run_id: str = ""
    extras: dict[str, dict] = Field(default_factory=dict)


@dataclass(frozen=True)
class ResultContext:
    """What a results reader knows about the job whose output it reads."""

    spec: JobSpec
    engine: str
    job_id: str
    run_id: str
    started: datetime


NodeLines = Iterable[tuple[Union[str, None], str]]  # a job's output lines, each with the node that printed it


@dataclass(frozen=True)
class Workload:
    """One workload: its name, help line, spec builder and output reader; `read_nodes`, where each node prints
    records of itself (health, burn): the reader of the job's lines with the node the engine says printed each
    (`Engine.node_lines`), which `collect` uses instead of `read`."""

    name: str
    help: str
    build: Callable[[WorkloadRequest], JobSpec]
    read: Callable[[Iterable[str], ResultContext], list[Result]]  # the job's output, line by line
    read_nodes: Callable[[NodeLines, ResultContext], Any] | None = None  # a workloads.node_output.NodeRead


def get_workload(name: str) -> Workload:
    """One workload; an unknown name is a one-line error listing the known ones."""
    if name not in WORKLOADS:
        raise UsageError(f"unknown workload {name!r}; choose one of: {', '.join(sorted(WORKLOADS))}")
    return import_module(WORKLOADS[name]).WORKLOAD


def workloads() -> dict[str, Workload]:
    """Every workload, by name."""
    return {name: get_workload(name) for name in WORKLOADS}


class WorkloadArgs(argparse.ArgumentParser):
    """A workload's own arguments (the words after `--` on `gpuval submit`): bad ones are one line naming the
    workload, never an exit or a help page."""

    def __init__(self, workload: str) -> None:
        super().__init__(prog=workload, add_help=False, allow_abbrev=False)
        self.workload = workload

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.workload} workload arguments: {message}")


def base_spec(req: WorkloadRequest, command: list[str], launcher: Launcher, procs_per_node: int,
              env: dict[str, str] | None = None, pmi: bool = False) -> JobSpec:
    """The JobSpec every workload starts from: the request's sizes, image, SKU preset, env and mounts. Inside a
    job gpuval keeps its records in the job's folder and writes no results database: the submitting side reads the
    job's output and stores them (once, and never SQLite over a shared file system). `pmi`: the processes are MPI
    programs (LAMMPS, nccl-tests) that need the launcher's PMI."""
    merged = {"GPUVAL_RESULTS": "gpuval-results.jsonl", "GPUVAL_DB": "none", **(env or {})}
    if req.run_id:
        merged["GPUVAL_RUN_ID"] = req.run_id
    merged.update(req.env)  # the user's --env wins over everything
    try:
        return JobSpec(
            name=req.name or f"gpuval-{req.workload}", command=command, image=req.image, env=merged,
            nodes=req.nodes, procs_per_node=req.procs_per_node or procs_per_node, gpus_per_node=req.gpus_per_node,
            cpus_per_proc=req.cpus_per_proc, launcher=req.launcher or launcher, pmi=pmi,
            network=preset_for(req.sku) if req.sku else None, shm_size=req.shm_size, mounts=req.mounts,
            time_limit_min=req.time_limit_min, workload=req.workload, extras=req.extras,
            multi_node_nvlink=req.nodes > 1 and nvlink_trays(req.sku, req.baselines),
        )
    except ValidationError as exc:
        raise validation_error(exc, with_field=False) from None


def nvlink_trays(sku: str | None, files: list[str]) -> bool:
    """Whether the SKU's baseline or the user's profile says the job's nodes are trays of a multi-node NVLink domain
    (GB200/GB300 NVL72): its `fabric.multi_node_nvlink`, else the GPU model it names (`gpu: gb200`), as the fabric
    check reads them on a node (checks.fabric_domain.multi_node; what a node finds on itself, a GPU's clique, is not
    known here, before the job runs)."""
    if not (sku or files):
        return False
    from gpuval.baselines import find_baseline
    from gpuval.checks.fabric_domain import MULTI_NODE_MODELS

    base = find_baseline(sku, files)
    if base is None:
        return False
    declared = (base.raw.get("fabric") or {}).get("multi_node_nvlink")
    if declared is not None:
        return bool(declared)
    return base.gpu is not None and any(m in base.gpu.title.upper() for m in MULTI_NODE_MODELS)


def baseline_args(req: WorkloadRequest) -> list[str]:
    """The user's baseline files as `--baseline FILE` arguments of a gpuval command that judges on the job's nodes
    (health, burn): the nodes read the same files (a file system they share with this machine, or --mount)."""
    return [arg for path in req.baselines for arg in ("--baseline", path)]


# ---- reading a job's output back ------------------------------------------------------------------------------


Output = Union[str, Iterable[str]]  # a job's output: one string, or its lines as an engine streams them
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole) or a bracket
MAX_DOCUMENT = 16 * 1024**2  # a printed record is kilobytes; a "document" larger than this is not one


def output_lines(output: Output) -> Iterator[str]:
    """A job's output line by line, each with its line ending; one string is split at "\n" only (str.splitlines
    would also split at "\r", "\x0b", U+2028...: a node's `junk\r{...}` would start a line of its own)."""
    if isinstance(output, str):
        yield from io.StringIO(output)  # StringIO's newline is "\n": lines end there and nowhere else
        return
    for line in output:
        yield line if line.endswith(("\n", "\r")) else line + "\n"


def output_pieces(output: Output, size: int = 1024**2) -> Iterator[str]:
    """A job's output in pieces of whole lines of about `size` characters (what the log readers are fed)."""
    held: list[str] = []
    count = 0
    for line in output_lines(output):
        held.append(line)
        count += len(line)
        if count >= size:
            yield "".join(held)
            held, count = [], 0
    if held:
        yield "".join(held)


def _depth(line: str) -> int:
    """How many brackets the line opens, net (brackets inside JSON strings do not count)."""
    depth = 0
    for token in _JSON_TOKEN.findall(line):
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
    return depth


class DocumentReader:
    """The JSON arrays and objects that start lines of one source's output, line by line (`feed`): one document
    held at a time, a record written in pieces (results/pieces.py) read once its pieces are joined, a launcher's
    prefix such as Open MPI's `[1,0]<stdout>:` not part of the line."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.depth = self.size = 0
        self.pieces = PieceJoiner()

    def feed(self, raw: str) -> Iterator[object]:
        """The document this line ends, if any."""
        line = strip_prefix(clip(raw)) if not self.held else clip(raw)
        if not self.held and line.startswith(PIECE_MARK):
            line = self.pieces.add(line) or ""  # a record cut for its launcher, whole once its last piece is in
        if not self.held and line[:1] not in "[{":
            return
        self.held.append(line)
        self.size += len(line)
        self.depth += _depth(line)
        if self.depth > 0 and self.size < MAX_DOCUMENT:
            return
        text, self.held, self.depth, self.size = "".join(self.held), [], 0, 0
        try:
            yield json.loads(text)
        except (ValueError, RecursionError):
            return


def json_documents(output: Output) -> Iterator[object]:
    """Every JSON array or object that starts a line of the output (other lines are logs), read as the lines come
    (`DocumentReader`)."""
    reader = DocumentReader()
    for raw in output_lines(output):
        yield from reader.feed(raw)


def results_of(doc: object, kind: str | None) -> Iterator[Result]:
    """The Result records of one printed document (one record, a list, or an object with a `results` list)."""
    items = doc if isinstance(doc, list) else doc.get("results", [doc]) if isinstance(doc, dict) else []
    for item in items if isinstance(items, list) else []:
        try:
            record = Result.model_validate(item)
        except ValidationError:
            continue
        if kind is None or record.kind == kind:
            yield record


def printed_results(output: Output, ctx: ResultContext, kind: str | None = None) -> list[Result]:
    """Result records a job printed as JSON (one record, a list, or an object with a `results` list), of `kind`
    when given. They were built on the job's own nodes (their host is theirs); the reader adds what only the
    submitting side knows: the engine and the job id. A record printed twice (a line and a list) is kept once."""
    found: dict[str, Result] = {}
    for doc in json_documents(output):
        for record in results_of(doc, kind):
            record.where.job_id = ctx.job_id
            record.where.engine = ctx.engine
            found.setdefault(record.id, record)
    return list(found.values())


@dataclass
class Outcome:
    """A finished job: its last status and what its output measured; `read` says whether a workload's reader read
    the output (False for a job gpuval did not submit: there is nothing to judge)."""

    status: JobStatus
    results: list[Result] = field(default_factory=list)
    note: str = ""
    read: bool = True

    def to_json(self) -> dict[str, object]:
        """`gpuval jobs wait --json`: the job's status, its Result records, the note."""
        return {"job": self.status.model_dump(mode="json"),
                "results": [r.model_dump(mode="json") for r in self.results], "note": self.note}

    @property
    def verdict(self) -> Status:
        """THE node verdict over the job's records (results.verdict.node_verdict), worst with the job's own state:
        a job that did not succeed could not run (ERROR) unless a record failed; a job gpuval did not submit has
        only its state."""
        succeeded = self.status.state is JobState.SUCCEEDED
        judged = node_verdict(self.results).status if self.read else Status.PASS
        return judged if succeeded else worst_status([judged, Status.ERROR])

    @property
    def exit_code(self) -> int:
        """The exit contract of the verdict: 0 pass or warn, 1 a record failed, 2 the job did not succeed, a
        record could not run, or nothing was judged."""
        return exit_code_of(self.verdict)


def collect(engine: Engine, job_id: str, status: JobStatus, results_path: Path | None = None) -> Outcome:
    """Read the ended job's output with its workload's reader and save the records (JSON Lines and the store); a
    job gpuval did not submit has none to read."""
    record = engine.record(job_id)
    if record is None or not record.spec.workload:
        return Outcome(status, note="gpuval did not submit this job: no workload to read its output with", read=False)
    workload = get_workload(record.spec.workload)
    ctx = ResultContext(spec=record.spec, engine=engine.name, job_id=job_id, run_id=record.run_id or job_id,
                        started=record.submitted_at)
    note = ""
    if workload.read_nodes is not None:  # each node's records are its own: read with the node that printed them
        read = workload.read_nodes(engine.node_lines(job_id), ctx)
        found, note = read.results, read.note()
    else:
        found = workload.read(engine.log_lines(job_id), ctx)  # streamed: never the whole output in memory
    if found:
        save_results(found, results_path)
    none = f"the job's output holds no {workload.name} results"
    return Outcome(status, found, "; ".join(n for n in (note, "" if found else none) if n))


# ---- this machine ---------------------------------------------------------------------------------------------


def open_machine(recorded: str | None) -> Machine:
    """This machine (NVML + sysfs), or a recording (a packaged SKU or a YAML file)."""
    from gpuval.node.recorded import RecordedMachine
    from gpuval.node.sysfs import LinuxMachine

    return RecordedMachine.load(recorded) if recorded else LinuxMachine()


def this_sku(override: str | None = None) -> str | None:
    """This machine's SKU: the caller's (--sku), else GPUVAL_SKU, else Azure IMDS (asked once per process)."""
    return detect_sku(override)


def _gpus() -> tuple[str | None, int]:
    """GPU model and count from NVML; (None, 0) without a driver."""
    from gpuval.node.machine import HardwareUnavailable
    from gpuval.node.nvml import read_inventory

    try:
        inv = read_inventory()
    except HardwareUnavailable:
        return None, 0
    return (inv.gpus[0].name if inv.gpus else None), len(inv.gpus)


def this_host(ranks: int | None = None, engine: str | None = None, sku: str | None = None,
              gpu_model: str | None = None, gpu_count: int | None = None) -> Where:
    """The machine gpuval runs on, as a Where: the only code that reads this machine's identity (host name, SKU
    through IMDS, GPUs through NVML). Records of other machines (a job's nodes, an imported log) are given their
    Where by whoever knows it, never this. The SKU from the caller, else as `gpuval health` finds it, so every
    record of a run names the same SKU; GPUs from the caller or NVML."""
    if gpu_count is None:
        gpu_model, gpu_count = _gpus()
    return Where(
        hostname=host.hostname(), sku=this_sku(sku), gpu_model=gpu_model, gpu_count=gpu_count, ranks=ranks,
        engine=engine,
        job_id=host.job_of(os.environ) or None,
    )
