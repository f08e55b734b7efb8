"""gpuval's bench beside nccl-tests on the same GPUs and the same NCCL, row by row (GPU node only).

Runs nccl-tests' COLLECTIVE_perf (given, or built from its source against the NCCL in torch's package) and
`gpuval bench COLLECTIVE` with the same sweep, the same ranks and the same launch model: nccl-tests one GPU per
thread (`-t N -g 1`, one process) or per process (`--launch mpirun`: `mpirun -np N ... -g 1`, an MPI build), gpuval
one process per GPU; `-G` against `-G` (the same CUDA-graph launches on both sides); `-N` cycles on both sides,
each side judged by the median of its cycles per size. gpuval runs through nccl4py's bindings (the default on GPUs)
and, for the record, through torch.distributed (--via torch). Prints a Markdown table of per-row median times and
writes it, with every raw output, to --out.

Targets: gpuval's time within +1 us of nccl-tests' at <= 1 MiB and within 2% at >= 64 MiB (or 1 us, where 2% is
less: a one-rank in-place call is a no-op of 0.4 us at any size), out-of-place and in-place; sizes between are
reported, not judged. Exit 0: every judged row met; 1: a row missed; 2: a program could not run (or bad flags).
--dry-run prints the commands it would run and runs nothing (anywhere, no GPU needed).

    python benchmarks/bench_vs_nccltests.py --nccl-tests /path/all_reduce_perf --nprocs 8 [-b 8 -e 1G -f 2 -N 3]
    python benchmarks/bench_vs_nccltests.py --nccl-tests-src .device/nccl-tests --nprocs 8 -G 1 --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuval.collectives.catalog import collective_named
from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.collectives.sizes import format_size, parse_size
from gpuval.collectives.table import Row
from gpuval.errors import UsageError

SMALL, LARGE = 1 << 20, 64 << 20  # judged: <= 1 MiB by +1 us, >= 64 MiB by 2 %
EXIT_MISSED, EXIT_CANNOT_RUN = 1, 2
LAUNCHES = ("threads", "mpirun")


def nccl_package() -> Path:
    """The NCCL torch loads (nvidia-nccl-cu12/13): nccl-tests is built and run against the same library."""
    import nvidia.nccl  # type: ignore[import-not-found]

    return Path(nvidia.nccl.__path__[0])


def nccl_env() -> dict[str, str]:
    """The environment nccl-tests runs in: torch's NCCL first on the library path, where that package is here."""
    try:
        lib = nccl_package() / "lib"
    except ImportError:  # a binary built elsewhere, against the NCCL its own environment names
        return dict(os.environ)
    return dict(os.environ, LD_LIBRARY_PATH=f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")


def build_home(builddir: Path) -> Path:
    """An NCCL_HOME for the build: the package's headers, and a libnccl.so link to its libnccl.so.2 (the wheel has
    only the latter; nccl-tests links -lnccl), made here rather than in site-packages."""
    package, home = nccl_package(), builddir.resolve() / "nccl-home"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    for link, target in ((home / "include", package / "include"), (home / "lib" / "libnccl.so",
                                                                   package / "lib" / "libnccl.so.2")):
        if not link.is_symlink():
            link.symlink_to(target)
    return home


def gencode() -> str:
    """nvcc's -gencode for this GPU only (a build for every architecture takes many minutes)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"


def build_command(source: Path, builddir: Path, launch: str) -> list[str]:
    """nccl-tests' `make` (its README's build) against torch's NCCL; MPI=1 for an mpirun launch."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    mpi = ["MPI=1", f"MPI_HOME={os.environ['MPI_HOME']}"] if launch == "mpirun" else []
    return ["make", "-C", str(source / "src"), f"-j{os.cpu_count() or 4}", f"BUILDDIR={builddir.resolve()}",
            f"NCCL_HOME={build_home(builddir)}", f"CUDA_HOME={cuda}", f"NVCC_GENCODE={gencode()}", *mpi]


