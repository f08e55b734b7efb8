#!/usr/bin/env bash
# The GPU check: one command a person with a GPU node runs, in one go (about 7 minutes on one H200):
#   scripts/gpu-check.sh OUT [NCCL_TESTS_SRC]
# It records the machine (nvidia-smi, versions, what NVML answers: scripts/gpu-check-nvml-probe.py), takes
# independent torch figures (HBM copy, pinned H2D/D2H, a bf16 GEMM; scripts/gpu-check-reference.py), runs `gpuval
# validate`, `gpuval health` twice (the card's own figures, twice: calibration), the GEMM burst in both orders
# (scripts/gpu-check-burst.py), `gpuval burn`, the busy guard beside another tenant and in a PID namespace of its
# own, the cuda_init edges (a stale MIG or GPU UUID, an index the node lacks), builds nccl-tests
# from NCCL_TESTS_SRC (default .device/nccl-tests; scripts/gpu-check-prepare.sh puts it there) against the NCCL in
# torch's package, runs `gpuval bench` beside its all_reduce_perf (benchmarks/bench_vs_nccltests.py: one GPU per
# thread, the median of -N 3, without and with -G 1 on both sides) and every collective through `gpuval bench`
# (sendrecv on one GPU too). Each step
# has its own time limit and a failed step never stops the next; OUT/steps.tsv lists every step's exit code and
# time, OUT/NAME.txt its output, and OUT/gpu-validation.md the tables of docs/gpu-validation.md for this machine.
# PYTHON names the interpreter that holds torch (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT [NCCL_TESTS_SRC]}
src=${2:-.device/nccl-tests}
py=${PYTHON:-python3}
build=${NCCL_TESTS_BUILD:-.device/nccl-tests-build}
mkdir -p "$out"
printf 'step\texit\tseconds\tcommand\n' > "$out/steps.tsv"
date -u +%Y-%m-%dT%H:%M:%SZ > "$out/started.txt"

step() {  # step NAME LIMIT_S COMMAND...: output to OUT/NAME.txt, a line in steps.tsv, never stops the check
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$out/$name.txt" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$*" >> "$out/steps.tsv"
  echo "[gpu-check] $name: exit $rc after $(( $(date +%s) - start )) s ($*)"
}

step env 60 bash -c "nvidia-smi; nvidia-smi -q; $py -c 'import torch, gpuval; print(\"torch\", torch.__version__, \
\"cuda\", torch.version.cuda, \"nccl\", torch.cuda.nccl.version(), \"gpuval\", gpuval.__version__)'; \
$py -c 'from gpuval.collectives.direct import choose_path; print(choose_path(\"auto\", True).describe())'"
# What NVML answers to the reads gpuval depends on: ids, field values 74/76/269-271/82 and 251-253, thresholds,
# memory used beside reserved, PCIe throughput, the process lists (MPS too), the PID namespace
step nvml-probe 30 "$py" scripts/gpu-check-nvml-probe.py

