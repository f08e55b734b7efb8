#!/usr/bin/env bash
# Prepare, on a machine with network, what scripts/gpu-check.sh needs on a GPU machine that has none:
#   scripts/gpu-check-prepare.sh SOURCE [REF]   nccl-tests' source into .device/nccl-tests (ignored by git):
#       SOURCE a git repository or bare mirror of https://github.com/NVIDIA/nccl-tests (REF exported with
#       git archive, default v2.19.6), or a source tree (copied)
#   scripts/gpu-check-prepare.sh --wheels [DIR]  the Python 3.12 x86-64 wheels gpuval needs beyond a CUDA PyTorch
#       image (pydantic, SQLAlchemy, alembic, platformdirs, ... and nccl4py with cuda-bindings 13 for a CUDA 13
#       torch) into DIR (default .whl); install them there with
#       pip install --no-index --no-deps --target /tmp/site DIR/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
  dest=${2:-.whl}
  mkdir -p "$dest"
  platforms=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do platforms+=(--platform "$p"); done
  # nccl4py's own extra (nccl4py[cu13]) would add nvidia-cutlass-dsl, for its device API, which gpuval does not
  # use; the NCCL library itself is torch's (nvidia-nccl-cu13). cuda-bindings' major version is torch's CUDA's.
  for spec in pydantic pydantic-core annotated-types typing-extensions typing-inspection SQLAlchemy greenlet \
              alembic Mako platformdirs nccl4py "cuda-bindings==${CUDA_MAJOR:-13}.*" cuda-pathfinder; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d "$dest" "$spec"
  done
  du -sh "$dest"
  exit 0
fi

src=${1:?usage: scripts/gpu-check-prepare.sh SOURCE [REF] | --wheels [DIR]}
ref=${2:-v2.19.6}
dest=.device/nccl-tests
rm -rf "$dest"
mkdir -p "$dest"
if git --git-dir="$src" rev-parse --verify -q "$ref^{commit}" >/dev/null 2>&1; then
  git --git-dir="$src" archive --format=tar "$ref" | tar -x -C "$dest"
elif git -C "$src" rev-parse --verify -q "$ref^{commit}" >/dev/null 2>&1; then
  git -C "$src" archive --format=tar "$ref" | tar -x -C "$dest"
elif [ -f "$src/src/all_reduce.cu" ]; then
  cp -r "$src/." "$dest/"
else
  echo "error: $src is neither a git repository of nccl-tests with $ref nor its source tree" >&2
  exit 2
fi
echo "nccl-tests $(sed -n 's/.*NCCL_TESTS_VERSION *"\{0,1\}\([0-9.]*\).*/\1/p' "$dest/src/common.h" | head -1) in $dest"
