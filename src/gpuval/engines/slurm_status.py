"""Slurm's words for a job's state, from `squeue --json`, `sacct -P` and the job-completion file, read into one
JobStatus. Slurm's JSON changed between versions (job_state a string in 22.05, a list since 23.02; numbers
sometimes {"set":..., "number":...}): the readers accept both.

Some failures show only in the state: a job killed at its time limit (TIMEOUT), on a failed node (NODE_FAIL),
out of memory (OUT_OF_MEMORY) or preempted can report exit code 0 (the batch shell's). The status says failed
and names the state, so nobody reads the 0 as success.
"""

from __future__ import annotations

import subprocess
import shutil
from typing import Any

from gpuval.engines.spec import JobState, JobStatus
from gpuval.errors import EngineError, MissingDependency

# Slurm's job states (squeue, sacct, jobcomp) to the normalized set.
STATES = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "SUSPENDED": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED,
    "PREEMPTED": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
}

# Failures Slurm itself imposed: the state says what happened, the exit code may not.
ENDED_BY_SLURM = {
    "TIMEOUT": "Slurm stopped it at its time limit (--time)",
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "a step ran out of memory",
    "PREEMPTED": "a job of higher priority preempted it",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "it reached its deadline",
}


def status_of(job_id: str, word: str, source: str, code: int | None = None) -> JobStatus:
    """A JobStatus from Slurm's state word; failures Slurm imposed are named in the detail."""
    state = STATES.get(word, JobState.UNKNOWN)
    detail = ""
    if word in ENDED_BY_SLURM:
        detail = f"{word}: {ENDED_BY_SLURM[word]}"
        if code == 0:
            detail += " (exit code 0 is the batch script's, not a success)"
    return JobStatus(job_id=job_id, engine="slurm", state=state, native_state=word, exit_code=code, source=source,
                     detail=detail)


def run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    """A Slurm client command; missing, or silent for `timeout` seconds, is a one-line error."""
    if shutil.which(argv[0]) is None:
        raise MissingDependency(f"{argv[0]} not found: run on a Slurm login node (or install slurm-client)")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{argv[0]} did not answer in {timeout:.0f} s") from None


def first_line(text: str) -> str:
    """The first non-blank line, stripped ('' when none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def state_word(value: Any) -> str:
    """job_state: 'RUNNING' (22.05) or ['RUNNING', 'COMPLETING'] (23.02+); sacct adds ' by 0' to CANCELLED."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").split()[0].rstrip("+") if value else ""


def number(value: Any) -> int | None:
    """An int, or Slurm 23+'s {"set": true, "number": N}, or {"return_code": ...} shapes."""
    if isinstance(value, dict):
        if "return_code" in value:
            return number(value["return_code"])
        return int(value["number"]) if value.get("set", True) and "number" in value else None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def squeue_exit_code(value: Any) -> int | None:
    """22.05 gives the raw wait status (exit 1 -> 256); 23.02+ an object whose return_code is the code."""
    if isinstance(value, dict):
        return number(value)
    raw = number(value)
    if raw is None:
        return None
    signal_number = raw & 0x7F
    return 128 + signal_number if signal_number else raw >> 8


def exit_code(text: str) -> int | None:
    """'2:0' (code:signal) -> 2."""
    head = text.split(":")[0]
    return int(head) if head.isdigit() else None


def key_values(line: str) -> tuple[str, str]:
    """'Key = Value' of `scontrol show config`."""
    key, _, value = line.partition("=")
    return key.strip(), value.strip()
