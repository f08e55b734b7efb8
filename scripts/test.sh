#!/usr/bin/env bash
# Install everything the tests need (apt packages included) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
# Three workers (pytest-xdist), each with its own session (its own Slurm cluster, PostgreSQL, temp dirs): the suite
# waits on daemons, jobs and subprocesses as much as it computes, so three keep a 2-core machine busy (its CPUs are
# 95% busy through the run); four were slower (979.9 s against 910.4 s, 2026-11-28: the longest fleet check became a
# tail of its own). No test runs alone: a fleet check that judges timings uses a cut wide enough for this
# machine's noise. Tests are handed out as workers free up (worksteal). `-n 0` runs serially.
# Bytecode is written (even where the environment says not to): otherwise each of the three workers rewrites and
# compiles every test module, and each of the suite's thousand Python processes compiles the gpuval modules it imports.
unset PYTHONDONTWRITEBYTECODE
# One intra-op thread per process: the three workers, the ranks and the Slurm test cluster's six nodes all share
# two cores, and torch's default (a thread per core in every process) has their threads spin against each other
# (gpuval does the same for ranks sharing a node: workloads.ranks.share_cores; its own test unsets this).
export OMP_NUM_THREADS=1
exec .venv/bin/python -m pytest -n 3 --dist worksteal --durations=25 "$@"  # the slowest tests, for the suite's budget