@dataclass(frozen=True)
class Sweep:
    """The flags both sides run with; nccl-tests' names."""

    collective: str
    minbytes: str
    maxbytes: str
    factor: int
    iters: int
    warmup: int
    graphs: int
    cycles: int
    nprocs: int

    def flags(self) -> list[str]:
        return ["-b", self.minbytes, "-e", self.maxbytes, "-f", str(self.factor), "-n", str(self.iters), "-w",
                str(self.warmup), "-G", str(self.graphs), "-N", str(self.cycles)]


def nccl_tests_command(binary: Path, sweep: Sweep, launch: str) -> list[str]:
    """nccl-tests with one GPU per thread (`-t N -g 1`) or per MPI process (`mpirun -np N ... -g 1`), as gpuval
    runs one process per GPU: never `-g N`, one thread driving every GPU in one group, whose small-size times are
    not comparable beyond one GPU."""
    if launch == "mpirun":
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return ["mpirun", "-np", str(sweep.nprocs), *root, str(binary), *sweep.flags(), "-g", "1"]
    return [str(binary), *sweep.flags(), "-t", str(sweep.nprocs), "-g", "1"]


def gpuval_command(sweep: Sweep, via: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "gpuval", "bench", sweep.collective, *sweep.flags(), "--nprocs", str(sweep.nprocs),
            "--via", via, "--json", str(out / f"gpuval-{via}.json"), "--results", str(out / "results.jsonl")]


