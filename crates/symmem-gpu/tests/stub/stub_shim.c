/*
 * A stand-in for the symmem shim, for tests on machines without a GPU: symmem_shim.h over host
 * memory, "kernels" run on the CPU with the same translation. Built by tests/stub_shim.rs with
 * the system C compiler as libsymmem_shim_nvshmem.so (cc -shared -fPIC -I<shim dir>).
 *
 * One PE per process, as the real libraries: the unique id is a fresh folder; at init every PE
 * creates its symmetric heap there as a file (sparse, STUB_HEAP bytes) and maps every PE's
 * heap, so peers are load/store reachable; malloc is a bump allocator that every PE runs in the
 * same order (same offsets); the barrier is a counter in a shared page. So the conformance
 * suite can run through the GPU provider at several ranks:
 *   cargo xtask test --provider nvshmem --ranks 1,2,4 --shim-lib <this library>
 *
 * Every call that takes or frees memory, launches or finalises appends its name to the file
 * STUB_LOG (a path given at compile time, one per test), so a test can tell which calls reached
 * the shim.
 */
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "symmem_shim.h"

#ifndef STUB_BACKEND
#define STUB_BACKEND "nvshmem"
#endif
#ifndef STUB_LOG
#define STUB_LOG "/dev/null"
#endif

#define STUB_HEAP ((size_t)1 << 30)
#define STUB_MAX_PES 64
#define STUB_ID_SIZE 128

static char g_error[512];
static int g_configured, g_initialized, g_n_pes, g_rank;
static char g_dir[STUB_ID_SIZE];
static char *g_heaps[STUB_MAX_PES];
static size_t g_next;
/* The shared page: barrier arrivals and generation. */
struct ctl {
  unsigned arrived;
  unsigned generation;
};
static struct ctl *g_ctl;

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

static void pause_a_moment(void) {
  struct timespec t = {0, 200000};
  nanosleep(&t, NULL);
}

static int barrier(void) {
  unsigned generation = __atomic_load_n(&g_ctl->generation, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&g_ctl->arrived, 1, __ATOMIC_ACQ_REL) == (unsigned)g_n_pes) {
    __atomic_store_n(&g_ctl->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_ctl->generation, 1, __ATOMIC_ACQ_REL);
    return SYMMEM_SHIM_OK;
  }
  for (long i = 0; i < 300L * 5000; i++) {
    if (__atomic_load_n(&g_ctl->generation, __ATOMIC_ACQUIRE) != generation) return SYMMEM_SHIM_OK;
    pause_a_moment();
  }
  return SYMMEM_SHIM_ERR_BACKEND;
}

