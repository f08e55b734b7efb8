#!/bin/bash
# gpuval job gpuval-nccl: nccl on this machine
set -eo pipefail
export GPUVAL_DB=none
export GPUVAL_RESULTS=gpuval-results.jsonl
export GPUVAL_RUN_ID=run-1
mpirun -np 2 -x GPUVAL_DB -x GPUVAL_RESULTS -x GPUVAL_RUN_ID /usr/bin/python3 -c 'import sys; sys.path[:1] == [""] and sys.path.pop(0); del sys.argv[0]; import runpy; runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)' gpuval bench all_reduce -b 8 -e 64M -f 2
