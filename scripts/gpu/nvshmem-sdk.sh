#!/usr/bin/env bash
# Fetches nvcc and NVSHMEM from PyPI (no GPU, no CUDA install needed) into SDK_DIR and exports
# CUDACXX and NVSHMEM_HOME. Source it:  source scripts/gpu/nvshmem-sdk.sh
# The versions are pins.toml's [nvshmem] table: the GPU machine's NVSHMEM and the CUDA wheels
# that go with it (they must move together: a newer nvvm breaks ptxas with "Unsupported
# .version"). A folder fetched for other versions is fetched again.
sdk=${SDK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/symmem/nvshmem-sdk}
pin=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/pin
nvshmem_version=$("$pin" nvshmem.version) && cuda_version=$("$pin" nvshmem.cuda) || return 1
cu=cu${cuda_version%%.*}
wheels=("nvidia-cuda-nvcc==$cuda_version" "nvidia-cuda-runtime==$cuda_version"
  "nvidia-cuda-crt==$cuda_version" "nvidia-cuda-cccl==$cuda_version"
  "nvidia-nvvm==$cuda_version" "nvidia-nvshmem-$cu==$nvshmem_version")
if [ ! -x "$sdk/nvidia/$cu/bin/nvcc" ] || [ ! -f "$sdk/nvidia/nvshmem/include/nvshmem.h" ] \
  || [ "$(cat "$sdk/pins.txt" 2>/dev/null)" != "${wheels[*]}" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$sdk" "${wheels[@]}" \
    || return 1
  echo "${wheels[*]}" >"$sdk/pins.txt"
fi
# nvcc looks for its libraries in lib64; the wheels ship lib.
[ -e "$sdk/nvidia/$cu/lib64" ] || ln -s lib "$sdk/nvidia/$cu/lib64"
export CUDACXX="$sdk/nvidia/$cu/bin/nvcc"
export NVSHMEM_HOME="$sdk/nvidia/nvshmem"
