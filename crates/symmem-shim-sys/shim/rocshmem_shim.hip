// The rocSHMEM implementation of symmem_shim.h (built by hipcc with -fgpu-rdc and linked with
// --hip-link against rocSHMEM's static library, so the device link happens in this library).
#include <hip/hip_runtime.h>
// rocSHMEM's headers use std::array without including it.
#include <array>
#include <rocshmem/rocshmem.hpp>

#define SYMMEM_BACKEND_NAME "rocshmem"
typedef hipStream_t gpuStream_t;
typedef hipError_t gpuError_t;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamDestroy hipStreamDestroy
#define gpuMemsetAsync hipMemsetAsync

#include "common.inc"

extern "C" {

int symmem_shim_configure(size_t heap_bytes, int single_node) {
  if (g_initialized) return shim_fail(SYMMEM_SHIM_ERR_STATE, "configure: already initialised");
  // Eight ranks on one node need more than the default bootstrap timeout.
  setenv("ROCSHMEM_BOOTSTRAP_TIMEOUT", "120", 0);
  if (heap_bytes != 0) shim_setenv_size("ROCSHMEM_HEAP_SIZE", heap_bytes);
  if (single_node) setenv("ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME", "lo", 0);
  g_configured = 1;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_unique_id_size(size_t *size) {
  if (size == nullptr) return shim_fail(SYMMEM_SHIM_ERR_INVALID, "unique_id_size: null output");
  *size = sizeof(rocshmem::rocshmem_uniqueid_t);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_get_unique_id(uint8_t *id, size_t size) {
  if (!g_configured)
    return shim_fail(SYMMEM_SHIM_ERR_STATE, "get_unique_id: call symmem_shim_configure first");
  if (id == nullptr || size != sizeof(rocshmem::rocshmem_uniqueid_t))
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "get_unique_id: buffer must be %zu bytes",
                     sizeof(rocshmem::rocshmem_uniqueid_t));
  rocshmem::rocshmem_uniqueid_t uid;
  if (rocshmem::rocshmem_get_uniqueid(&uid) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "rocshmem_get_uniqueid failed");
  memcpy(id, &uid, sizeof uid);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size) {
  if (g_initialized) return shim_fail(SYMMEM_SHIM_ERR_STATE, "init: already initialised");
  if (!g_configured)
    return shim_fail(SYMMEM_SHIM_ERR_STATE, "init: call symmem_shim_configure first");
  if (id == nullptr || id_size != sizeof(rocshmem::rocshmem_uniqueid_t) || n_pes <= 0 ||
      rank < 0 || rank >= n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "init: bad rank %d of %d or unique id size %zu",
                     rank, n_pes, id_size);
  rocshmem::rocshmem_uniqueid_t uid;
  memcpy(&uid, id, sizeof uid);
  rocshmem::rocshmem_init_attr_t attr{};
  if (rocshmem::rocshmem_set_attr_uniqueid_args(rank, n_pes, &uid, &attr) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "rocshmem_set_attr_uniqueid_args failed");
  if (rocshmem::rocshmem_init_attr(rocshmem::ROCSHMEM_INIT_WITH_UNIQUEID, &attr) != 0)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND,
                     "rocshmem_init_attr failed: see rocSHMEM's output "
                     "(ROCSHMEM_BOOTSTRAP_SOCKET_IFNAME picks the network interface)");
  if (rocshmem::rocshmem_my_pe() != rank || rocshmem::rocshmem_n_pes() != n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND, "rocSHMEM says PE %d of %d, expected %d of %d",
                     rocshmem::rocshmem_my_pe(), rocshmem::rocshmem_n_pes(), rank, n_pes);
  int st = shim_start_stream();
  if (st != SYMMEM_SHIM_OK) return st;
  g_n_pes = n_pes;
  g_initialized = 1;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_finalize(void) {
  REQUIRE_INIT();
  GPU_CHECK(hipStreamSynchronize(g_stream), "draining the stream");
  GPU_CHECK(hipStreamDestroy(g_stream), "destroying the stream");
  rocshmem::rocshmem_finalize();
  g_initialized = 0;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_my_pe(int *pe) {
  REQUIRE_INIT();
  if (pe == nullptr) return shim_fail(SYMMEM_SHIM_ERR_INVALID, "my_pe: null output");
  *pe = rocshmem::rocshmem_my_pe();
  return SYMMEM_SHIM_OK;
}

int symmem_shim_malloc(size_t bytes, void **ptr) {
  REQUIRE_INIT();
  if (ptr == nullptr || bytes == 0)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "malloc: null output or zero bytes");
  *ptr = rocshmem::rocshmem_malloc(bytes);
  if (*ptr == nullptr)
    return shim_fail(SYMMEM_SHIM_ERR_BACKEND,
                     "rocshmem_malloc(%zu) failed: symmetric heap exhausted? raise the heap size",
                     bytes);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_free(void *ptr) {
  REQUIRE_INIT();
  // Kernels still queued may touch the allocation.
  GPU_CHECK(gpuStreamSynchronize(g_stream), "draining the stream before a free");
  rocshmem::rocshmem_free(ptr);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_ptr(const void *ptr, int pe, void **out) {
  REQUIRE_INIT();
  if (out == nullptr || pe < 0 || pe >= g_n_pes)
    return shim_fail(SYMMEM_SHIM_ERR_INVALID, "ptr: null output or PE %d outside 0..%d", pe,
                     g_n_pes - 1);
  *out = rocshmem::rocshmem_ptr(ptr, pe);
  return SYMMEM_SHIM_OK;
}

int symmem_shim_barrier_all(void) {
  REQUIRE_INIT();
  GPU_CHECK(hipStreamSynchronize(g_stream), "draining the stream before a barrier");
  rocshmem::rocshmem_barrier_all();
  return SYMMEM_SHIM_OK;
}

}  // extern "C"
