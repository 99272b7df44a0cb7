/*
 * symmem shim: the C ABI between symmem (Rust) and a SHMEM library (NVSHMEM or rocSHMEM).
 *
 * One header, one implementation (common.inc: the SHMEM library's lifecycle, memory, copies,
 * timing and launches; kernels.inc: the kernels) built twice: nvshmem_shim.cu and
 * rocshmem_shim.hip only name the GPU runtime's and the SHMEM library's calls for it. The Rust
 * side loads the shared library at run time, so this header is the whole contract: bindings are
 * generated from it and checked for drift.
 *
 * Every function returns SYMMEM_SHIM_OK (0) or a negative status; after a failure,
 * symmem_shim_last_error() describes it (per thread, valid until the next call).
 * Device pointers are plain addresses in this process. Tables are device arrays of int64, one
 * entry per PE: table[pe] is where this process reaches PE pe's copy of one allocation, so a
 * local pointer p translates to PE `to` as table[to] + (p - table[from]).
 */
#ifndef SYMMEM_SHIM_H
#define SYMMEM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change; the Rust side refuses a library of another version. */
#define SYMMEM_SHIM_ABI_VERSION 5

enum symmem_shim_status {
  SYMMEM_SHIM_OK = 0,
  /* The SHMEM library reported a failure. */
  SYMMEM_SHIM_ERR_BACKEND = -1,
  /* An argument was refused (null pointer, bad PE, misaligned pointer, zero size). */
  SYMMEM_SHIM_ERR_INVALID = -2,
  /* The GPU runtime reported a failure. */
  SYMMEM_SHIM_ERR_DEVICE = -3,
  /* Called in the wrong state (before init, twice, after finalize). */
  SYMMEM_SHIM_ERR_STATE = -4
};

/* ---- identity ---------------------------------------------------------------------------- */
int symmem_shim_abi_version(void);
/* "nvshmem" or "rocshmem". */
const char *symmem_shim_backend(void);
const char *symmem_shim_last_error(void);

/* ---- devices ----------------------------------------------------------------------------- */
int symmem_shim_device_count(int *count);
/* Selects the GPU of this process; call before symmem_shim_init. */
int symmem_shim_set_device(int device);
/* PCI bus id of the selected GPU ("0000:3b:00.0"), NUL-terminated; size >= 16. Names one GPU
 * of the machine whatever the process's visible-device list. */
int symmem_shim_device_bus_id(char *out, size_t size);

/* ---- bootstrap and lifetime -------------------------------------------------------------- */
/* First call on every rank, before the library reads its environment (which it does once, when
 * the unique id is made or at init): heap_bytes = 0 keeps the library's default heap;
 * single_node = 1 lets the library's own bootstrap use loopback unless the user chose an
 * interface. Also forces NVSHMEM_DISABLE_NVLS=1 (multicast is never used). Sets environment
 * variables: call it before other threads start. */
int symmem_shim_configure(size_t heap_bytes, int single_node);
/* Size of the unique id that rank 0 creates and every rank passes to init. */
int symmem_shim_unique_id_size(size_t *size);
int symmem_shim_get_unique_id(uint8_t *id, size_t size);
/* Collective; after symmem_shim_configure. */
int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size);
/* Collective. */
int symmem_shim_finalize(void);

/* ---- symmetric memory (collective: every PE, same order) --------------------------------- */
int symmem_shim_malloc(size_t bytes, void **ptr);
int symmem_shim_free(void *ptr);
/* This process's address of PE pe's copy of ptr, or NULL when pe is not load/store reachable. */
int symmem_shim_ptr(const void *ptr, int pe, void **out);
int symmem_shim_barrier_all(void);

/* ---- plain device memory and copies, on the shim's stream -------------------------------- */
int symmem_shim_device_alloc(size_t bytes, void **ptr);
int symmem_shim_device_free(void *ptr);
/* Asynchronous: the host buffer may be reused on return. */
int symmem_shim_copy_to_device_async(void *dst, const void *src, size_t bytes);
/* Synchronous. */
int symmem_shim_copy_to_host(void *dst, const void *src, size_t bytes);
/* Asynchronous device-to-device copy by the runtime (the baseline for copy kernels). */
int symmem_shim_copy_device_async(void *dst, const void *src, size_t bytes);
/* Asynchronous peer copy by the runtime (cudaMemcpyPeerAsync / hipMemcpyPeerAsync) from src on
 * the selected GPU to dst on the GPU whose PCI bus id is dst_bus_id (the baseline for copies
 * into a peer; dst is this process's address of the peer's memory). */
int symmem_shim_copy_peer_async(void *dst, const char *dst_bus_id, const void *src, size_t bytes);
/* Waits for everything queued on the shim's stream. */
int symmem_shim_synchronize(void);
/* Waits for everything queued on the selected GPU by this process, on every stream of its
 * primary context (the one the frameworks share: torch, cupy, Triton), not only the shim's. */
int symmem_shim_device_synchronize(void);
/* Free and total memory of the selected GPU in bytes, as the runtime reports them: device-wide,
 * so other processes on the same GPU count too. */
int symmem_shim_device_memory(size_t *free_bytes, size_t *total_bytes);

/* ---- device-side timing on the shim's stream --------------------------------------------- */
/* Records the start event: work queued after it is timed. */
int symmem_shim_time_start(void);
/* Records the stop event, waits for it and gives the GPU time since the start event. */
int symmem_shim_time_stop(float *ms);

/* ---- translated kernels (asynchronous) --------------------------------------------------- */
/* The translation every kernel takes: one allocation's table (a device int64[n_pes]) and the PE
 * whose local addresses the kernel is given. table = NULL means no translation: pointers are
 * used as they are (the untranslated baselines). */
typedef struct symmem_shim_team {
  const int64_t *table;
  int n_pes;
  int pe;
} symmem_shim_team;

/* Writes value to count u64 at dst (a local address) translated to PE `to`. */
int symmem_shim_fill_u64(symmem_shim_team team, int to, uint64_t *dst, uint64_t value,
                         size_t count);
/* Copies count u64 from values (device memory of this process) to dst translated to `to`. */
int symmem_shim_store_u64(symmem_shim_team team, int to, uint64_t *dst, const uint64_t *values,
                          size_t count);
/* Copies count u64 from src translated to `src_pe` into out (device memory of this process). */
int symmem_shim_load_u64(symmem_shim_team team, int src_pe, const uint64_t *src, uint64_t *out,
                         size_t count);
/* Copies bytes from src on src_pe to dst on dst_pe; both are local addresses translated through
 * the one table (as Iris's copy does). */
int symmem_shim_copy(symmem_shim_team team, const void *src, int src_pe, void *dst, int dst_pe,
                     size_t bytes);
/* Adds value `repeats` times (one atomic per add) to the u64 at dst translated to `to`. */
int symmem_shim_atomic_add_u64(symmem_shim_team team, int to, uint64_t *dst, uint64_t value,
                               size_t repeats);

#ifdef __cplusplus
}
#endif

#endif /* SYMMEM_SHIM_H */
