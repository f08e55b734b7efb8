"""gpuval's bench beside nccl-tests on the same GPUs and the same NCCL, row by row (GPU node only).

Runs nccl-tests' all_reduce_perf (given, or built here from its source against the NCCL in torch's package) and
`gpuval bench all_reduce` with the same sweep and ranks: through nccl4py's bindings (the default on GPUs) and,
for the record, through torch.distributed (--via torch). Prints a Markdown table of per-row times and writes it,
with every raw output, to --out.

Targets (issue "the bench on GPUs"): gpuval's time within +1 us of nccl-tests' at <= 1 MiB and within 2% at
>= 64 MiB (or 1 us, where 2% is less: a one-rank in-place call is a no-op of 0.4 us at any size), out-of-place and
in-place; sizes between are reported, not judged. Exit 0: every judged row met;
1: a row missed; 2: a program could not run.

    python benchmarks/bench_vs_nccltests.py --nccl-tests /path/all_reduce_perf [-b 8 -e 1G -f 2] [--nprocs 1]
    python benchmarks/bench_vs_nccltests.py --nccl-tests-src .device/nccl-tests --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.collectives.sizes import format_size, parse_size
from gpuval.collectives.table import Row

SMALL, LARGE = 1 << 20, 64 << 20  # judged: <= 1 MiB by +1 us, >= 64 MiB by 2 %
EXIT_MISSED, EXIT_CANNOT_RUN = 1, 2


def nccl_package() -> Path:
    """The NCCL torch loads (nvidia-nccl-cu12/13): nccl-tests is built and run against the same library."""
    import nvidia.nccl  # type: ignore[import-not-found]

    return Path(nvidia.nccl.__path__[0])


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


def build(source: Path, builddir: Path, timeout_s: float) -> Path:
    """nccl-tests' `make` (its README's build) against torch's NCCL; the all_reduce_perf path."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = ["make", "-C", str(source / "src"), f"-j{os.cpu_count() or 4}", f"BUILDDIR={builddir.resolve()}",
           f"NCCL_HOME={build_home(builddir)}", f"CUDA_HOME={cuda}", f"NVCC_GENCODE={gencode()}"]
    subprocess.run(cmd, check=True, timeout=timeout_s, stdout=subprocess.DEVNULL)
    return builddir / "all_reduce_perf"


@dataclass
class Sweep:
    minbytes: str
    maxbytes: str
    factor: int
    iters: int
    warmup: int
    nprocs: int

    def flags(self) -> list[str]:
        return ["-b", self.minbytes, "-e", self.maxbytes, "-f", str(self.factor), "-n", str(self.iters), "-w",
                str(self.warmup)]


def run_nccl_tests(binary: Path, sweep: Sweep, out: Path) -> list[Row]:
    env = dict(os.environ, LD_LIBRARY_PATH=f"{nccl_package() / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    proc = subprocess.run([str(binary), *sweep.flags(), "-g", str(sweep.nprocs)], capture_output=True, text=True,
                          env=env, timeout=600)
    (out / "nccl-tests.txt").write_text(proc.stdout + proc.stderr)
    tables = parse_text(proc.stdout)
    if proc.returncode or not tables:
        raise RuntimeError(f"nccl-tests exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    return tables[0].rows


def run_gpuval(sweep: Sweep, via: str, out: Path) -> list[Row]:
    doc = out / f"gpuval-{via}.json"
    proc = subprocess.run([sys.executable, "-m", "gpuval", "bench", "all_reduce", *sweep.flags(), "--nprocs",
                           str(sweep.nprocs), "--via", via, "--json", str(doc), "--results", str(out / "results.jsonl")],
                          capture_output=True, text=True, timeout=600)
    (out / f"gpuval-{via}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode or not doc.exists():
        raise RuntimeError(f"gpuval --via {via} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    return rows_from_json(json.loads(doc.read_text())["results"])


def verdict(size: int, ref: float | None, ours: float | None) -> str:
    """'met', 'MISSED' or '' (not judged at this size, or a side missing)."""
    if ref is None or ours is None:
        return ""
    if size <= SMALL:
        return "met" if ours - ref <= 1.0 else "MISSED"
    if size >= LARGE:  # 2 %, never under the per-call +1 us (a one-rank in-place call is a 0.4 us no-op at any size)
        return "met" if abs(ours - ref) <= max(0.02 * ref, 1.0) else "MISSED"
    return ""


def _time(row: Row | None, in_place: bool) -> float | None:
    side = None if row is None else (row.in_place if in_place else row.out_of_place)
    return None if side is None else side.time


def _us(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def table(ref: list[Row], ours: list[Row], torch_rows: list[Row]) -> tuple[list[str], int]:
    """The Markdown table and the number of judged rows missed."""
    by_size = {r.size: r for r in ours}
    by_torch = {r.size: r for r in torch_rows}
    lines = ["| size | nccl-tests oop us | gpuval oop us | | nccl-tests inpl us | gpuval inpl us | | torch.distributed "
             "oop / inpl us |", "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |"]
    missed = 0
    for r in ref:
        row, cells = by_size.get(r.size), []
        for in_place in (False, True):
            theirs, mine = _time(r, in_place), _time(row, in_place)
            mark = verdict(r.size, theirs, mine)
            missed += mark == "MISSED"
            cells += [_us(theirs), _us(mine), mark]
        t = by_torch.get(r.size)
        lines.append(f"| {format_size(r.size)} | " + " | ".join(cells)
                     + f" | {_us(_time(t, False))} / {_us(_time(t, True))} |")
    return lines, missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nccl-tests", type=Path, help="all_reduce_perf to run")
    parser.add_argument("--nccl-tests-src", type=Path, help="nccl-tests' source tree, built here when --nccl-tests "
                        "is not given")
    parser.add_argument("-b", default="8")
    parser.add_argument("-e", default="1G")
    parser.add_argument("-f", type=int, default=2)
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("-w", type=int, default=5)
    parser.add_argument("--nprocs", type=int, default=1, help="GPUs (nccl-tests -g N, gpuval --nprocs N)")
    parser.add_argument("--out", type=Path, default=Path("bench-vs-nccltests"))
    parser.add_argument("--build-timeout", type=float, default=240)
    args = parser.parse_args()
    if args.nccl_tests is None and args.nccl_tests_src is None:
        parser.error("give --nccl-tests (all_reduce_perf) or --nccl-tests-src (its source, built here)")
    parse_size(args.b), parse_size(args.e)
    args.out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(args.b, args.e, args.f, args.n, args.w, args.nprocs)
    try:
        binary = args.nccl_tests or build(args.nccl_tests_src, args.out / "nccl-tests-build", args.build_timeout)
        ref = run_nccl_tests(binary, sweep, args.out)
        ours = run_gpuval(sweep, "nccl4py", args.out)
        torch_rows = run_gpuval(sweep, "torch", args.out)
    except (RuntimeError, OSError, subprocess.SubprocessError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    lines, missed = table(ref, ours, torch_rows)
    head = (f"all_reduce {args.b}..{args.e} x{args.f}, {args.nprocs} GPU(s), -n {args.n} -w {args.w}: {missed} "
            f"judged rows missed (targets: +1 us at <= 1M, 2% at >= 64M)")
    text = "\n".join([head, "", *lines]) + "\n"
    (args.out / "bench-vs-nccltests.md").write_text(text)
    print(text)
    return EXIT_MISSED if missed else 0


if __name__ == "__main__":
    sys.exit(main())