/* Maps `path` (created at `bytes` when `create`), waiting for another PE to create it. */
static void *map_file(const char *path, size_t bytes, int create) {
  for (long i = 0; i < 300L * 5000; i++) {
    int fd = open(path, create ? O_RDWR | O_CREAT : O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st;
      if (create && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return NULL;
      }
      if (fstat(fd, &st) == 0 && (size_t)st.st_size == bytes) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        return p == MAP_FAILED ? NULL : p;
      }
      close(fd);
    }
    pause_a_moment();
  }
  return NULL;
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
  *size = STUB_ID_SIZE;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_get_unique_id(uint8_t *id, size_t size) {
  if (!g_configured) return fail(SYMMEM_SHIM_ERR_STATE, "configure first");
  if (size != STUB_ID_SIZE) return fail(SYMMEM_SHIM_ERR_INVALID, "unique id size");
  const char *tmp = getenv("TMPDIR");
  char dir[STUB_ID_SIZE];
  snprintf(dir, sizeof dir, "%s/symmem-stub-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) return fail(SYMMEM_SHIM_ERR_BACKEND, "mkdtemp failed");
  memset(id, 0, size);
  memcpy(id, dir, strlen(dir));
  return SYMMEM_SHIM_OK;
}
int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size) {
  if (g_initialized) return fail(SYMMEM_SHIM_ERR_STATE, "already initialised");
  if (n_pes < 1 || n_pes > STUB_MAX_PES || rank < 0 || rank >= n_pes || id_size != STUB_ID_SIZE ||
      id[STUB_ID_SIZE - 1] != 0)
    return fail(SYMMEM_SHIM_ERR_INVALID, "init: bad rank, PE count or unique id");
  memcpy(g_dir, id, STUB_ID_SIZE);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/ctl", g_dir);
  g_ctl = map_file(path, 4096, 1);
  snprintf(path, sizeof path, "%s/heap.%d", g_dir, rank);
  g_heaps[rank] = map_file(path, STUB_HEAP, 1);
  for (int pe = 0; pe < n_pes && g_ctl && g_heaps[rank]; pe++) {
    if (pe == rank) continue;
    snprintf(path, sizeof path, "%s/heap.%d", g_dir, pe);
    g_heaps[pe] = map_file(path, STUB_HEAP, 0);
    if (g_heaps[pe] == NULL) return fail(SYMMEM_SHIM_ERR_BACKEND, "a peer's heap never came");
  }
  if (g_ctl == NULL || g_heaps[rank] == NULL)
    return fail(SYMMEM_SHIM_ERR_BACKEND, "cannot map the heap files");
  g_rank = rank;
  g_n_pes = n_pes;
  g_next = 0;
  if (barrier() != SYMMEM_SHIM_OK) return fail(SYMMEM_SHIM_ERR_BACKEND, "init barrier timed out");
  logged("init");
  g_initialized = 1;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_finalize(void) {
  REQUIRE_INIT();
  logged("finalize");
  barrier();
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/heap.%d", g_dir, g_rank);
  unlink(path);
  barrier();
  if (g_rank == 0) {
    snprintf(path, sizeof path, "%s/ctl", g_dir);
    unlink(path);
    rmdir(g_dir);
  }
  g_initialized = 0;
  return SYMMEM_SHIM_OK;
}

int symmem_shim_malloc(size_t bytes, void **ptr) {
  REQUIRE_INIT();
  size_t at = (g_next + 255) / 256 * 256;
  if (bytes == 0 || bytes > STUB_HEAP - at) return fail(SYMMEM_SHIM_ERR_BACKEND, "heap exhausted");
  g_next = at + bytes;
  *ptr = g_heaps[g_rank] + at;
  logged("malloc");
  return SYMMEM_SHIM_OK;
}
int symmem_shim_free(void *ptr) {
  REQUIRE_INIT();
  (void)ptr; /* a bump allocator: the heap goes at finalize */
  logged("free");
  return SYMMEM_SHIM_OK;
}
int symmem_shim_ptr(const void *ptr, int pe, void **out) {
  REQUIRE_INIT();
  if (pe < 0 || pe >= g_n_pes) return fail(SYMMEM_SHIM_ERR_INVALID, "PE outside the job");
  const char *p = (const char *)ptr, *mine = g_heaps[g_rank];
  *out = (p >= mine && p < mine + STUB_HEAP) ? g_heaps[pe] + (p - mine) : NULL;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_barrier_all(void) {
  REQUIRE_INIT();
  return barrier() == SYMMEM_SHIM_OK ? SYMMEM_SHIM_OK
                                     : fail(SYMMEM_SHIM_ERR_BACKEND, "barrier timed out");
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
/* The stand-in's "device" is its heap file: what the bump allocator handed out is used, and
 * stays used after free (as a SHMEM library keeps its heap until finalize). */
int symmem_shim_device_memory(size_t *free_bytes, size_t *total_bytes) {
  REQUIRE_INIT();
  *total_bytes = STUB_HEAP;
  *free_bytes = STUB_HEAP - g_next;
  return SYMMEM_SHIM_OK;
}
int symmem_shim_copy_to_device_async(void *dst, const void *src, size_t bytes) {
  REQUIRE_INIT();
  logged("copy_to_device_async");
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
  for (size_t i = 0; i < repeats; i++) __atomic_fetch_add(p, value, __ATOMIC_SEQ_CST);
  return SYMMEM_SHIM_OK;
}
