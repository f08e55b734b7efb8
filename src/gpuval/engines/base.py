"""One interface for every engine, after torchx's Scheduler, whose `submit` is `schedule(submit_dryrun(...))`.

    dryrun(spec) = render(spec, discover(spec))          what `--dry-run` writes (--output); what it prints is
                                                         the same spec rendered with every secret as *** (`shown`)
    submit(spec) = _send(render(spec, discover(spec)))   then records.save, once, here, naming `cluster_name()`

gpuval's record of a job is read through `record(job_id)` only: a record of another cluster, or of an earlier job of
the same id (`submitted_at`, the live job's submit time as the engine says), is not used (records.mismatch), and
`say` tells the user so (the CLI prints it; by default it is kept in `notes`).

`render` is pure: no side effect, and the same spec renders the same bytes (a job's unique name is a short hash
of the spec, which carries the run id, and of the options). `discover` is the one step that may ask the engine
something before rendering (Kubernetes: which job kinds the cluster serves); the dry run goes through it too, and
where nothing can be asked it says so in `Rendered.notes` (shown beside the dry run, never inside the files).
`_send` sends exactly what render produced. `status`, `log_lines`, `node_lines`, `logs`, `follow`, `wait` and
`cancel` talk to the engine about a job id; `statuses` about many at once. `node_lines` is torchx's `log_iter` for
every node at once: each line with the node that printed it, as the engine (never the line) says. `placement`,
`render_probe` and `probe_nodes` run a command inside a running job on each of its nodes (engines/probe.py): the
render apart from the send, as for jobs; a job they cannot reach is `JobUnreachable`, and `rank_job_id` says what
the job's ranks see as their job's id. `render_exclude` and `exclude` move a running job off nodes
(engines/exclude.py), the render apart from the send again. Beyond jobs, an engine hands out the fleet check's
view of it (`site`) and the client of its nodes (`node_client`), each refused by the base with the engine's
reason, and says on its class what tells a process that it runs on one of its nodes (`NODE_VARIABLES`,
`NODE_COMMAND`): the registry (engines/__init__.py) is one table of names and classes, and asks the class the
rest.

An engine module defines an options model (pydantic, each field documented where it is declared: the help of
`--opt KEY=VALUE`) and an `Engine` subclass. Options come from `--opt` on the command line and from
`JobSpec.extras[<engine name>]`; the spec's values win.
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Iterator, TextIO, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from gpuval.engines import records
from gpuval.engines.exclude import Exclusion
from gpuval.engines.inert import check_inert_tree
from gpuval.engines.nodes import NodeClient
from gpuval.engines.output import failure_lines, ordered_map
from gpuval.engines.polling import BlockedWatch, poll_delays
from gpuval.engines.probe import PROBE_TIMEOUT_S, PROBE_WIDTH, Placement, ProbeCall, ProbeOutput
from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EngineError, GpuvalError, UsageError


class JobUnreachable(EngineError):
    """A running job a command must reach inside (a probe of its nodes: `jobs diagnose`) cannot be reached: it ended
    or has not started, the engine does not know it, the caller may not start a process in it, or the engine runs
    nothing inside a job. The message is one line that says why (exit 2)."""


class EngineOptions(BaseModel):
    """Base of every engine's options: unknown keys are an error, not silently ignored, and no value carries a
    control character (options reach scripts and YAML)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _inert(cls, data: Any) -> Any:
        return check_inert_tree(data, "option") if isinstance(data, dict) else data


O = TypeVar("O", bound=EngineOptions)


