#!/usr/bin/env bash
# Runs on an NVIDIA machine with NVSHMEM, torch and Triton, from a bundle made by
# bundle-python.sh: installs the symmem wheel into a private folder (no Rust, no index needed),
# then the Triton all-to-all (tests/gpu/triton_alltoall.py) under symmem-run at 2, 4 and 8 PEs
# on the visible GPUs (several PEs share a GPU), then the allocation bench: the Rust bench
# (symmem-gpu-bench: Context and raw NVSHMEM) and the Python one (alloc_free.py: the Python face,
# with a profile of its steps at 1 PE) at each of BENCH_RANKS, the same job on the same GPU.
# Writes one log per run, machine.txt, summary.txt and bench.jsonl (rank 0's figures) into
# $RESULTS_DIR (default: $OUT, else results/ next to this script).
# Settings: PYTHON (default /opt/torch/.venv/bin/python3), RANKS (default "2 4 8"),
# BENCH_RANKS (default "1 2 4 8"; empty: no bench), BENCH_PAIRS (default 100),
# BENCH_PROFILE (the PE counts whose Python bench adds the profile of its steps; default "1"),
# NVSHMEM_LIB (folder of libnvshmem_host.so.3; default: the one next to PYTHON's nvidia.nvshmem),
# SYMMEM_GPU_HEAP_SIZE (default 512M per PE), RUN_TIMEOUT (per PE count, default 180s).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${RESULTS_DIR:-${OUT:-$here/results}}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$results"
fail() { echo "run-python: $*" | tee -a "$results/summary.txt" >&2; exit 1; }

wheels=("$here"/symmem-*-abi3-*.whl)
wheel=${wheels[0]}
[ -e "$wheel" ] || fail "no symmem wheel in $here: run scripts/gpu/bundle-python.sh"
[ -x "$python" ] || fail "no Python at $python: set PYTHON"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
if ! "$python" -m pip install --quiet --no-deps --disable-pip-version-check --target "$site" "$wheel"; then
  # A wheel is a zip archive: without pip, unpacking it is the whole install.
  "$python" -m zipfile -e "$wheel" "$site" || fail "cannot install $wheel"
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

# With several PEs per GPU, NVSHMEM asks `echo get_server_list | nvidia-cuda-mps-control` (popen)
# whether MPS runs. Without an MPS daemon the tool exits without reading its input; the echo,
# whose SIGPIPE the Python rank ignores, then fails on the closed pipe and prints
# "sh: 1: echo: echo: I/O error" on the rank's stderr. In front of the real tool, this wrapper
# reads the question first.
if MPS_CONTROL_REAL=$(command -v nvidia-cuda-mps-control); then
  export MPS_CONTROL_REAL
  mkdir -p "$site/.mps-bin"
  # shellcheck disable=SC2016 # the wrapper's own variables, expanded when it runs
  printf '%s\n' '#!/bin/sh' 'question=$(cat)' 'exec "$MPS_CONTROL_REAL" "$@" <<EOF' '$question' 'EOF' \
    > "$site/.mps-bin/nvidia-cuda-mps-control"
  chmod +x "$site/.mps-bin/nvidia-cuda-mps-control"
  export PATH="$site/.mps-bin:$PATH"
fi

# shellcheck source=scripts/gpu/env.sh
source "$here/env.sh"
nvshmem_env "$python" || fail "no NVSHMEM for $python (above): set NVSHMEM_LIB"
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}
export SYMMEM_PROVIDER=nvshmem SYMMEM_SHIM_LIB="$here/libsymmem_shim_nvshmem.so"
export SYMMEM_GPU_HEAP_SIZE=${SYMMEM_GPU_HEAP_SIZE:-512M}
export TMPDIR=${TMPDIR:-/tmp} PYTHONUNBUFFERED=1

{
  machine_info
  echo "wheel: $(basename "$wheel")"
  "$python" -c 'import sys, torch, triton, symmem; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "symmem", symmem.__file__)'
} > "$results/machine.txt" 2>&1
cat "$results/machine.txt"

status=0
: > "$results/summary.txt"
for n in ${RANKS:-2 4 8}; do
  log="$results/triton-alltoall-$n.txt"
  "$here/symmem-run" --ranks "$n" --timeout "${RUN_TIMEOUT:-180s}" -- \
    "$python" "$here/triton_alltoall.py" > "$log" 2>&1
  code=$?
  cat "$log"
  passed=$(grep -c ': PASS triton alltoall' "$log")
  summary=$(grep -o 'SUMMARY .*' "$log" | head -n 1)
  verdict=FAIL
  [ "$code" -eq 0 ] && [ "$passed" -eq "$n" ] && [[ "$summary" == "SUMMARY PASS"* ]] && verdict=PASS
  [ "$verdict" = PASS ] || status=1
  echo "$verdict PEs=$n exit=$code rank PASS lines=$passed/$n ${summary:-no SUMMARY line}" \
    | tee -a "$results/summary.txt"
done
bench_runs() {
  local n heap=${BENCH_HEAP_SIZE:-2G}
  : > "$results/bench.jsonl"
  for n in ${BENCH_RANKS-1 2 4 8}; do
    # The Rust bench's memory figure allocates 1 GiB at once: a 2 GiB heap per PE.
    SYMMEM_GPU_HEAP_SIZE=$heap "$here/symmem-run" --ranks "$n" --timeout 280s -- \
      "$here/symmem-gpu-bench" nvshmem > "$results/bench-rust-$n.txt" 2>&1 || status=1
    local profile=()
    [[ " ${BENCH_PROFILE:-1} " == *" $n "* ]] && profile=(--profile)
    SYMMEM_GPU_HEAP_SIZE=$heap "$here/symmem-run" --ranks "$n" --timeout 280s -- \
      "$python" "$here/alloc_free.py" --pairs "${BENCH_PAIRS:-100}" "${profile[@]}" \
      > "$results/bench-python-$n.txt" 2>&1 || status=1
    grep -ho '^\[rank 0\] {.*}' "$results/bench-rust-$n.txt" "$results/bench-python-$n.txt" \
      | sed 's/^\[rank 0\] //' | tee -a "$results/bench.jsonl"
  done
  echo "bench: $(wc -l < "$results/bench.jsonl") figures in bench.jsonl" | tee -a "$results/summary.txt"
}
[ -x "$here/symmem-gpu-bench" ] && [ -n "${BENCH_RANKS-1 2 4 8}" ] && bench_runs

echo "overall: $([ "$status" -eq 0 ] && echo PASS || echo FAIL)" | tee -a "$results/summary.txt"
exit "$status"
