// The NVSHMEM implementation of symmem_shim.h (built by nvcc with -rdc=true).
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#define SYMMEM_BACKEND_NAME "nvshmem"
typedef cudaStream_t gpuStream_t;
typedef cudaError_t gpuError_t;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamDestroy cudaStreamDestroy
#define gpuMemsetAsync cudaMemsetAsync

#include "common.inc"

extern "C" {

int symmem_shim_configure(size_t heap_bytes, int single_node) {
  if (g_initialized) return shim_fail(SYMMEM_SHIM_ERR_STATE, "configure: already initialised");
  // Multicast (NVLS) is forbidden on the machines symmem targets; it is never used here.
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  if (heap_bytes != 0) shim_setenv_size("NVSHMEM_SYMMETRIC_SIZE", heap_bytes);
  if (single_node) setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo", 0);
  g_configured = 1;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_unique_id_size(size_t *size) {
  if (size == nullptr) return shim_fail(SYMMEM_SHIM_ERR_INVALID, "unique_id_size: null output");
  *size = sizeof(nvshmemx_uniqueid_t);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_get_unique_id(uint8_t *id, size_t size) {
  if (!g_configured)
    return shim_fail(SYMMEM_SHIM_ERR_STATE, "get_unique_id: call symmem_shim_configure first");
  if (id == nullptr || size != sizeof(nvshmemx_uniqueid_t))
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "get_unique_id: buffer must be %zu bytes",
                     sizeof(nvshmemx_uniqueid_t));
  nvshmemx_uniqueid_t uid;
  if (nvshmemx_get_uniqueid(&uid) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "nvshmemx_get_uniqueid failed");
  memcpy(id, &uid, sizeof uid);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size) {
  if (g_initialized) return shim_fail(SYMMEM_SHIM_ERR_STATE, "init: already initialised");
  if (!g_configured)
    return shim_fail(SYMMEM_SHIM_ERR_STATE, "init: call symmem_shim_configure first");
  if (id == nullptr || id_size != sizeof(nvshmemx_uniqueid_t) || n_pes <= 0 || rank < 0 ||
      rank >= n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "init: bad rank %d of %d or unique id size %zu",
                     rank, n_pes, id_size);
  nvshmemx_uniqueid_t uid;
  memcpy(&uid, id, sizeof uid);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(rank, n_pes, &uid, &attr) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "nvshmemx_set_attr_uniqueid_args failed");
  if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND,
                     "nvshmemx_init_attr failed: see NVSHMEM's output (NVSHMEM_DEBUG=INFO for more; "
                     "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME picks the network interface)");
  if (nvshmem_my_pe() != rank || nvshmem_n_pes() != n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "NVSHMEM says PE %d of %d, expected %d of %d",
                     nvshmem_my_pe(), nvshmem_n_pes(), rank, n_pes);
  int st = shim_start_stream();
  if (st != SYMMEM_SHIM_OK) return st;
  g_n_pes = n_pes;
  g_initialized = 1;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_finalize(void) {
  REQUIRE_INIT();
  GPU_CHECK(cudaStreamSynchronize(g_stream), "draining the stream");
  GPU_CHECK(cudaStreamDestroy(g_stream), "destroying the stream");
  nvshmem_finalize();
  g_initialized = 0;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_my_pe(int *pe) {
  REQUIRE_INIT();
  if (pe == nullptr) return shim_fail(SYMMEM_SHIM_ERR_INVALID, "my_pe: null output");
  *pe = nvshmem_my_pe();
  return SYMMEM_SHIM_OK;
}

int symmem_shim_malloc(size_t bytes, void **ptr) {
  REQUIRE_INIT();
  if (ptr == nullptr || bytes == 0)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "malloc: null output or zero bytes");
  *ptr = nvshmem_malloc(bytes);
  if (*ptr == nullptr)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND,
                     "nvshmem_malloc(%zu) failed: symmetric heap exhausted? raise the heap size",
                     bytes);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_free(void *ptr) {
  REQUIRE_INIT();
  // Kernels still queued may touch the allocation.
  GPU_CHECK(gpuStreamSynchronize(g_stream), "draining the stream before a free");
  nvshmem_free(ptr);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_ptr(const void *ptr, int pe, void **out) {
  REQUIRE_INIT();
  if (out == nullptr || pe < 0 || pe >= g_n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "ptr: null output or PE %d outside 0..%d", pe,
                     g_n_pes - 1);
  *out = nvshmem_ptr(ptr, pe);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_barrier_all(void) {
  REQUIRE_INIT();
  // Work queued before the barrier must be done before peers read it.
  GPU_CHECK(cudaStreamSynchronize(g_stream), "draining the stream before a barrier");
  nvshmem_barrier_all();
  return SYMMEM_SHIM_OK;
}

}  // extern "C"
