"""A job's state from Slurm: `squeue --json`, else `sacct -P`, else the job-completion file
(JobCompType=jobcomp/filetxt), each asked once for every job of a list (the fleet polls a round's jobs in one call,
as submitit does), and Slurm's words read into one JobStatus. Slurm's JSON changed between versions (job_state a
string in 22.05, a list since 23.02; numbers sometimes {"set":..., "number":...}): the readers accept both.

Some failures show only in the state: a job killed at its time limit (TIMEOUT), on a failed node (NODE_FAIL),
out of memory (OUT_OF_MEMORY) or preempted can report exit code 0 (the batch shell's). The status says failed
and names the state, so nobody reads the 0 as success.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuval.engines.output import file_lines
from gpuval.engines.slurm.commands import run
from gpuval.engines.spec import JobState, JobStatus

_JOBCOMP_ID = re.compile(r"\bJobId=(\d+) ")

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


# Pending reasons (squeue's state_reason; Slurm's "Job Reason Codes") under which the job cannot start as the
# cluster stands: only a change to the job or to the cluster's settings frees it. Queued past a partition's limits
# is what Slurm does by default (EnforcePartLimits=NO); "Resources", "Priority", a reservation or a node that is
# busy or down ("ReqNodeNotAvail") clear by themselves and are not here.
CANNOT_START = {
    "PartitionNodeLimit": "it asks for more or fewer nodes than its partition allows, or a node it needs is down "
                          "or drained",
    "PartitionTimeLimit": "its time limit is past its partition's",
    "BadConstraints": "no node has the features it asks for",
    "InvalidAccount": "its account is not valid here",
    "InvalidQOS": "its QOS is not valid here",
    "QOSMaxNodePerJobLimit": "it asks for more nodes than its QOS allows a job",
    "QOSMaxWallDurationPerJobLimit": "its time limit is past its QOS's",
    "AccountNotAllowed": "its account may not use the partition",
    "QOSNotAllowed": "its QOS may not use the partition",
}


def status_of(job_id: str, word: str, source: str, code: int | None = None, reason: str = "") -> JobStatus:
    """A JobStatus from Slurm's state word; failures Slurm imposed are named in the detail, a queued job's reason
    (squeue's) too, and the reasons under which it cannot start make it `blocked`."""
    state = STATES.get(word, JobState.UNKNOWN)
    detail = blocked = ""
    if word in ENDED_BY_SLURM:
        detail = f"{word}: {ENDED_BY_SLURM[word]}"
        if code == 0:
            detail += " (exit code 0 is the batch script's, not a success)"
    elif state is JobState.PENDING and reason and reason != "None":
        detail = f"reason {reason}"
        if reason in CANNOT_START:
            blocked = detail = f"{reason}: {CANNOT_START[reason]}"
    return JobStatus(job_id=job_id, engine="slurm", state=state, native_state=word, exit_code=code, source=source,
                     detail=detail, blocked=blocked)


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


# ---- the readers: every job of a list in one call each, squeue first, then sacct, then the jobcomp file ----------


def from_squeue(job_ids: list[str]) -> dict[str, JobStatus]:
    """The jobs squeue still knows (until MinJobAge after they end), all in one call."""
    proc = run(["squeue", "--json", f"--jobs={','.join(job_ids)}"])
    if proc.returncode != 0:
        return {}  # squeue exits 1 when asked for one job id it has already forgotten
    try:
        jobs = json.loads(proc.stdout).get("jobs", [])
    except json.JSONDecodeError:
        return {}
    wanted, found = set(job_ids), {}
    for job in jobs:
        job_id = str(number(job.get("job_id")))
        if job_id in wanted:
            found[job_id] = status_of(job_id, state_word(job.get("job_state")), "squeue",
                                      squeue_exit_code(job.get("exit_code")), str(job.get("state_reason") or ""))
    return found


def from_sacct(job_ids: list[str]) -> dict[str, JobStatus]:
    """The jobs the accounting database holds, all in one call; nothing where accounting is off."""
    # -P with named fields (-o): the order is ours, so no field moves between Slurm versions.
    proc = run(["sacct", "-j", ",".join(job_ids), "-X", "-n", "-P", "-o", "JobID,State,ExitCode"])
    if proc.returncode != 0:
        return {}  # accounting storage disabled on this cluster
    wanted, found = set(job_ids), {}
    for line in proc.stdout.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[0] in wanted:
            found[fields[0]] = status_of(fields[0], state_word(fields[1]), "sacct", exit_code(fields[2]))
    return found


def slurm_config() -> dict[str, str]:
    """The cluster's settings as `scontrol show config` prints them (none where it cannot say)."""
    proc = run(["scontrol", "show", "config"])
    return dict(key_values(line) for line in proc.stdout.splitlines() if "=" in line) if proc.returncode == 0 else {}


@functools.lru_cache(maxsize=8)
def _cluster_name(conf: str) -> str:
    return slurm_config().get("ClusterName", "")


def cluster_name() -> str:
    """The cluster's ClusterName (`scontrol show config`), read once per process and SLURM_CONF; '' where Slurm
    does not say."""
    return _cluster_name(os.environ.get("SLURM_CONF", ""))


def jobcomp_path() -> Path | None:
    """The job-completion file (JobCompType=jobcomp/filetxt), where the cluster keeps one."""
    settings = slurm_config()
    if "filetxt" not in settings.get("JobCompType", ""):
        return None
    location = settings.get("JobCompLoc", "")
    return Path(location) if location.startswith("/") else None


def from_jobcomp(job_ids: list[str]) -> dict[str, JobStatus]:
    """The jobs of the job-completion file, read once for all of them (it holds every job the cluster ran)."""
    path = jobcomp_path()
    if path is None or not path.exists():
        return {}
    wanted, last = set(job_ids), {}
    for line in file_lines(path):
        match = _JOBCOMP_ID.search(line)
        if match and match.group(1) in wanted:
            last[match.group(1)] = line  # a requeued job has several lines: the last one counts
    found = {}
    for job_id, line in last.items():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        found[job_id] = status_of(job_id, state_word(fields.get("JobState")), "jobcomp",
                                  exit_code(fields.get("ExitCode", "")))
    return found


def read_statuses(job_ids: list[str]) -> dict[str, JobStatus]:
    """Every job's status that Slurm still keeps somewhere: squeue for all, sacct for those squeue forgot, the
    job-completion file for the rest; a job none of them knows is left out."""
    found: dict[str, JobStatus] = {}
    left = list(dict.fromkeys(job_ids))
    for reader in (from_squeue, from_sacct, from_jobcomp):
        if not left:
            break
        found.update(reader(left))
        left = [job_id for job_id in left if job_id not in found]
    return found


@dataclass(frozen=True)
class Placed:
    """A job as squeue shows it now: its state word, host list, start (Unix seconds), task count, owner and submit
    time (Unix seconds); whether it is a batch job and may be requeued, the nodes it was sent to avoid and to use
    (host lists), its batch script's command ('' for `sbatch --wrap`) and its partition(s)."""

    state: str
    nodes: str
    start: int | None
    tasks: int | None
    user_id: int | None = None
    user_name: str = ""
    submit: int | None = None
    batch: bool = False
    requeue: bool = False
    excluded: str = ""
    required: str = ""
    command: str = ""
    partition: str = ""


def running_placement(job_id: str) -> Placed | None:
    """Where squeue says a job is (its state, nodes, start, tasks); None where squeue does not know it."""
    proc = run(["squeue", "--json", f"--jobs={job_id}"])
    if proc.returncode != 0:
        return None
    try:
        jobs = json.loads(proc.stdout).get("jobs", [])
    except json.JSONDecodeError:
        return None
    for job in jobs:
        if str(number(job.get("job_id"))) == job_id:
            return Placed(state_word(job.get("job_state")), str(job.get("nodes") or ""),
                          number(job.get("start_time")), number(job.get("tasks")), number(job.get("user_id")),
                          str(job.get("user_name") or ""), number(job.get("submit_time")),
                          job.get("batch_flag") is True, job.get("requeue") is True,
                          str(job.get("excluded_nodes") or ""), str(job.get("required_nodes") or ""),
                          str(job.get("command") or ""), str(job.get("partition") or ""))
    return None


def submit_time(job_id: str) -> datetime | None:
    """When the job was submitted: squeue's submit time while it keeps the job, else sacct's (slurmctld's local
    time); None where neither knows it."""
    found = running_placement(job_id)
    if found is not None and found.submit:
        return datetime.fromtimestamp(found.submit, timezone.utc)
    proc = run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,Submit"])
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        fields = line.split("|")
        if len(fields) == 2 and fields[0] == job_id:
            try:
                return datetime.fromisoformat(fields[1]).astimezone(timezone.utc)
            except ValueError:
                return None
    return None


# ---- the nodes a job ran on, as Slurm allocated them ------------------------------------------------------------

_NODE_LIST = re.compile(r"(?:^|\s)NodeList=(\S+)")


def job_nodes(job_id: str) -> str:
    """The host list Slurm allocated the job (`n[1-2]`), from Slurm's own records: `scontrol show job` while it
    keeps the job (MinJobAge after it ends), else sacct, else the job-completion file; "" when none knows it (or
    it never ran). What ties a line to its node (labels.py) comes from here, never from the job's own output."""
    proc = run(["scontrol", "show", "job", job_id, "-o"])
    found = _NODE_LIST.search(proc.stdout) if proc.returncode == 0 else None
    if found and found.group(1) != "(null)":
        return found.group(1)
    proc = run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,NodeList"])
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        fields = line.split("|")
        if len(fields) == 2 and fields[0] == job_id and fields[1] not in ("", "None assigned"):
            return fields[1]
    path = jobcomp_path()
    last = ""
    for line in file_lines(path) if path is not None and path.exists() else []:
        match = _JOBCOMP_ID.search(line)
        if match and match.group(1) == job_id and (nodes := _NODE_LIST.search(line)):
            last = nodes.group(1)  # a requeued job has several lines: the last one counts
    return "" if last == "(null)" else last
