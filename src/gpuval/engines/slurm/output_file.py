"""Where a Slurm job that gpuval did not submit writes its output, by key from Slurm's JSON, never from its text.

`scontrol show job` prints `JobName=...` first and a name may hold spaces and `StdOut=/dev/zero` (reliability-4
D9): no reading of that text can tell the job's real output file from one its name spells. `squeue --json` gives
`standard_output` as a string of its own, as the user wrote it (`out-%j.txt`), with the job's id, name, user, array
ids, batch host and working folder beside it; `expand` fills the pattern in as slurmstepd does for the batch step
(measured on Slurm 22.05: `%J` is the job id there, `%s` is `batch`, `%n` and `%t` are 0, `%a` of a job that is no
array is 4294967294, a letter Slurm does not know stays as written, and `\\\\` ends the replacing, one backslash
dropped). `%N` is the batch host's Slurm name, which is its host name on every cluster that does not give fake
nodes one host (a test cluster's).

What the path names is still the user's choice (`-o`), so the file is read only as the job's: a regular file, not
through a symlink, owned by the job's user (engines/output.py checks it as it opens it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuval.engines.slurm.commands import run
from gpuval.engines.slurm.status import number

_FIELD = re.compile(r"%(\d*)([%AaJjNnstux])")
_NOT_AN_ARRAY = 4294967294  # what slurmstepd writes for %a of a job that is no array (NO_VAL - 1)


@dataclass(frozen=True)
class OutputFile:
    """A job's output file and the uid that owns it: the job's user, as whom slurmstepd creates it."""

    path: Path
    owner: int | None


def expand(pattern: str, job: dict[str, Any]) -> str:
    """`pattern` (sbatch's -o, as squeue --json's standard_output gives it) with its fields filled in for the batch
    step of `job` (squeue --json's record of it), as slurmstepd fills them."""
    head, stop, tail = pattern.partition("\\\\")
    array = number(job.get("array_job_id")) or 0
    task = number(job.get("array_task_id"))
    numbers = {"A": array or number(job.get("job_id")), "a": task if array and task is not None else _NOT_AN_ARRAY,
               "J": number(job.get("job_id")), "j": number(job.get("job_id")), "n": 0, "t": 0}
    words = {"%": "%", "N": str(job.get("batch_host") or "").split(".")[0], "s": "batch",
             "u": str(job.get("user_name") or ""), "x": str(job.get("name") or "")}

    def field(found: re.Match[str]) -> str:  # a width zero-pads a number (to 10 at the most), as Slurm's
        width, letter = found.group(1), found.group(2)
        if letter in numbers:
            return str(numbers[letter]).zfill(min(int(width or 0), 10))
        return words[letter]

    return _FIELD.sub(field, head) + ("\\" + tail if stop else "")


def job_output(job_id: str) -> OutputFile | None:
    """The output file of a job squeue still knows (until MinJobAge after it ends), and its user's uid; None where
    squeue does not know the job or names no working folder to place a relative path in."""
    proc = run(["squeue", "--json", f"--jobs={job_id}"])
    try:
        jobs = json.loads(proc.stdout).get("jobs", []) if proc.returncode == 0 else []
    except json.JSONDecodeError:
        return None
    job = next((j for j in jobs if str(number(j.get("job_id"))) == job_id), None)  # 22.05 lists every job
    if job is None or job.get("batch_flag") is False:  # srun or salloc alone: its output went to a terminal
        return None
    default = "slurm-%A_%a.out" if number(job.get("array_job_id")) else "slurm-%j.out"
    pattern = expand(str(job.get("standard_output") or default), job)
    folder = str(job.get("current_working_directory") or "")
    if not pattern.startswith("/") and not folder.startswith("/"):
        return None
    return OutputFile(Path(folder) / pattern, number(job.get("user_id")))
