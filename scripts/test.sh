#!/usr/bin/env bash
# Install everything the tests need (apt packages included) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
# Three workers (pytest-xdist), each with its own session (its own Slurm cluster, PostgreSQL, temp dirs): the suite
# waits on daemons, jobs and subprocesses as much as it computes, so three keep a 2-core machine busy (one worker:
# 12 min; two: 8:10; three: 8:05 with the two timed fleet checks run alone, on this 2-core machine). Tests are handed
# out as workers free up (worksteal). `-n 0` runs serially.
exec .venv/bin/python -m pytest -n 3 --dist worksteal --durations=25 "$@"  # the slowest tests, for the suite's budget
