#!/usr/bin/env bash
# Install gpuval into ./.venv on Debian/Ubuntu (as root, or with sudo for the apt step).
#   scripts/install.sh          gpuval and torch (what `gpuval validate` needs); on a GPU node also nccl4py, so
#                               `gpuval bench` calls NCCL directly (docs/collectives.md)
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
# GPU nodes only: nccl4py (NVIDIA's Python bindings of NCCL) with the cuda-bindings of torch's CUDA major (12 or 13),
# so it calls the NCCL torch itself loads (nvidia-nccl-cu12/13, already there with torch). Not nccl4py's cu12/cu13
# extra: that adds nvidia-cutlass-dsl for nccl4py's device API, which gpuval does not use. Nothing on CPU machines.
gpu_bindings() {
  nvidia-smi -L >/dev/null 2>&1 || return 0
  local torch_cuda driver_cuda
  torch_cuda=$(.venv/bin/python -c 'import torch; print((torch.version.cuda or "").split(".")[0])')
  if [ -z "$torch_cuda" ]; then
    echo "note: this torch is a CPU build: gpuval bench will run through torch.distributed"
    return 0
  fi
  driver_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
  if [ -n "$driver_cuda" ] && [ "$driver_cuda" -lt "$torch_cuda" ]; then
    echo "warning: the driver supports CUDA $driver_cuda, torch is built for CUDA $torch_cuda: nccl4py not installed"
    return 0
  fi
  .venv/bin/python -m pip install -q -c constraints.txt nccl4py "cuda-bindings==${torch_cuda}.*"
}
gpu_bindings
echo "gpuval installed: $(.venv/bin/gpuval --version) in $(pwd)/.venv"