def run_nccl_tests(command: list[str], out: Path) -> list[Row]:
    proc = subprocess.run(command, capture_output=True, text=True, env=nccl_env(), timeout=600)
    (out / "nccl-tests.txt").write_text(proc.stdout + proc.stderr)
    tables = parse_text(proc.stdout)
    if proc.returncode or not tables:
        raise RuntimeError(f"nccl-tests exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    return tables[0].rows


def run_gpuval(command: list[str], via: str, out: Path) -> list[Row]:
    doc = out / f"gpuval-{via}.json"
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    (out / f"gpuval-{via}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode or not doc.exists():
        raise RuntimeError(f"gpuval --via {via} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    return rows_from_json(json.loads(doc.read_text())["results"])


Medians = dict[int, tuple[float | None, float | None]]


def medians(rows: list[Row]) -> Medians:
    """Per size, in the order sizes first appear: the median time of each side over the -N cycles (None where the
    side was not measured)."""
    times: dict[int, tuple[list[float], list[float]]] = {}
    for row in rows:
        oop, inp = times.setdefault(row.size, ([], []))
        if row.out_of_place is not None:
            oop.append(row.out_of_place.time)
        if row.in_place is not None:
            inp.append(row.in_place.time)
    return {size: (statistics.median(oop) if oop else None, statistics.median(inp) if inp else None)
            for size, (oop, inp) in times.items()}


def verdict(size: int, ref: float | None, ours: float | None) -> str:
    """'met', 'MISSED' or '' (not judged at this size, or a side missing)."""
    if ref is None or ours is None:
        return ""
    if size <= SMALL:
        return "met" if ours - ref <= 1.0 else "MISSED"
    if size >= LARGE:  # 2 %, never under the per-call +1 us (a one-rank in-place call is a 0.4 us no-op at any size)
        return "met" if abs(ours - ref) <= max(0.02 * ref, 1.0) else "MISSED"
    return ""


def _us(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def table(ref: Medians, ours: Medians, through_torch: Medians) -> tuple[list[str], int]:
    """The Markdown table of median times and the number of judged rows missed."""
    lines = ["| size | nccl-tests oop us | gpuval oop us | | nccl-tests inpl us | gpuval inpl us | | torch.distributed "
             "oop / inpl us |", "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |"]
    missed = 0
    for size, theirs in ref.items():
        mine, cells = ours.get(size, (None, None)), []
        for side in (0, 1):
            mark = verdict(size, theirs[side], mine[side])
            missed += mark == "MISSED"
            cells += [_us(theirs[side]), _us(mine[side]), mark]
        t = through_torch.get(size, (None, None))
        lines.append(f"| {format_size(size)} | " + " | ".join(cells) + f" | {_us(t[0])} / {_us(t[1])} |")
    return lines, missed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nccl-tests", type=Path, help="the nccl-tests binary of the collective (all_reduce_perf)")
    parser.add_argument("--nccl-tests-src", type=Path, help="nccl-tests' source tree, built here when --nccl-tests "
                        "is not given")
    parser.add_argument("--collective", default="all_reduce")
    parser.add_argument("-b", default="8")
    parser.add_argument("-e", default="1G")
    parser.add_argument("-f", type=int, default=2)
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("-w", type=int, default=5)
    parser.add_argument("-G", type=int, default=0, help="CUDA-graph launches, on both sides")
    parser.add_argument("-N", type=int, default=3, help="cycles on both sides; each row judged by their median")
    parser.add_argument("--nprocs", type=int, default=1, help="GPUs: nccl-tests -t N -g 1 (or mpirun -np N -g 1), "
                        "gpuval --nprocs N")
    parser.add_argument("--launch", choices=LAUNCHES, default="threads", help="nccl-tests' ranks: threads of one "
                        "process, or mpirun processes (needs an MPI build: MPI=1 when built here)")
    parser.add_argument("--out", type=Path, default=Path("bench-vs-nccltests"))
    parser.add_argument("--build-timeout", type=float, default=240)
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return parser


def _sweep(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Sweep:
    """The flags checked before anything runs: a bad one is parser.error (exit 2)."""
    if args.nccl_tests is None and args.nccl_tests_src is None:
        parser.error("give --nccl-tests (the collective's _perf binary) or --nccl-tests-src (its source, built here)")
    try:
        name = collective_named(args.collective).name
        parse_size(args.b), parse_size(args.e)
    except UsageError as exc:
        parser.error(str(exc))
    if min(args.nprocs, args.N, args.n) < 1 or min(args.f, args.w, args.G) < 0:
        parser.error("--nprocs, -N and -n must be at least 1; -f, -w and -G at least 0")
    if args.launch == "mpirun" and args.nccl_tests is None and not os.environ.get("MPI_HOME"):
        parser.error("--launch mpirun builds nccl-tests with MPI=1: set MPI_HOME to the MPI it is built against")
    return Sweep(name, args.b, args.e, args.f, args.n, args.w, args.G, args.N, args.nprocs)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    sweep = _sweep(parser, args)
    builddir = args.out / "nccl-tests-build"
    binary = args.nccl_tests or builddir / f"{sweep.collective}_perf"
    commands = {"nccl-tests": nccl_tests_command(binary, sweep, args.launch),
                **{f"gpuval --via {via}": gpuval_command(sweep, via, args.out) for via in ("nccl4py", "torch")}}
    if args.dry_run:
        if args.nccl_tests is None:
            print(f"build: make -C {args.nccl_tests_src / 'src'} BUILDDIR={builddir} (against torch's NCCL"
                  f"{', MPI=1' if args.launch == 'mpirun' else ''})")
        for what, command in commands.items():
            print(f"{what}: {shlex.join(command)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if args.nccl_tests is None:
            subprocess.run(build_command(args.nccl_tests_src, builddir, args.launch), check=True,
                           timeout=args.build_timeout, stdout=subprocess.DEVNULL)
        ref = run_nccl_tests(commands["nccl-tests"], args.out)
        ours = run_gpuval(commands["gpuval --via nccl4py"], "nccl4py", args.out)
        through_torch = run_gpuval(commands["gpuval --via torch"], "torch", args.out)
    except (RuntimeError, OSError, subprocess.SubprocessError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    lines, missed = table(medians(ref), medians(ours), medians(through_torch))
    head = (f"{sweep.collective} {args.b}..{args.e} x{args.f}, {args.nprocs} GPU(s) (nccl-tests: "
            f"{'mpirun -np N -g 1' if args.launch == 'mpirun' else '-t N -g 1'}), -n {args.n} -w {args.w} -G {args.G}, "
            f"median of -N {args.N}: {missed} judged rows missed (targets: +1 us at <= 1M, 2% at >= 64M)")
    text = "\n".join([head, "", *lines]) + "\n"
    (args.out / "bench-vs-nccltests.md").write_text(text)
    print(text)
    return EXIT_MISSED if missed else 0


if __name__ == "__main__":
    sys.exit(main())
