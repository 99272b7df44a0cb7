#!/usr/bin/env bash
# A GPU user's path, on an NVIDIA machine whose Python (PYTHON, default the torch venv
# /opt/torch/.venv/bin/python3) has torch, Triton and the nvidia-nvshmem-cu13 wheel:
# `pip install --no-index` of the NVIDIA wheel that `cargo xtask wheel --backend nvshmem` made
# into that very environment (uninstalled again at the end; no SYMMEM_SHIM_LIB, no symmem-run,
# no index), then
#   torchrun --nproc-per-node N triton_alltoall.py [--iris]       at each of RANKS (default 2 4 8)
# and the allocation bench (benches/alloc_free.py: the `iris` case is symmem.iris.Provider, the
# `torch` case symmem.allocate_symmetric, in the same job) under torchrun at each of BENCH_RANKS
# (default "1 2 4 8", a count may repeat; BENCH_PAIRS, default 100). The wheel's own backend
# runs: no provider is named anywhere. Folder layout: the wheel, triton_alltoall.py,
# alloc_free.py, profile_steps.py and this script side by side. Writes logs, summary.txt and
# bench.jsonl (rank 0's figures) into $RESULTS_DIR (default: $OUT, else results/ here).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${RESULTS_DIR:-${OUT:-$here/results}}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$results"
fail() { echo "run-wheel: $*" | tee -a "$results/summary.txt" >&2; exit 1; }

wheels=("$here"/symmem-*-abi3-*.whl)
wheel=${wheels[0]}
[ -e "$wheel" ] || fail "no symmem wheel in $here: cargo xtask wheel --backend nvshmem --out $here"
[ -x "$python" ] || fail "no Python at $python: set PYTHON"
py=$python
"$py" -m pip show symmem >/dev/null 2>&1 && fail "$py already has a symmem: this script installs its own and removes it"
trap '"$py" -m pip uninstall --quiet --yes symmem' EXIT
# --no-index: the wheel's one dependency (nvidia-nvshmem-cu13) must already be there.
"$py" -m pip install --quiet --no-index --disable-pip-version-check "$wheel" \
  || fail "pip install $wheel failed (above)"
unset SYMMEM_SHIM_LIB SYMMEM_PROVIDER SYMMEM_RENDEZVOUS
export NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
{
  echo "wheel: $(basename "$wheel")"
  "$py" -m pip show symmem | sed -n 's/^\(Version\|Requires\):/\1:/p'
  "$py" -c 'import torch, triton, symmem, symmem._shim as s; print("torch", torch.__version__, "triton", triton.__version__, "symmem", symmem.__file__); print("shim", s.locate("nvshmem")); print("build", s.packaged())'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
} | tee -a "$results/summary.txt"

run_torchrun() {  # N LOG ARGS...
  local n=$1 log=$2
  shift 2
  timeout "${RUN_TIMEOUT:-240}" "$py" -m torch.distributed.run --standalone --nproc-per-node "$n" \
    "$@" >"$log" 2>&1
}

status=0
for n in ${RANKS-2 4 8}; do
  for how in plain iris; do
    log="$results/triton-$how-$n.log"
    flag=()
    [ "$how" = iris ] && flag=(--iris)
    if run_torchrun "$n" "$log" "$here/triton_alltoall.py" "${flag[@]}"; then
      echo "[$how] $(grep -h "SUMMARY" "$log")" | tee -a "$results/summary.txt"
    else
      echo "[$how] triton all-to-all at $n PEs: FAILED (rc $?), see $(basename "$log")" | tee -a "$results/summary.txt"
      tail -n 30 "$log"
      status=1
    fi
  done
done
run=0
for n in ${BENCH_RANKS-1 2 4 8}; do
  run=$((run + 1))
  log="$results/bench-$run-$n.log"
  if run_torchrun "$n" "$log" "$here/alloc_free.py" --pairs "${BENCH_PAIRS:-100}"; then
    grep -h '^{' "$log" | sed "s/^{/{\"run\": $run, /" >>"$results/bench.jsonl"
    echo "bench at $n PEs: $(grep -c '^{' "$log") figures" | tee -a "$results/summary.txt"
  else
    echo "bench at $n PEs: FAILED, see $(basename "$log")" | tee -a "$results/summary.txt"
    tail -n 30 "$log"
    status=1
  fi
done
exit $status
