"""A Slurm job's output file from squeue's JSON (reliability-4 D9): the pattern sbatch got, filled in as slurmstepd
fills it for the batch step. The job records are squeue --json's own (Slurm 22.05.8, this project's), and every
expected name is what slurmstepd created there for that pattern (measured: `o-%j-%x-%u-%N-...` gave
`o-19225656-a b-root-vm-0-0-batch-19225656-4294967294-19225656-%-19225656-%q.txt`, `rel\\\\%j.txt` gave
`rel\\%j.txt`); the batch host here is the Slurm node's name (what `%N` is on a cluster whose nodes are hosts)."""

from __future__ import annotations

from gpuval.engines.slurm.output_file import expand

JOB = {"job_id": 19225656, "name": "a b", "user_name": "root", "batch_host": "vm", "array_job_id": 0,
       "array_task_id": None, "current_working_directory": "/w", "batch_flag": True}


def test_every_field_slurmstepd_fills_for_the_batch_step():
    pattern = "/w/o-%j-%x-%u-%N-%n-%t-%s-%A-%a-%J-%%-%5j-%q.txt"
    assert expand(pattern, JOB) == "/w/o-19225656-a b-root-vm-0-0-batch-19225656-4294967294-19225656-%-19225656-%q.txt"


def test_two_backslashes_end_the_replacing():
    assert expand("/w/rel\\\\%j.txt", JOB) == "/w/rel\\%j.txt"


def test_a_job_name_is_a_name_not_a_field():
    """The name reaches the path only where the pattern asks for it (%x), as it does Slurm's; `StdOut=` in a name
    is text."""
    named = {**JOB, "name": "train StdOut=/dev/zero %j"}
    assert expand("/w/out-%j.txt", named) == "/w/out-19225656.txt"
    assert expand("/w/%x.out", named) == "/w/train StdOut=/dev/zero %j.out"


def test_array_tasks_and_zero_padding():
    task = {**JOB, "job_id": 101, "array_job_id": 100, "array_task_id": 7}
    assert expand("/w/slurm-%A_%a.out", task) == "/w/slurm-100_7.out"
    assert expand("/w/%3a-%12j", task) == "/w/007-0000000101"  # a width is at most 10 digits
