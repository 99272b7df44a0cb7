#!/usr/bin/env bash
# The conformance matrix through the GPU provider on a machine WITHOUT a GPU: the provider, its
# sibling contexts (checks 9 and 10b) and emulated nodes over the stand-in shim of
# crates/symmem-gpu/tests/stub/stub_shim.c (the shim's C ABI over host memory, one PE per
# process, heaps shared through files). Needs a C compiler (CC, default cc).
#   scripts/gpu/stub-matrix.sh [RANKS]        (default 1,2,4,8)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${CARGO_TARGET_DIR:-target}/shim/stub
mkdir -p "$out"
"${CC:-cc}" -shared -fPIC -Wall -Wextra -Werror -I crates/symmem-shim-sys/shim \
  -o "$out/libsymmem_shim_nvshmem.so" crates/symmem-gpu/tests/stub/stub_shim.c
bash .ci/check-shim-exports "$out/libsymmem_shim_nvshmem.so"
cargo xtask test --provider nvshmem --ranks "${1:-1,2,4,8}" \
  --shim-lib "$out/libsymmem_shim_nvshmem.so" --timeout 120s
