# shellcheck shell=bash
# The NVSHMEM environment that run-nvshmem.sh and run-python.sh share; sourced, never run, from
# the bundle folder (the bundle scripts copy it next to them):
#
#   source "$here/env.sh"
#   nvshmem_env PYTHON || exit 1    # finds NVSHMEM, exports LD_LIBRARY_PATH and the NVLS switches
#   { machine_info; ...; } >"$results/machine.txt" 2>&1
#
# NVSHMEM_LIB: the folder of libnvshmem_host.so.3; default: the one of PYTHON's nvidia.nvshmem
# (the pip wheel nvidia-nvshmem-cu13, which torch installs).

# Sets nvshmem_lib and exports the environment; prints why and returns 1 when NVSHMEM is missing.
nvshmem_env() {
  local python=$1
  nvshmem_lib=${NVSHMEM_LIB:-$("$python" -c 'import nvidia.nvshmem, os; print(os.path.join(list(nvidia.nvshmem.__path__)[0], "lib"))' 2>/dev/null || true)}
  if [ -z "$nvshmem_lib" ] || [ ! -e "$nvshmem_lib/libnvshmem_host.so.3" ]; then
    echo "NVSHMEM's libnvshmem_host.so.3 not found (no nvidia.nvshmem for $python): set NVSHMEM_LIB to its folder" >&2
    return 1
  fi
  export LD_LIBRARY_PATH="$nvshmem_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Multicast (NVLS) is forbidden on these machines: off for NVSHMEM (the shim forces it too)
  # and for NCCL.
  export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0
}

# The machine's part of machine.txt: the date, the GPUs and driver, the NVSHMEM folder.
machine_info() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "nvshmem: $nvshmem_lib"
}
