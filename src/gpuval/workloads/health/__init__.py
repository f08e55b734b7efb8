"""The health workload (`gpuval health`, the `health` job): run.py (the suite on a machine), job.py (the job and its
reader), records.py (the health Result factory), measurer.py (torch measurements for the measuring checks)."""
