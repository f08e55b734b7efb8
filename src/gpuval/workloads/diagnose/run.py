"""`gpuval jobs diagnose`'s pipeline: from a running job to the nodes its symptoms point at.

1. Where the job runs (`Engine.placement`: its nodes and start, as the scheduler says); a job that cannot be
   reached (ended, unknown, no right to it, an engine that cannot reach inside a job) is `JobUnreachable`, a
   one-line "could not diagnose" error, exit 2.
2. Every node probed inside the job (`Engine.probe_nodes` running `gpuval jobs probe` there: the job's ranks on that
   node with their progress and stacks, the node's driver events since the job started, NCCL RAS's status, the
   ranks' Flight Recorder dumps where they look hung), each answer attributed to the node the engine sent the call
   to.
3. The job's output read per node (`Engine.node_lines`): the step records (gpuval.hooks), each rank placed on the
   node whose probe found it, else on the engine's node for its lines (`place`: an engine whose word disagrees
   with a probe's is not taken for any line); the NCCL_DEBUG lines placed the same way or by the pid NCCL prints
   (a line neither places judges no node, and is said). What is kept of the output is bounded per node and in all
   (output.py), whatever it claims.
4. The parts judged (diagnosis: stragglers, the hang with the Flight Recorder's analysis of every node's dumps,
   the NCCL network per node, the events) and the suspects nominated. Nothing here changes a node's state: a
   verdict is the fleet re-test's (gpuval.fleet.act.retests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from gpuval.diagnosis.comm import find_comm_slow
from gpuval.diagnosis.flight import analyze_dumps
from gpuval.diagnosis.hang import STALL_S, find_hang
from gpuval.diagnosis.job_diagnosis import JobDiagnosis, nominate
from gpuval.diagnosis.job_records import JobRecords, read_job_records
from gpuval.diagnosis.job_transport import transport_per_rank, unplaced
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.baselines.model import Baseline
from gpuval.engines.base import Engine, JobUnreachable
from gpuval.engines.probe import Placement, ProbeCall, ProbeOutput
from gpuval.errors import GpuvalError
from gpuval.workloads.diagnose.dumps import job_dumps
from gpuval.workloads.diagnose.output import JobOutput, keep
from gpuval.workloads.diagnose.probe import NodeProbe, read_probes


@dataclass(frozen=True)
class DiagnoseRequest:
    """What to diagnose and how: the job; `stall_s` without progress that makes a hang; the InfiniBand HCAs the
    job's nodes have (from --sku or --profile; None: sockets are not judged); whether to ask NCCL RAS, read
    stacks and get the Flight Recorder's dumps; each node's own time limit for its stacks, RAS and dumps; the run id
    its records and report carry."""

    job_id: str
    run_id: str
    stall_s: float = STALL_S
    expected_hcas: int | None = None
    ras: bool = True
    stacks: bool = True
    node_timeout_s: float = 10.0
    baseline: Baseline | None = None  # the nodes' SKU baseline: its all_reduce band judges the job's bus bandwidth
    flight: bool = True


def expected_hcas(baseline: Baseline | None) -> int | None:
    """The InfiniBand HCAs a node of the job has, from its SKU's baseline or profile (`ib_hcas`); None: unknown."""
    band = baseline.band("ib_hcas") if baseline is not None else None
    return int(band.expected) if band is not None and band.expected is not None else None


def probe_args(req: DiagnoseRequest, engine: Engine, placement: Placement) -> list[str]:
    """`gpuval jobs probe ...` as each node runs it: the job as its ranks know it (`Engine.rank_job_id`; where they
    know none, every rank started since the job did), since when, whose ranks (the job's owner, where the engine
    names it), which parts, and the stall that makes a node's ranks worth a Flight Recorder dump."""
    args = ["jobs", "probe", "--timeout", f"{req.node_timeout_s:g}", "--stall", f"{req.stall_s:g}"]
    rank_job = engine.rank_job_id(req.job_id)
    if rank_job is not None:
        args += ["--job", rank_job]
    if placement.started_at is not None:
        args += ["--since", f"{placement.started_at.timestamp():.3f}"]
    if placement.owner_uid is not None:
        args += ["--uid", str(placement.owner_uid)]
    return args + ([] if req.ras else ["--no-ras"]) + ([] if req.stacks else ["--no-stacks"]) + (
        [] if req.flight else ["--no-flight"])


