/*
 * A stand-in for the symmem shim, for tests on machines without a GPU: symmem_shim.h over host
 * memory, one PE per process, "kernels" run on the CPU with the same translation. Built by
 * tests/stub_shim.rs with the system C compiler as libsymmem_shim_<STUB_BACKEND>.so.
 *
 * Every call that takes or frees memory, launches or finalises appends its name to the file
 * STUB_LOG (a path given at compile time, one per test), so a test can tell which calls reached
 * the shim.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem_shim.h"

#ifndef STUB_BACKEND
#define STUB_BACKEND "nvshmem"
#endif
#ifndef STUB_LOG
#define STUB_LOG "/dev/null"
#endif

static char g_error[256];
static int g_configured, g_initialized, g_n_pes;

static void logged(const char *call) {
  FILE *f = fopen(STUB_LOG, "a");
  if (f == NULL) return;
  fprintf(f, "%s\n", call);
  fclose(f);
}

static int fail(int status, const char *what) {
  snprintf(g_error, sizeof g_error, "%s", what);
  return status;
}

#define REQUIRE_INIT()                                                           \
  do {                                                                           \
    if (!g_initialized) return fail(SYMMEM_SHIM_ERR_STATE, "call init first"); \
  } while (0)

static char *translate(symmem_shim_team team, int to, const void *p) {
  if (team.table == NULL) return (char *)p;
  return (char *)(intptr_t)(team.table[to] + ((int64_t)(intptr_t)p - team.table[team.pe]));
}

static int check_team(symmem_shim_team team, int to) {
  if (team.table == NULL) return SYMMEM_SHIM_OK;
  if (team.n_pes != g_n_pes || to < 0 || to >= team.n_pes || team.pe < 0 || team.pe >= team.n_pes)
    return fail(SYMMEM_SHIM_ERR_INVALID, "bad team or PE");
  return SYMMEM_SHIM_OK;
}

int symmem_shim_abi_version(void) { return SYMMEM_SHIM_ABI_VERSION; }
const char *symmem_shim_backend(void) { return STUB_BACKEND; }
const char *symmem_shim_last_error(void) { return g_error; }

int symmem_shim_device_count(int *count) {
  *count = 1;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_set_device(int device) {
  return device == 0 ? SYMMEM_SHIM_OK : fail(SYMMEM_SHIM_ERR_DEVICE, "no such GPU");
}
int symmem_shim_device_bus_id(char *out, size_t size) {
  if (size < 16) return fail(SYMMEM_SHIM_ERR_INVALID, "short bus id buffer");
  snprintf(out, size, "0000:00:00.0");
  return SYMMEM_SHIM_OK;
}

int symmem_shim_configure(size_t heap_bytes, int single_node) {
  (void)heap_bytes;
  (void)single_node;
  g_configured = 1;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_unique_id_size(size_t *size) {
  *size = 8;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_get_unique_id(uint8_t *id, size_t size) {
  if (!g_configured) return fail(SYMMEM_SHIM_ERR_STATE, "configure first");
  memset(id, 0x5a, size);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size) {
  if (g_initialized) return fail(SYMMEM_SHIM_ERR_STATE, "already initialised");
  if (rank != 0 || n_pes != 1 || id_size != 8 || id[0] != 0x5a)
    return fail(SYMMEM_SHIM_ERR_INVALID, "the stub runs one PE with its own unique id");
  logged("init");
  g_n_pes = n_pes;
  g_initialized = 1;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_finalize(void) {
  REQUIRE_INIT();
  logged("finalize");
  g_initialized = 0;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_malloc(size_t bytes, void **ptr) {
  REQUIRE_INIT();
  *ptr = aligned_alloc(64, (bytes + 63) / 64 * 64);
  logged("malloc");
  return *ptr ? SYMMEM_SHIM_OK : fail(SYMMEM_SHIM_ERR_BACKEND, "out of memory");
}
int symmem_shim_free(void *ptr) {
  REQUIRE_INIT();
  logged("free");
  free(ptr);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_ptr(const void *ptr, int pe, void **out) {
  REQUIRE_INIT();
  if (pe < 0 || pe >= g_n_pes) return fail(SYMMEM_SHIM_ERR_INVALID, "PE outside the job");
  *out = (void *)ptr;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_barrier_all(void) {
  REQUIRE_INIT();
  return SYMMEM_SHIM_OK;
}

int symmem_shim_device_alloc(size_t bytes, void **ptr) {
  *ptr = aligned_alloc(64, (bytes + 63) / 64 * 64);
  logged("device_alloc");
  return *ptr ? SYMMEM_SHIM_OK : fail(SYMMEM_SHIM_ERR_DEVICE, "out of memory");
}
int symmem_shim_device_free(void *ptr) {
  logged("device_free");
  free(ptr);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy_to_device_async(void *dst, const void *src, size_t bytes) {
  REQUIRE_INIT();
  memcpy(dst, src, bytes);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy_to_host(void *dst, const void *src, size_t bytes) {
  REQUIRE_INIT();
  memcpy(dst, src, bytes);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy_device_async(void *dst, const void *src, size_t bytes) {
  REQUIRE_INIT();
  logged("copy_device_async");
  memcpy(dst, src, bytes);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy_peer_async(void *dst, const char *dst_bus_id, const void *src, size_t bytes) {
  REQUIRE_INIT();
  if (strcmp(dst_bus_id, "0000:00:00.0") != 0) return fail(SYMMEM_SHIM_ERR_DEVICE, "no such GPU");
  logged("copy_peer_async");
  memcpy(dst, src, bytes);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_synchronize(void) {
  REQUIRE_INIT();
  return SYMMEM_SHIM_OK;
}
int symmem_shim_time_start(void) {
  REQUIRE_INIT();
  return SYMMEM_SHIM_OK;
}
int symmem_shim_time_stop(float *ms) {
  REQUIRE_INIT();
  *ms = 1.0f;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_fill_u64(symmem_shim_team team, int to, uint64_t *dst, uint64_t value,
                         size_t count) {
  REQUIRE_INIT();
  if (check_team(team, to)) return SYMMEM_SHIM_ERR_INVALID;
  logged("fill_u64");
  uint64_t *p = (uint64_t *)translate(team, to, dst);
  for (size_t i = 0; i < count; i++) p[i] = value;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_store_u64(symmem_shim_team team, int to, uint64_t *dst, const uint64_t *values,
                          size_t count) {
  REQUIRE_INIT();
  if (check_team(team, to)) return SYMMEM_SHIM_ERR_INVALID;
  logged("store_u64");
  memcpy(translate(team, to, dst), values, count * 8);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_load_u64(symmem_shim_team team, int src_pe, const uint64_t *src, uint64_t *out,
                         size_t count) {
  REQUIRE_INIT();
  if (check_team(team, src_pe)) return SYMMEM_SHIM_ERR_INVALID;
  logged("load_u64");
  memcpy(out, translate(team, src_pe, src), count * 8);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy(symmem_shim_team team, const void *src, int src_pe, void *dst, int dst_pe,
                     size_t bytes) {
  REQUIRE_INIT();
  if (check_team(team, src_pe) || check_team(team, dst_pe)) return SYMMEM_SHIM_ERR_INVALID;
  logged("copy");
  memmove(translate(team, dst_pe, dst), translate(team, src_pe, src), bytes);
  return SYMMEM_SHIM_OK;
}
int symmem_shim_atomic_add_u64(symmem_shim_team team, int to, uint64_t *dst, uint64_t value,
                               size_t repeats) {
  REQUIRE_INIT();
  if (check_team(team, to)) return SYMMEM_SHIM_ERR_INVALID;
  logged("atomic_add_u64");
  uint64_t *p = (uint64_t *)translate(team, to, dst);
  for (size_t i = 0; i < repeats; i++) *p += value;
  return SYMMEM_SHIM_OK;
}