# nccl-tests builds on the CPUs while the GPU-bound steps run (a GEMM does not mind; the sweeps come after it),
# against the NCCL torch loads: its wheel has libnccl.so.2 only, so a private NCCL_HOME adds the libnccl.so link.
nccl_pkg=$($py -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
if [ ! -e "$nccl_pkg/lib/libnccl.so.2" ]; then  # another wheel layout (nvidia/cu13/...): the folder above the library
  lib=$($py -c 'import site; print(" ".join(site.getsitepackages()))' | xargs -n1 -I{} find {}/nvidia -name libnccl.so.2 \
        2>/dev/null | head -n 1)
  [ -n "$lib" ] && nccl_pkg=$(dirname "$(dirname "$lib")")
fi
echo "[gpu-check] NCCL for nccl-tests: ${nccl_pkg:-not found}"
home=$(realpath -m "$build/nccl-home")
mkdir -p "$home/lib"
ln -sfn "$nccl_pkg/include" "$home/include"
ln -sf "$nccl_pkg/lib/libnccl.so.2" "$home/lib/libnccl.so"
ln -sf "$nccl_pkg/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
gencode=$($py -c 'import torch; a, b = torch.cuda.get_device_capability(); print(f"-gencode=arch=compute_{a}{b},code=sm_{a}{b}")')
step nccl-tests-build 240 make -C "$src/src" -j"$(nproc)" BUILDDIR="$(realpath -m "$build")" NCCL_HOME="$home" \
  CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NVCC_GENCODE="$gencode" &
builder=$!
step reference 90 "$py" scripts/gpu-check-reference.py
step burn 60 "$py" -m gpuval burn --duration 20s
wait "$builder"
step validate 150 "$py" -m gpuval validate
step health 120 "$py" -m gpuval health
# Calibration: the card's own figures a second time (with the run above: two full runs of one card), then the
# production GEMM burst five times bf16-then-fp16 and five times fp16-then-bf16, 2 s apart (the burst's order effect
# and its repeatability size the burst bands' margins)
step health-2 120 "$py" -m gpuval health
step burst-order 120 "$py" scripts/gpu-check-burst.py 5 2
ngpus=$($py -c 'import torch; print(max(torch.cuda.device_count(), 1))' 2>/dev/null || echo 1)
# nccl-tests one GPU per thread (-t N -g 1) beside gpuval's N ranks, each row the median of -N 3 cycles; then both
# sides again as CUDA graphs (-G 1 against -G 1). Built above, or from the source here when the build failed.
if [ -x "$build/all_reduce_perf" ]; then
  reference=(--nccl-tests "$build/all_reduce_perf")
else
  reference=(--nccl-tests-src "$src")
fi
step bench 300 "$py" benchmarks/bench_vs_nccltests.py "${reference[@]}" --nprocs "$ngpus" -N 3 --out "$out/bench"
[ -x "$build/all_reduce_perf" ] || reference=(--nccl-tests "$out/bench/nccl-tests-build/all_reduce_perf")
step bench-graph 240 "$py" benchmarks/bench_vs_nccltests.py "${reference[@]}" --nprocs "$ngpus" -N 3 -G 1 \
  --out "$out/bench-graph"
# Every collective through the bench on this node's GPUs (sendrecv on one GPU too: a rank sends to itself, as
# nccl-tests' sendrecv_perf does); the step's exit code is the worst sweep's.
step collectives 240 bash -c "worst=0; for c in all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv \
  gather scatter; do \"$py\" -m gpuval bench \$c -b 8 -e 256M -f 4 -n 20 -w 5 --nprocs $ngpus; code=\$?; \
  [ \$code -gt \$worst ] && worst=\$code; done; exit \$worst"
# gpuval's NCCL RAS client (what `jobs diagnose` asks on each node) against this NCCL's RAS, beside one NCCL rank
step nccl-ras 90 "$py" scripts/gpu-check-ras.py
# The verdicts that must hold on any GPU node: another process using the GPU is GPU_BUSY (exit 2), never a
# hardware fault; GPUs hidden by CUDA_VISIBLE_DEVICES are an ERROR naming the variable (exit 2); a SKU that expects
# 8 GPUs fails gpu_count on fewer and says its all_reduce figure cannot be judged (exit 1).
step busy 90 bash -c "\"$py\" scripts/gpu-check-load.py 45 & sleep 8; \"$py\" -m gpuval health --check hbm_bandwidth \
  --check gemm_sustained; rc=\$?; kill %1; wait; exit \$rc"
# The busy guard where fleets run gpuval: burn beside another tenant must be GPU_BUSY (exit 2); health in a PID
# namespace of its own (as a container without --pid=host: NVML reports host pids there) must pass idle, and be
# GPU_BUSY beside a tenant and beside one pausing three quarters of the time (0.5 s on, 1.5 s off), the tenant named
# by host pid and "processes cannot be attributed here" said. Without PID namespaces (unshare refused) the step
# fails and says so.
step burn-busy 90 bash -c "\"$py\" scripts/gpu-check-load.py 45 & sleep 8; \"$py\" -m gpuval burn --duration 10s; \
  rc=\$?; kill %1; wait; exit \$rc"
ns="unshare -p -f --mount-proc"
[ "$(id -u)" = 0 ] || ns="unshare -r -p -f --mount-proc"
step pidns-idle 90 $ns "$py" -m gpuval health --check hbm_bandwidth --check gemm_tflops
step pidns-busy 90 bash -c "\"$py\" scripts/gpu-check-load.py 45 & sleep 8; $ns \"$py\" -m gpuval health \
  --check hbm_bandwidth; rc=\$?; kill %1; wait; exit \$rc"
step pidns-pausing 90 bash -c "\"$py\" scripts/gpu-check-load.py 45 0.5 1.5 & sleep 8; $ns \"$py\" -m gpuval health \
  --check hbm_bandwidth --check gemm_tflops; rc=\$?; kill %1; wait; exit \$rc"
# cuda_init edges: CUDA_VISIBLE_DEVICES naming a MIG instance NVML does not list, a GPU UUID it does not list, an
# index past the node's GPUs: each an ERROR naming the variable (exit 2), never a node FAIL
step cuda-stale-mig 60 env CUDA_VISIBLE_DEVICES=MIG-00000000-0000-0000-0000-000000000000 "$py" -m gpuval health \
  --check gpu_count --check cuda_init --check hbm_bandwidth
step cuda-stale-gpu 60 env CUDA_VISIBLE_DEVICES=GPU-deadbeef "$py" -m gpuval health --check gpu_count \
  --check cuda_init --check hbm_bandwidth
step cuda-index 60 env CUDA_VISIBLE_DEVICES="$ngpus" "$py" -m gpuval health --check gpu_count --check cuda_init \
  --check hbm_bandwidth
step hidden 60 env CUDA_VISIBLE_DEVICES=none "$py" -m gpuval health --check gpu_count --check cuda_init \
  --check hbm_bandwidth
step health-sku 90 "$py" -m gpuval health --sku Standard_ND96isr_H200_v5 --check gpu_count --check nccl_allreduce_node
step report 60 "$py" scripts/gpu-check-report.py "$out"
echo "[gpu-check] done: $out/gpu-validation.md"
