// The rocSHMEM implementation of symmem_shim.h (built by hipcc with -fgpu-rdc and linked with
// --hip-link against rocSHMEM's static library, so the device link happens in this library):
// HIP and rocSHMEM under the names common.inc uses, and rocSHMEM's own settings. Everything
// else is common.inc.
#include <hip/hip_runtime.h>
// rocSHMEM's headers use std::array without including it.
#include <array>
#include <rocshmem/rocshmem.hpp>
#include <stdlib.h>

#define SYMMEM_BACKEND_NAME "rocshmem"

// ---- the GPU runtime: HIP ----
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
typedef hipError_t gpuError_t;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuDeviceGetPCIBusId hipDeviceGetPCIBusId
#define gpuDeviceGetByPCIBusId hipDeviceGetByPCIBusId
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemGetInfo hipMemGetInfo
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyPeerAsync hipMemcpyPeerAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuStreamDestroy hipStreamDestroy
#define gpuEventCreate hipEventCreate
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy

// ---- the SHMEM library: rocSHMEM ----
#define SHMEM_NAME "rocSHMEM"
typedef rocshmem::rocshmem_uniqueid_t shmemUniqueId_t;
typedef rocshmem::rocshmem_init_attr_t shmemInitAttr_t;
#define SHMEM_INIT_ATTR_INITIALIZER {}
#define shmemGetUniqueId rocshmem::rocshmem_get_uniqueid
#define shmemSetAttrUniqueIdArgs rocshmem::rocshmem_set_attr_uniqueid_args
#define shmemInitAttrUniqueId(attr) \
  rocshmem::rocshmem_init_attr(rocshmem::ROCSHMEM_INIT_WITH_UNIQUEID, attr)
#define shmemMyPe rocshmem::rocshmem_my_pe
#define shmemNPes rocshmem::rocshmem_n_pes
#define shmemFinalize rocshmem::rocshmem_finalize
#define shmemMalloc rocshmem::rocshmem_malloc
#define shmemFree rocshmem::rocshmem_free
#define shmemPtr rocshmem::rocshmem_ptr
#define shmemBarrierAll rocshmem::rocshmem_barrier_all

#define SHMEM_HEAP_SIZE_ENV "ROCSHMEM_HEAP_SIZE"
#define SHMEM_IFNAME_ENV "ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME"
#define SHMEM_INIT_HINT \
  "see rocSHMEM's output (ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME picks the network interface)"

static void shim_configure_library(void) {
  // Eight ranks on one node need more than the default bootstrap timeout.
  setenv("ROCSHMEM_BOOTSTRAP_TIMEOUT", "120", 0);
}

#include "common.inc"
