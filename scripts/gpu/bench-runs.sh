#!/usr/bin/env bash
# Runs the GPU bench of one or more bundles (scripts/gpu/bundle-nvshmem.sh) at 1, 2, 4 and 8 PEs,
# one run after another, on an NVIDIA machine with NVSHMEM: what `xtask bench` runs at each PE
# count, without its 2-PE copy sweep (minutes of device time). For before/after comparisons and
# for run-to-run agreement:
#   scripts/gpu/bench-runs.sh LABEL=BUNDLE_DIR [LABEL=BUNDLE_DIR ...]
# e.g. bench-runs.sh before=old after-1=new after-2=new. Each label's figures (rank 0's JSON
# lines) go to RESULTS_DIR/LABEL.jsonl (default: $OUT, else ./bench-runs), the whole output to
# LABEL.log. A bundle without symmem-run uses the first bundle's.
set -uo pipefail
results=${RESULTS_DIR:-${OUT:-bench-runs}}
mkdir -p "$results"
nv=${NVSHMEM_LIB:-$(python3 -c 'import nvidia.nvshmem, os; print(os.path.join(list(nvidia.nvshmem.__path__)[0], "lib"))' 2>/dev/null || true)}
[ -e "$nv/libnvshmem_host.so.3" ] || { echo "libnvshmem_host.so.3 not found: set NVSHMEM_LIB" >&2; exit 1; }
export LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Multicast is forbidden on these machines; the shim forces this too.
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
# The memory figure allocates 1 GiB at once (as `xtask bench` sets it).
export SYMMEM_GPU_HEAP_SIZE=${SYMMEM_GPU_HEAP_SIZE:-2G}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader \
  | tee "$results/machine.txt"
launcher=
status=0
for spec in "$@"; do
  label=${spec%%=*} bundle=${spec#*=}
  [ -n "$launcher" ] || launcher="$bundle/symmem-run"
  [ -x "$bundle/symmem-run" ] && launcher="$bundle/symmem-run"
  : > "$results/$label.log"
  for n in ${RANKS:-1 2 4 8}; do
    echo "== $label: $n PEs"
    SYMMEM_SHIM_LIB="$bundle/libsymmem_shim_nvshmem.so" "$launcher" --ranks "$n" --timeout 280s \
      -- "$bundle/symmem-gpu-bench" nvshmem >> "$results/$label.log" 2>&1 || status=1
  done
  grep -o '^\[rank 0\] {.*}' "$results/$label.log" | sed 's/^\[rank 0\] //' | tee "$results/$label.jsonl"
done
exit $status
