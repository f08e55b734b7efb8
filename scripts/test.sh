#!/usr/bin/env bash
# Install everything the tests need (apt packages included) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
# Two workers (pytest-xdist), each with its own session (its own Slurm cluster, PostgreSQL, temp dirs): the suite
# waits on daemons and subprocesses as much as it computes, so two keep a 2-core machine busy. Tests are handed out
# as workers free up (worksteal): the few long fleet checks do not hold a queue behind them. `-n 0` runs serially.
exec .venv/bin/python -m pytest -n 2 --dist worksteal "$@"
