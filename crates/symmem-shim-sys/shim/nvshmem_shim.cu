// The NVSHMEM implementation of symmem_shim.h (built by nvcc with -rdc=true): CUDA and NVSHMEM
// under the names common.inc uses, and NVSHMEM's own settings. Everything else is common.inc.
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdlib.h>

#define SYMMEM_BACKEND_NAME "nvshmem"

// ---- the GPU runtime: CUDA ----
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaError_t gpuError_t;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuDeviceGetPCIBusId cudaDeviceGetPCIBusId
#define gpuDeviceGetByPCIBusId cudaDeviceGetByPCIBusId
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyPeerAsync cudaMemcpyPeerAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuStreamDestroy cudaStreamDestroy
#define gpuEventCreate cudaEventCreate
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy

// ---- the SHMEM library: NVSHMEM ----
#define SHMEM_NAME "NVSHMEM"
typedef nvshmemx_uniqueid_t shmemUniqueId_t;
typedef nvshmemx_init_attr_t shmemInitAttr_t;
#define SHMEM_INIT_ATTR_INITIALIZER NVSHMEMX_INIT_ATTR_INITIALIZER
#define shmemGetUniqueId nvshmemx_get_uniqueid
#define shmemSetAttrUniqueIdArgs nvshmemx_set_attr_uniqueid_args
#define shmemInitAttrUniqueId(attr) nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, attr)
#define shmemMyPe nvshmem_my_pe
#define shmemNPes nvshmem_n_pes
#define shmemFinalize nvshmem_finalize
#define shmemMalloc nvshmem_malloc
#define shmemFree nvshmem_free
#define shmemPtr nvshmem_ptr
#define shmemBarrierAll nvshmem_barrier_all

#define SHMEM_HEAP_SIZE_ENV "NVSHMEM_SYMMETRIC_SIZE"
#define SHMEM_IFNAME_ENV "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"
#define SHMEM_INIT_HINT                                                                   \
  "see NVSHMEM's output (NVSHMEM_DEBUG=INFO for more; NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME picks " \
  "the network interface)"

static void shim_configure_library(void) {
  // Multicast (NVLS) is forbidden on the machines symmem targets; it is never used here.
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
}

#include "common.inc"
