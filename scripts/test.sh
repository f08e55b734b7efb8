#!/usr/bin/env bash
# Install everything the tests need (apt packages included) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
exec .venv/bin/python -m pytest "$@"
