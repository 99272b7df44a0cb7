#!/usr/bin/env bash
# Fetches nvcc and NVSHMEM from PyPI (no GPU, no CUDA install needed) into SDK_DIR and exports
# CUDACXX and NVSHMEM_HOME. Source it:  source scripts/gpu/nvshmem-sdk.sh
# The versions match the GPU machine's NVSHMEM 3.4.5 and must move together (a newer nvvm
# breaks ptxas with "Unsupported .version").
sdk=${SDK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/symmem/nvshmem-sdk}
if [ ! -x "$sdk/nvidia/cu13/bin/nvcc" ] || [ ! -f "$sdk/nvidia/nvshmem/include/nvshmem.h" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$sdk" \
    "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" \
    "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-nvshmem-cu13==3.4.5"
fi
# nvcc looks for its libraries in lib64; the wheels ship lib.
[ -e "$sdk/nvidia/cu13/lib64" ] || ln -s lib "$sdk/nvidia/cu13/lib64"
export CUDACXX="$sdk/nvidia/cu13/bin/nvcc"
export NVSHMEM_HOME="$sdk/nvidia/nvshmem"
