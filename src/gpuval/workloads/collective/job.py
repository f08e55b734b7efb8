"""The `nccl` workload: a collective sweep as a job, with gpuval's own bench (`gpuval bench`, which reads its
rank from whatever engine started it) or nccl-tests' `*_perf` binaries (`--use nccl-tests`, when the image has
them). Its arguments are nccl-tests' own: `[COLLECTIVE] [-b 8] [-e 8G] [-f 2] [-n 20] [-z 1] ...`; without them,
all_reduce from 8 B doubling to the size `gpuval validate` stops at on the job's devices (default_args).
"""

from __future__ import annotations

from pydantic import ValidationError

from gpuval.collectives.driver import BenchConfig
from gpuval.collectives.nccltests_parse import TextReader
from gpuval.collectives.sizes import format_size, parse_size
from gpuval.collectives.table import Table
from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError, validation_error
from gpuval.results import Result, Where
from gpuval.workloads.base import (
    Output, ResultContext, Workload, WorkloadArgs, WorkloadRequest, base_spec, output_pieces,
)
from gpuval.workloads.collective.records import collective_record

DEFAULT_ARGS = ["all_reduce", "-b", "8", "-e", "8G", "-f", "2"]
USES = ("gpuval", "nccl-tests")

# nccl-tests' flags that both programs take, with BenchConfig's field and how to read the value.
_FLAGS = {
    "-b": ("min_bytes", parse_size), "-e": ("max_bytes", parse_size), "-f": ("step_factor", int),
    "-i": ("step_bytes", parse_size), "-n": ("iters", int), "-w": ("warmup", int), "-m": ("agg_iters", int),
    "-c": ("check", int), "-o": ("op", str), "-d": ("dtype", str), "-r": ("root", int), "-a": ("average", int),
    "-z": ("blocking", int),
    "-N": ("cycles", int),
}
_SIZE_FIELDS = {"min_bytes", "max_bytes", "step_bytes"}


def _parser() -> WorkloadArgs:
    parser = WorkloadArgs("nccl")
    parser.add_argument("collective", nargs="?", default="all_reduce")
    for flag, (dest, _) in _FLAGS.items():
        parser.add_argument(flag, dest=dest)
    return parser


def parse_args(args: list[str]) -> BenchConfig:
    """BenchConfig from nccl-tests style arguments; bad ones are a one-line UsageError."""
    parsed = vars(_parser().parse_args(args or DEFAULT_ARGS))
    values = {"collective": parsed.pop("collective")}
    for flag, (dest, convert) in _FLAGS.items():
        if parsed.get(dest) is not None:
            try:
                values[dest] = convert(parsed[dest])
            except ValueError:
                raise UsageError(f"nccl workload arguments: {flag} {parsed[dest]!r} is not a number") from None
    try:
        config = BenchConfig(**values)
    except ValidationError as exc:
        raise validation_error(exc, "nccl workload arguments", with_field=False) from None
    config.sizes()  # -b above -e fails here, before anything is sent
    return config


def flags(config: BenchConfig) -> list[str]:
    """The nccl-tests flags that reproduce a config (both programs read the same)."""
    defaults = BenchConfig(collective=config.collective)
    out: list[str] = []
    for flag, (dest, _) in _FLAGS.items():
        value = getattr(config, dest)
        if value != getattr(defaults, dest) or dest in ("min_bytes", "max_bytes", "step_factor"):
            out += [flag, format_size(value) if dest in _SIZE_FIELDS else str(value)]
    return out


def default_args(req: WorkloadRequest) -> list[str]:
    """Without arguments, all_reduce from 8 B doubling to the size of the band that judges an all_reduce over the
    job's nodes and ranks (baselines.allreduce_size: the SKU's or the user's files', else 1 GiB) on GPUs, 64 MiB on
    CPU ranks."""
    from gpuval.baselines import allreduce_size, baseline_source

    baseline = baseline_source(req.baselines)(req.sku)
    ranks = req.nodes * (req.procs_per_node or max(req.gpus_per_node, 1))
    top = allreduce_size(baseline, req.nodes, ranks, on_gpus=req.gpus_per_node > 0)
    return ["all_reduce", "-b", "8", "-e", format_size(top), "-f", "2"]


def build(req: WorkloadRequest) -> JobSpec:
    """One process per GPU (at least one per node), under MPI: srun --mpi, mpirun, Azure ML MPI, MPIJob."""
    use = req.use or "gpuval"
    if use not in USES:
        raise UsageError(f"nccl workload: --use {use!r}; choose one of: {', '.join(USES)}")
    config = parse_args(req.args or default_args(req))
    if use == "nccl-tests":
        command = [config.program, *flags(config), "-g", "1"]
    else:
        command = ["gpuval", "bench", config.collective, *flags(config)]
    # The submitting side reads the table from the job's output and stores the records: the job's rank 0 keeps
    # its JSON Lines file in the job's folder and writes no results database (else every record would be twice).
    # nccl-tests is an MPI program (its ranks come from PMI); gpuval bench's ranks read the launcher's environment.
    return base_spec(req, command, Launcher.MPI, procs_per_node=max(req.gpus_per_node, 1), pmi=use == "nccl-tests")


def _config_of(spec: JobSpec) -> BenchConfig:
    """Read the sweep back from the command `build` made: `gpuval bench C FLAGS` or `C_perf FLAGS -g 1`."""
    command = spec.command
    if "bench" in command:
        return parse_args(command[command.index("bench") + 1:])
    return parse_args([command[0].removesuffix("_perf"), *command[1:-2]])


def _where(table: Table, ctx: ResultContext, sku: str | None) -> Where:
    """The job's machines, from the table's `# Rank N ... on HOST device` lines: rank 0's host names the record.
    The GPUs are what the job asked for per node; this (submitting) machine's own GPUs say nothing of them."""
    return Where(hostname=table.hosts[0] if table.hosts else f"{ctx.engine}:{ctx.job_id}", sku=sku,
                 gpu_count=ctx.spec.gpus_per_node, ranks=table.nranks, engine=ctx.engine, job_id=ctx.job_id)


def read(output: Output, ctx: ResultContext) -> list[Result]:
    """One Result per nccl-tests table in the job's output, read as the engine streams it (FAIL on wrong elements,
    as `gpuval bench`), each naming the job's machines (`where` from the table, never this submitting machine) and
    hosts (data.hosts, sorted as `gpuval bench` lists them)."""
    config = _config_of(ctx.spec)
    sku = ctx.spec.network.name if ctx.spec.network else None
    reader = TextReader()
    found = []
    for tables in (*(reader.feed(piece) for piece in output_pieces(output)), reader.close()):
        for table in tables:
            table.collective = table.collective or config.collective  # the job ran the sweep it was built with
            found.append(collective_record(table, _where(table, ctx, sku), ctx.run_id, config.model_dump(),
                                           ctx.started, hosts=sorted(table.hosts)))
    return found


WORKLOAD = Workload(name="nccl", help="NCCL collective sweep (gpuval bench, or nccl-tests with --use nccl-tests).",
                    build=build, read=read)
