#!/usr/bin/env bash
# Builds what an NVSHMEM machine WITHOUT Rust needs to run the Python face's Triton test, on a
# machine without a GPU, into one folder to carry over:
#   scripts/gpu/bundle-python.sh [OUT_DIR]      (default: target/gpu-bundle, git-ignored)
# It holds the abi3 wheel (CPython 3.9+; `cargo xtask wheel --backend nvshmem`, so the NVSHMEM
# shim is inside it too), symmem-run, the NVSHMEM shim, the Triton test, the allocation benches
# (symmem-gpu-bench for the Rust side, benches/*.py for Python's) and run-python.sh. Needs nvcc +
# NVSHMEM (NVSHMEM_HOME and CUDACXX, else scripts/gpu/nvshmem-sdk.sh fetches them from PyPI) and
# PyPI for maturin. Then on the GPU machine: OUT_DIR/run-python.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-target/gpu-bundle}
target=${CARGO_TARGET_DIR:-target}
if [ -z "${NVSHMEM_HOME:-}" ] || [ -z "${CUDACXX:-}" ]; then
  # shellcheck disable=SC1091
  source scripts/gpu/nvshmem-sdk.sh
fi
mkdir -p "$out"
rm -f "$out"/symmem-*.whl
cargo build --release --locked -p symmem-launch --bin symmem-run -p symmem-gpu --bin symmem-gpu-bench
# The wheel builds the shim as `cargo xtask build-shim` does, into $target/shim/nvshmem, and
# carries it; run-python.sh still loads the copy beside it (SYMMEM_SHIM_LIB).
cargo xtask wheel --backend nvshmem --release --nvcc "$CUDACXX" --nvshmem-home "$NVSHMEM_HOME" \
  --out "$out" >/dev/null
shim="$target/shim/nvshmem/lib/libsymmem_shim_nvshmem.so"
for bin in symmem-run symmem-gpu-bench; do
  cp "$target/release/$bin" "$out"/
  strip "$out/$bin"
done
cp "$shim" "$out"/
cp crates/symmem-py/tests/gpu/triton_alltoall.py crates/symmem-py/benches/*.py \
  scripts/gpu/run-python.sh "$out"/
cp scripts/gpu/env.sh "$out"/
ls -l "$out"
echo "bundle ready in $out ($(du -sh "$out" | cut -f1))"