def placement_of(engine: Engine, job_id: str) -> Placement:
    """Where the job runs (`Engine.placement`); whatever else keeps the engine from saying (an unknown id, no right
    to it, the engine unreachable) is JobUnreachable too, in one line."""
    try:
        return engine.placement(job_id)
    except JobUnreachable:
        raise
    except GpuvalError as exc:
        raise JobUnreachable(f"could not diagnose {engine.name} job {job_id}: {exc}") from exc


def render_probes(engine: Engine, req: DiagnoseRequest) -> list[ProbeCall]:
    """What `probe` would send (the dry run): one call per node of the job."""
    placement = placement_of(engine, req.job_id)
    return engine.render_probe(req.job_id, placement.nodes, probe_args(req, engine, placement))


def probe(engine: Engine, req: DiagnoseRequest) -> tuple[Placement, list[ProbeOutput], list[tuple[str, NodeProbe]]]:
    """(the placement, each node's output, the nodes' answers); no answer from any node is JobUnreachable."""
    placement = placement_of(engine, req.job_id)
    args = probe_args(req, engine, placement)
    outputs = list(engine.probe_nodes(req.job_id, placement.nodes, args, req.node_timeout_s * 3 + 90))
    answers = read_probes((o.node, line) for o in outputs for line in o.lines)
    if not answers:
        why = "; ".join(f"{o.node}: {o.problem or 'no answer in its output'}" for o in outputs)
        raise JobUnreachable(f"could not diagnose job {req.job_id}: no node of it answered ({why})")
    return placement, outputs, answers


def _placed(answers: list[tuple[str, NodeProbe]]) -> tuple[dict[int, str], dict[int, str]]:
    """(rank -> node, pid -> node) as the probes found them: each rank's newest process."""
    newest: dict[int, tuple[float, str]] = {}
    pids: dict[int, str] = {}
    for node, answer in answers:
        for rank in answer.ranks:
            ident = rank.identity
            pids[ident.pid] = node
            if ident.rank not in newest or ident.started > newest[ident.rank][0]:
                newest[ident.rank] = (ident.started, node)
    return {rank: node for rank, (_, node) in newest.items()}, pids


def job_lines(engine: Engine, job_id: str, ranks_at: dict[int, str] | None = None,
              pids_at: dict[int, str] | None = None) -> JobOutput:
    """The job's output read once, streaming, per node (`Engine.node_lines`), keeping only what its readers look at
    and no more than output.py's bounds, per node and in all (`ranks_at`, `pids_at`: where the probes found each
    rank and process, which place the lines the engine ties to no node); what is kept comes back in the output's
    order, with what was left out."""
    return keep(engine.node_lines(job_id), ranks_at, pids_at)


def place(lines: list[tuple[str | None, str]], ranks_at: dict[int, str]) -> tuple[
        list[tuple[str | None, str]], JobRecords, dict[int, str]]:
    """(the lines as placed, their step records, rank -> node): a rank a probe found on a node is on that node,
    whatever the engine's word on its lines; where that word disagrees with a probe for any rank, it is a layout
    the engine guessed wrong (srun's labels read with another step's layout), so it is taken for no line."""
    recs = read_job_records(lines, ranks_at)
    moved = sorted(r for r, node in ranks_at.items() if recs.node_of.get(r, node) != node)
    if moved:
        said = ", ".join(f"rank {r} on {recs.node_of[r]}, found on {ranks_at[r]}" for r in moved[:4])
        lines = [(None, line) for _, line in lines]
        recs = read_job_records(lines, ranks_at)
        recs.notes.insert(0, f"the engine's placement of the job's output disagrees with the probes ({said}): "
                             "each rank is placed where a probe found it")
    return lines, recs, {**recs.node_of, **ranks_at}


