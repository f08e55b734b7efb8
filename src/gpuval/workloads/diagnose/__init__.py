"""`gpuval jobs diagnose`: a running job's stragglers, hang, NCCL network and driver events, and the nodes they
nominate (run.py), and its records (records.py). Nothing is submitted: the job is someone's own; the engine runs a
probe inside it (docs/jobs-diagnose.md)."""
