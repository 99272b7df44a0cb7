#!/usr/bin/env bash
# Runs on an NVIDIA GPU machine with NVSHMEM, from a bundle made by bundle-nvshmem.sh:
# the conformance matrix at 1/2/4/8 PEs (all on the visible GPUs; LOCAL_RANK picks the GPU),
# then the bench. Writes results.txt and bench.json next to itself, or into $RESULTS_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${RESULTS_DIR:-$here}
mkdir -p "$results"
# shellcheck source=scripts/gpu/env.sh
source "$here/env.sh"
nvshmem_env python3 || exit 1
export SYMMEM_GPU_HEAP_SIZE=${SYMMEM_GPU_HEAP_SIZE:-1G}
{
  machine_info
  nvidia-smi topo -m || true
} > "$results/machine.txt" 2>&1
cat "$results/machine.txt"
status=0
"$here/symmem-matrix" test --provider nvshmem --ranks "${RANKS:-1,2,4,8}" \
  --rank-binary "$here/symmem-conformance" --shim-lib "$here/libsymmem_shim_nvshmem.so" \
  --timeout 300s 2>&1 | tee "$results/results.txt" || status=1

# The bench: allocation latency and the all-to-all store at every rank count, copy (translated,
# untranslated, runtime peer and device-to-device) and store bandwidth at 2 PEs. Each rank takes
# GPU LOCAL_RANK % GPUs, so a machine with several GPUs gives per-GPU (link) figures as is.
"$here/symmem-matrix" bench --provider nvshmem --ranks "${BENCH_RANKS:-1,2,4,8}" \
  --bench-binary "$here/symmem-gpu-bench" --shim-lib "$here/libsymmem_shim_nvshmem.so" \
  --out "$results/bench.jsonl" || status=1
exit $status