def parse_options(model: type[O], raw: dict[str, Any], owner: str) -> O:
    """`raw` (`--opt` values) as `model`; the first problem is a one-line error that lists the known keys."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "option"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise UsageError(f"{owner} option {where}: {message} (options: {', '.join(model.model_fields)})") from None


@dataclass
class Facts:
    """What `discover` learnt from the engine before rendering: option values that replace an `auto` (e.g.
    Kubernetes kind), and notes on what it could not ask."""

    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Rendered:
    """What an engine sends: named files (sbatch script, manifests, job YAML), the objects behind them, the spec as
    rendered (with the default image where the engine filled one in), and where the job lives (its unique name,
    folder and output file where the engine has them)."""

    engine: str
    files: dict[str, str]
    spec: JobSpec
    objects: list[Any] = field(default_factory=list)
    job_name: str = ""
    workdir: str | None = None
    output: str | None = None
    notes: list[str] = field(default_factory=list)
    shown: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """All files, each under a `# ---- NAME` line when there are several."""
        return _joined(self.files)

    def shown_text(self) -> str:
        """What --dry-run prints: the files as `dryrun` rendered them for people, every secret as ***."""
        return _joined(self.shown)

    def write(self, directory: Path) -> list[Path]:
        """Write every file into `directory` (created), readable by their owner only: they hold the job's
        environment. Returns the paths."""
        return [records.write_private(directory / name, body) for name, body in self.files.items()]


def _joined(files: dict[str, str]) -> str:
    """Files as one text, each under a `# ---- NAME` line when there are several."""
    if len(files) == 1:
        return next(iter(files.values()))
    return "\n".join(f"# ---- {name}\n{body}" for name, body in files.items())


def unique_name(spec: JobSpec, options: EngineOptions, room: int = 45) -> str:
    """The job's name where the engine needs one per submission (Kubernetes objects, Azure ML jobs, local job
    folders): the spec's name (cut to `room` characters) and a short hash of the spec and options. The spec
    carries the run id, so each `gpuval submit` gets a new name and the dry run of a spec shows the same name its
    submit sends. The secrets of its environment are hashed as the dry run shows them (***): the name, which anyone
    who may list jobs reads, holds no trace of them, and the dry run's rendering for people gets the same name."""
    # a spec that leaves a later field at its default hashes as a spec of before that field did
    unset = {f for f in ("attributed", "multi_node_nvlink") if not getattr(spec, f)}
    shown = spec.with_secrets_hidden()
    digest = hashlib.sha256((shown.model_dump_json(exclude=unset) + options.model_dump_json()).encode()).hexdigest()
    return f"{spec.name[:room].rstrip('-')}-{digest[:6]}"


def check_timeout(timeout_s: float | None) -> float | None:
    """A wait limit is positive (or None: no limit); checked before a job is sent, so a bad one sends nothing."""
    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"--timeout {timeout_s:g}: give a number of seconds above 0")
    return timeout_s