def diagnose(engine: Engine, req: DiagnoseRequest) -> JobDiagnosis:
    """The diagnosis of a running job, its suspects nominated."""
    placement, outputs, answers = probe(engine, req)
    return judge(req, engine.name, placement, outputs, answers, job_lines(engine, req.job_id, *_placed(answers)))


def judge(req: DiagnoseRequest, engine_name: str, placement: Placement, outputs: list[ProbeOutput],
          answers: list[tuple[str, NodeProbe]], output: JobOutput) -> JobDiagnosis:
    """The diagnosis from what the engine gave (the placement, each node's probe output and answer, the job's
    output as `job_lines` keeps it), its suspects nominated; nothing asked of the engine."""
    ranks_at, pids_at = _placed(answers)
    lines, recs, node_of = place(output.lines, ranks_at)
    answered = {node for node, _ in answers}
    diag = JobDiagnosis(req.job_id, engine_name, run_id=req.run_id, since=placement.started_at, node_of=node_of,
                        probed={o.node: "" if o.node in answered else (o.problem or "no answer in its output")
                                for o in outputs})
    probes = [(node, rank) for node, answer in answers for rank in answer.ranks]
    diag.world = recs.world() or max((r.identity.world for _, r in probes), default=0)
    diag.straggler = find_stragglers(recs.records, node_of, output.ranks_left)
    diag.comm = find_comm_slow(recs.records, node_of, req.baseline, output.ranks_left)
    dumps = job_dumps([(node, answer.dumps, answer.flight_problem) for node, answer in answers])
    if dumps.dumps:
        diag.flight, diag.flight_sources = analyze_dumps(dumps.dumps, diag.world or None), dumps.sources
    diag.hang = find_hang(probes, world=diag.world or None, ras=[a.ras for _, a in answers if a.ras],
                          node_of=node_of, stall_s=req.stall_s, flight=diag.flight)
    diag.transport = transport_per_rank(lines, req.expected_hcas, recs, pids_at)
    no_ras: dict[str, list[str]] = {}
    for node, answer in answers:
        diag.gpus[node] = answer.gpus
        if answer.events is not None:
            diag.events[node] = answer.events
        if answer.ras is not None:
            diag.ras[node] = answer.ras
        elif req.ras and answer.ras_problem:
            no_ras.setdefault(answer.ras_problem, []).append(node)
    diag.notes = recs.notes + output.notes + _unplaced_nccl(lines, pids_at)
    diag.notes += [f"{n}: not probed: {why}" for n, why in diag.probed.items() if why]
    diag.notes += [f"{node}: {note}" for node, answer in answers for note in answer.passed_over]
    diag.notes += [f"NCCL RAS not asked on {', '.join(nodes)}: {why}" for why, nodes in no_ras.items()]
    diag.notes += dumps.notes
    diag.suspects = nominate(diag)
    return diag


def _unplaced_nccl(lines: list[tuple[str | None, str]], pids_at: dict[int, str]) -> list[str]:
    """A note where NCCL lines judge no node: none placed them (srun's labels where Slurm cannot tell which step's
    layout they follow, an unlabelled output whose processes no probe found)."""
    count = unplaced(lines, pids_at)
    return [f"NCCL network: {count:,} NCCL line(s) not judged: no node of the job places them (the engine ties them "
            "to no node, and no probe found the process that printed them)"] if count else []


def watch(engine: Engine, req: DiagnoseRequest, interval_s: float, for_s: float,
          on_pass: Callable[[JobDiagnosis], None] = lambda _d: None) -> JobDiagnosis:
    """Diagnose every `interval_s` seconds for at most `for_s` seconds or until the job can no longer be reached
    (it ended); each diagnosis goes to `on_pass`, the last one is returned (the first failing is raised)."""
    deadline = time.monotonic() + for_s
    last: JobDiagnosis | None = None
    while True:
        try:
            found = diagnose(engine, req)
        except GpuvalError as exc:
            if last is None:
                raise
            last.notes.append(f"watch ended: {exc}")
            return last
        on_pass(found)
        last = found
        if time.monotonic() + interval_s > deadline:
            return last
        time.sleep(interval_s)
