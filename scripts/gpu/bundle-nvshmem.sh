#!/usr/bin/env bash
# Builds everything an NVSHMEM machine needs to run the conformance matrix and the GPU bench,
# on a machine WITHOUT a GPU (the GPU machine has no Rust), into one folder to copy over:
#   scripts/gpu/bundle-nvshmem.sh [OUT_DIR]      (default: .device/nvshmem)
# Needs nvcc + NVSHMEM: NVSHMEM_HOME and CUDACXX, or scripts/gpu/nvshmem-sdk.sh to fetch them
# from PyPI. Then on the GPU machine: OUT_DIR/run-nvshmem.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.device/nvshmem}
if [ -z "${NVSHMEM_HOME:-}" ] || [ -z "${CUDACXX:-}" ]; then
  # shellcheck disable=SC1091
  source scripts/gpu/nvshmem-sdk.sh
fi
mkdir -p "$out"
# The product binaries only (symmem-matrix runs the matrix and the bench); no xtask.
bins=(symmem-matrix symmem-conformance symmem-gpu-bench symmem-run)
cargo build --release -p symmem-matrix -p symmem-conformance -p symmem-gpu -p symmem-launch --bins
shim=$(cargo xtask build-shim --backend nvshmem --nvcc "$CUDACXX" --nvshmem-home "$NVSHMEM_HOME")
rel=${CARGO_TARGET_DIR:-target}/release
for bin in "${bins[@]}"; do
  cp "$rel/$bin" "$out"/
  strip "$out/$bin"
done
cp "$shim" "$out"/
cp scripts/gpu/run-nvshmem.sh "$out"/
cp scripts/gpu/env.sh "$out"/
echo "bundle ready in $out ($(du -sh "$out" | cut -f1))"
