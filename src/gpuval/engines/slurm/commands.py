"""THE one way gpuval runs a Slurm client command (sbatch, squeue, sacct, scontrol, sinfo, scancel), and THE one
mapping of what goes wrong to errors: the command missing is MissingDependency, silent past its time limit or
refusing (non-zero exit) is one EngineError line naming the command and Slurm's first line of complaint.

Each argument is one argv element (no shell), so a value with spaces (a drain reason) is one value. slurmd runs
HealthCheckProgram with no PATH: a caller that may run there names the command by its full path (`program=`).
"""

from __future__ import annotations

import shutil
import subprocess

from gpuval.errors import EngineError, MissingDependency

TIMEOUT_S = 30.0


def first_line(text: str) -> str:
    """The first non-blank line, stripped ('' when none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def run(argv: list[str], timeout: float = TIMEOUT_S, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm client command and hand back what it did, whatever its exit code (squeue exits 1 for a job it
    has forgotten: a caller may read that as an answer); `stdin`, where given, is its standard input. Missing, or
    silent for `timeout` s: one-line error."""
    if shutil.which(argv[0]) is None:
        raise MissingDependency(f"{argv[0]} not found: run on a Slurm login node (or install slurm-client), or "
                                "give the command's full path")
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{_what(argv)}: no answer in {timeout:.0f} s (slurmctld down?)") from None


def output(argv: list[str], what: str | None = None, timeout: float = TIMEOUT_S, stdin: str | None = None) -> str:
    """The command's standard output (`stdin`: its input); a non-zero exit is one EngineError line: `what`
    (default: the command and its first two words) and Slurm's first line of complaint."""
    proc = run(argv, timeout, stdin)
    if proc.returncode != 0:
        why = first_line(proc.stderr) or first_line(proc.stdout) or f"exit {proc.returncode}"
        raise EngineError(f"{what or _what(argv)}: {why}")
    return proc.stdout


def _what(argv: list[str]) -> str:
    """'scontrol show node' of ['/usr/bin/scontrol', 'show', 'node', 'n1', '-o']: the program's name and the
    words that say what it was asked."""
    name = argv[0].rsplit("/", 1)[-1]
    return " ".join([name, *(a for a in argv[1:3] if not a.startswith("-"))])
