#!/usr/bin/env bash
# Install gpuval into ./.venv on Debian/Ubuntu (as root, or with sudo for the apt step).
#   scripts/install.sh          gpuval and torch (what `gpuval validate` needs)
#   scripts/install.sh --test   also every package the test suite needs (apt: Slurm, Open MPI, LAMMPS, ...)
set -euo pipefail
cd "$(dirname "$0")/.."

test_mode=0
[ "${1:-}" = "--test" ] && test_mode=1

APT_BASE=(python3 python3-venv python3-pip)
# The test suite runs real engines: Slurm daemons (+ munge), Open MPI, LAMMPS, Chromium (report screenshots),
# PostgreSQL (results store).
APT_TEST=(openmpi-bin libopenmpi-dev slurm-wlm slurmdbd munge lammps chromium chromium-driver postgresql procps
          iproute2 util-linux)

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" \
    || { $sudo apt-get -o DPkg::Lock::Timeout=600 update && \
         $sudo apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"; }
}

if ! python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  apt_install "${APT_BASE[@]}"
fi
[ $test_mode -eq 1 ] && apt_install "${APT_TEST[@]}"

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch is pinned: a wider range pulls a multi-GB CUDA build where a CPU build was meant.
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0" numpy
if [ $test_mode -eq 1 ]; then
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[torch,test]"
else
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[torch]"
fi
echo "gpuval installed: $(.venv/bin/gpuval --version) in $(pwd)/.venv"