class Engine(ABC, Generic[O]):
    """Where a JobSpec runs. Subclasses set `name` and `Options` and implement the abstract methods."""

    name: ClassVar[str]
    Options: ClassVar[type[EngineOptions]]
    POLL_S: ClassVar[float] = 10.0  # `wait`'s steady interval between status calls, once the first 8 s are past
    # What tells a process that it runs on one of this engine's nodes (engines.detect_scheduler: `health --drain`
    # without --scheduler): a variable the scheduler sets for what it runs there, else its command, installed there.
    # An engine with neither has no nodes of its own for gpuval to take out of service (`node_client` refuses).
    NODE_VARIABLES: ClassVar[tuple[str, ...]] = ()
    NODE_COMMAND: ClassVar[str] = ""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self._raw = dict(options or {})
        self.options: O = self._validate(self._raw)  # type: ignore[assignment]
        self._records: dict[str, records.JobRecord | None] = {}
        self.notes: list[str] = []
        self.say: Callable[[str], None] = self.notes.append  # what was not used, and why

    def _validate(self, raw: dict[str, Any]) -> EngineOptions:
        return parse_options(self.Options, raw, self.name)

    def options_for(self, spec: JobSpec, facts: Facts | None = None) -> O:
        """This engine's options with the spec's own extras on top, then what discovery found."""
        found = facts.options if facts else {}
        return self._validate({**self._raw, **spec.extra(self.name), **found})  # type: ignore[return-value]

    def site(self, sku: str | None = None, switch_label: str | None = None, rack_label: str | None = None) -> "Site":
        """The fleet check's view of this engine: an engines.site.Site (named, not imported: site.py imports this
        module), which picks nodes of `sku` and reads each node's switch and NVL72 rack from the node labels
        `switch_label` and `rack_label` where the engine can. The base refuses with the engine's reason
        (`no_site`)."""
        raise UsageError(self.no_site())

    def no_site(self) -> str:
        """Why a fleet check cannot run on this engine, and what to run instead."""
        return f"gpuval fleet check cannot run on the {self.name} engine: it cannot run a test on named nodes"

    def node_client(self) -> NodeClient:
        """The client that drains or taints this engine's nodes (fleet check --drain, health --drain, gpuval nodes),
        through this engine's options (Kubernetes: its cluster); an engine without a pool of nodes refuses."""
        raise UsageError(f"--drain: the {self.name} engine has no pool to take nodes out of (slurm, kubernetes)")

    def discover(self, spec: JobSpec, strict: bool) -> Facts:
        """Ask the engine what render needs to know (default: nothing). strict (submit): a question that cannot be
        answered is an error; not strict (dry run): it becomes a note and render assumes the default."""
        return Facts()

    @abstractmethod
    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        """What submit sends, with no side effect: the same spec and facts give the same bytes."""

    def dryrun(self, spec: JobSpec) -> Rendered:
        """What submit would send now: discovery where the engine can be asked, then render; `shown` is the same
        spec rendered with every secret of its environment as *** (before any shell or YAML quoting, which would
        otherwise hide a secret from a search of the rendered text)."""
        facts = self.discover(spec, strict=False)
        rendered = self.render(spec, facts)
        rendered.notes.extend(facts.notes)
        rendered.shown = self.render(spec.with_secrets_hidden(), facts).files
        return rendered

    def submit(self, spec: JobSpec) -> str:
        """Render (after discovery), send exactly that, remember the job (with the cluster it went to, asked
        first: a job sent always gets its record); returns the engine's job id."""
        rendered = self.render(spec, self.discover(spec, strict=True))
        cluster = self.cluster_name()
        job_id = self._send(rendered)
        record = records.JobRecord(
            engine=self.name, job_id=job_id, spec=rendered.spec, run_id=spec.env.get("GPUVAL_RUN_ID", ""),
            workdir=rendered.workdir, output=self._output_of(rendered, job_id), cluster=cluster)
        records.save(record)
        self._records[job_id] = record
        return job_id

    def cluster_name(self) -> str:
        """The cluster this engine sends to, as a job record names it ('' where the engine names none)."""
        return ""

    def submitted_at(self, job_id: str) -> datetime | None:
        """When the live job of this id was submitted, as the engine says (None: it knows no such job, or does not
        say)."""
        return None

    def record(self, job_id: str) -> records.JobRecord | None:
        """gpuval's record of this job: the one stored under its id, where it is this job's (records.mismatch:
        this cluster's, sent when the live job of the id was submitted); one that is not is not used, and said
        once (`say`). Read once per engine object."""
        if job_id not in self._records:
            found = records.load(self.name, job_id)
            why = records.mismatch(found, self.cluster_name(), self.submitted_at(job_id)) if found else ""
            if why:
                self.say(f"gpuval's record of {self.name} job {job_id} is not used: {why}")
                found = None
            self._records[job_id] = found
        return self._records[job_id]

    def mark_cancelled(self, job_id: str) -> None:
        """Remember, in the job's record where it has one, that the user cancelled it."""
        record = self.record(job_id)
        if record is not None:
            records.mark_cancelled(record)
            self._records[job_id] = record.model_copy(update={"cancelled": True})

    @abstractmethod
    def _send(self, rendered: Rendered) -> str:
        """Hand the rendered job to the engine; returns its job id."""

    def _output_of(self, rendered: Rendered, job_id: str) -> str | None:
        """The job's output file once its id is known (Slurm puts the id in the name)."""
        return rendered.output

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's state now."""

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """The state now of many jobs (the fleet polls a round's jobs with one call). Engines that can ask once for
        all of them do (Slurm: one squeue; Kubernetes: one list); this default asks job by job. A job the engine
        could not answer about is left out (its caller asks again later)."""
        found: dict[str, JobStatus] = {}
        for job_id in dict.fromkeys(job_ids):
            try:
                found[job_id] = self.status(job_id)
            except GpuvalError:
                continue
        return found

    @abstractmethod
    def log_lines(self, job_id: str) -> Iterator[str]:
        """The job's output so far, line by line (each with its line ending, split only at a newline), never all
        of it in memory."""

    @abstractmethod
    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        """The job's output so far as (node, line): each line with the scheduler's name of the node that printed
        it, as the engine knows it (a task's label, a pod's placement), never as the line says; None where the
        engine cannot tell (a line of the launcher's own)."""

    def placement(self, job_id: str) -> Placement:
        """Where the running job runs now: its nodes and its start, as the scheduler says; JobUnreachable where it
        does not run, or the engine cannot reach inside a job."""
        raise JobUnreachable(self.no_probe(job_id))

    def rank_job_id(self, job_id: str) -> str | None:
        """What the job's ranks see as their job's id (gpuval.node.host.job_of of their environment), by which a
        probe tells them from other jobs' ranks on a node; None where they see none the engine knows (the probe
        then takes every rank of the job's user started since the job did)."""
        return None

    def render_probe(self, job_id: str, nodes: list[str], args: list[str]) -> list[ProbeCall]:
        """The calls that run `gpuval ARGS` inside the job on each of `nodes` (what `--dry-run` prints; it may
        ask the engine where the job's processes are, as `discover` does, and sends nothing)."""
        raise JobUnreachable(self.no_probe(job_id))

    def _probe(self, call: ProbeCall, timeout_s: float) -> ProbeOutput:
        """Send one call; its output, or why there is none."""
        raise JobUnreachable(self.no_probe(call.node))

    def probe_nodes(self, job_id: str, nodes: list[str], args: list[str],
                    timeout_s: float = PROBE_TIMEOUT_S) -> Iterator[ProbeOutput]:
        """Run `gpuval ARGS` inside the job on each of `nodes` (PROBE_WIDTH at a time), exactly as render_probe
        renders it; each node's output in the order of `nodes`, the lines attributed to the node the call went to."""
        calls = self.render_probe(job_id, nodes, args)
        return ordered_map(lambda call: self._probe(call, timeout_s), calls, PROBE_WIDTH)

    def no_probe(self, job_id: str) -> str:
        """Why this engine cannot run a command inside job `job_id`."""
        return f"could not diagnose job {job_id}: the {self.name} engine cannot run a command inside a job"

    def render_exclude(self, job_id: str, nodes: list[str]) -> Exclusion:
        """How job `job_id` would be moved off `nodes` (engines/exclude.py): the steps as they would be sent, or the
        advice where this engine may not move it; it may ask the engine about the job, and sends nothing."""
        return Exclusion(job_id, self.name, list(nodes), list(nodes), advice=(
            f"the {self.name} engine cannot move a running job off nodes: send it again without "
            f"{', '.join(nodes)}"))

    def exclude(self, job_id: str, nodes: list[str]) -> Exclusion:
        """Move job `job_id` off `nodes`: exactly what render_exclude renders, sent step by step (nothing where it
        advises); a step the engine refuses is the exclusion's `problem`."""
        found = self.render_exclude(job_id, nodes)
        if found.steps and not found.advice:
            self._exclude(found)
        return found

    def _exclude(self, exclusion: Exclusion) -> None:
        """Send an exclusion's steps in order, setting `sent`, or `problem` at the first the engine refuses."""
        raise EngineError(f"the {self.name} engine renders no exclusion steps to send")

    def output_place(self, job_id: str) -> str:
        """Where the job's whole output is, for people: its file (the job record's), else how to see it."""
        record = self.record(job_id)
        if record is not None and record.output:
            return record.output
        return f"gpuval jobs logs {job_id} --on {self.name}"

    def explain(self, status: JobStatus) -> JobStatus:
        """A failed job's status with the lines of its output that say why and where the output is (the job's
        status as it is otherwise). Output that cannot be read is said, never raised: the failure is the news."""
        if status.state is not JobState.FAILED:
            return status
        try:
            why = failure_lines(self.log_lines(status.job_id))
            place = self.output_place(status.job_id)
        except (GpuvalError, OSError) as exc:
            why, place = [f"(the output could not be read: {exc})"], ""
        return status.model_copy(update={"why": why, "output": place})

    def logs(self, job_id: str) -> str:
        """The job's output so far as one string (the CLI's `jobs logs --json`); readers use log_lines."""
        return "".join(self.log_lines(job_id))

    def follow(self, job_id: str, out: TextIO, poll_s: float = 2.0) -> JobStatus:
        """Write the job's output to `out` as it runs, until it ends; returns the last status. Engines without a
        live stream write the output once the job has ended."""
        status = self.wait(job_id, poll_s=poll_s)
        out.writelines(self.log_lines(job_id))
        return status

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Ask the engine to stop the job."""

    def wait(self, job_id: str, timeout_s: float | None = None, poll_s: float | None = None) -> JobStatus:
        """Poll until the job ends (a failed job's status says why: `explain`), backing off (engines.polling) to
        a steady `poll_s` [default: the engine's POLL_S]; a timeout is an EngineError naming the last state seen."""
        check_timeout(timeout_s)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delays = poll_delays(self.POLL_S if poll_s is None else poll_s)
        blocked = BlockedWatch()
        while True:
            current = self.status(job_id)
            if current.state.done:
                return self.explain(current)
            if why := blocked.stuck(current):  # it would wait for ever; the job is the user's to cancel or change
                raise EngineError(f"job {job_id} cannot start: {why}. It is still queued: cancel it (gpuval jobs "
                                  f"cancel {job_id} --on {self.name}) or send it again asking for less")
            if deadline is not None and time.monotonic() > deadline:
                raise EngineError(f"job {job_id} still {current.state.value} after {timeout_s:.0f} s")
            time.sleep(next(delays))


def unknown(engine: str, job_id: str, detail: str) -> JobStatus:
    """A status for a job the engine cannot tell anything about."""
    return JobStatus(job_id=job_id, engine=engine, state=JobState.UNKNOWN, detail=detail)
