"""The collective workload (`gpuval bench`, the `nccl` job): run.py (the ranks), job.py (the job and its reader),
records.py (the collective Result factory)."""
