"""The burn workload (`gpuval burn`, the `burn` job): every GPU under a GEMM load at once for as long as asked, with
clocks, power, temperatures and clock event reasons sampled; per-GPU TFLOPS and their spread across the node;
results of the same input compared to catch silent corruption. run.py (on this machine), job.py (the job and its
reader), records.py (its records: kind "health", name "burn"), load.py (the GEMM load, also the health suite's)."""
