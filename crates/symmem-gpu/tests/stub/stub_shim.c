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
 * Across hosts (configure's single_node = 0), as NVSHMEM's unique-id bootstrap: rank 0 also
 * listens on a TCP port of its host name's address, named in the unique id; every PE connects
 * at init. Each host has its own folder of that name (its /tmp is its own): a PE maps the heaps
 * it finds there after a barrier over the TCP star, so peers of its host are reachable and
 * the others are not (ptr gives NULL); the barrier is the TCP star's.
 *
 * Every call that takes or frees memory, launches or finalises appends its name to the file
 * STUB_LOG (a path given at compile time, one per test), so a test can tell which calls reached
 * the shim.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
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
/* Where the unique id holds rank 0's TCP address across hosts: a mark, IPv4 and port. */
#define STUB_TCP_AT 100
#define STUB_TCP_MARK 'T'
/* Every wait of the TCP star: the provider's watchdog ends a PE stuck longer. */
#define STUB_TCP_WAIT_MS (300 * 1000)

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
/* Across hosts: rank 0's listener (from get_unique_id to init), and the star's streams (rank
 * 0: one per PE, index = PE; the others: index 0, to rank 0). */
static int g_single_node = 1, g_listener = -1, g_tcp[STUB_MAX_PES];

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

static int tcp_barrier(void);

static int barrier(void) {
  if (!g_single_node) return tcp_barrier();
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

/* Reads or writes exactly `n` bytes within STUB_TCP_WAIT_MS each step; 0 on success. */
static int tcp_io(int fd, void *buf, size_t n, int writing) {
  char *p = buf;
  while (n > 0) {
    struct pollfd pfd = {fd, writing ? POLLOUT : POLLIN, 0};
    if (poll(&pfd, 1, STUB_TCP_WAIT_MS) <= 0) return -1;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Every PE sends rank 0 a byte; rank 0 answers each once all have. */
static int tcp_barrier(void) {
  char byte = 1;
  if (g_rank != 0)
    return tcp_io(g_tcp[0], &byte, 1, 1) || tcp_io(g_tcp[0], &byte, 1, 0) ? SYMMEM_SHIM_ERR_BACKEND
                                                                             : SYMMEM_SHIM_OK;
  for (int pe = 1; pe < g_n_pes; pe++)
    if (tcp_io(g_tcp[pe], &byte, 1, 0)) return SYMMEM_SHIM_ERR_BACKEND;
  for (int pe = 1; pe < g_n_pes; pe++)
    if (tcp_io(g_tcp[pe], &byte, 1, 1)) return SYMMEM_SHIM_ERR_BACKEND;
  return SYMMEM_SHIM_OK;
}

/* Rank 0's listener on its host name's IPv4 address (else loopback), written into `id`. */
static int tcp_listen(uint8_t *id) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char host[256];
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found = NULL;
  if (gethostname(host, sizeof host) == 0 && getaddrinfo(host, NULL, &hints, &found) == 0) {
    addr.sin_addr = ((struct sockaddr_in *)found->ai_addr)->sin_addr;
    freeaddrinfo(found);
  }
  socklen_t len = sizeof addr;
  g_listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (g_listener < 0 || bind(g_listener, (struct sockaddr *)&addr, len) != 0 ||
      listen(g_listener, STUB_MAX_PES) != 0 ||
      getsockname(g_listener, (struct sockaddr *)&addr, &len) != 0)
    return fail(SYMMEM_SHIM_ERR_BACKEND, "cannot listen for the other hosts' PEs");
  id[STUB_TCP_AT] = STUB_TCP_MARK;
  memcpy(id + STUB_TCP_AT + 1, &addr.sin_addr, 4);
  memcpy(id + STUB_TCP_AT + 5, &addr.sin_port, 2);
  return SYMMEM_SHIM_OK;
}

/* The star around rank 0: it accepts every PE, which sends its rank first. */
static int tcp_star(int rank, int n_pes, const uint8_t *id) {
  if (id[STUB_TCP_AT] != STUB_TCP_MARK) return fail(SYMMEM_SHIM_ERR_INVALID, "no TCP address in the id");
  if (rank == 0) {
    for (int joined = 1; joined < n_pes; joined++) {
      struct pollfd pfd = {g_listener, POLLIN, 0};
      int fd = poll(&pfd, 1, STUB_TCP_WAIT_MS) == 1 ? accept(g_listener, NULL, NULL) : -1;
      int32_t pe = -1;
      if (fd < 0 || tcp_io(fd, &pe, 4, 0) || pe <= 0 || pe >= n_pes || g_tcp[pe] >= 0)
        return fail(SYMMEM_SHIM_ERR_BACKEND, "a PE of another host never connected");
      g_tcp[pe] = fd;
    }
    close(g_listener);
    g_listener = -1;
    return SYMMEM_SHIM_OK;
  }
  struct sockaddr_in addr = {.sin_family = AF_INET};
  memcpy(&addr.sin_addr, id + STUB_TCP_AT + 1, 4);
  memcpy(&addr.sin_port, id + STUB_TCP_AT + 5, 2);
  int32_t me = rank;
  for (long i = 0; i < 300L * 50; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
      g_tcp[0] = fd;
      return tcp_io(fd, &me, 4, 1) ? fail(SYMMEM_SHIM_ERR_BACKEND, "rank 0 hung up") : SYMMEM_SHIM_OK;
    }
    if (fd >= 0) close(fd);
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  return fail(SYMMEM_SHIM_ERR_BACKEND, "cannot reach rank 0's host");
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
  g_single_node = single_node;
  for (int pe = 0; pe < STUB_MAX_PES; pe++) g_tcp[pe] = -1;
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
  if (strlen(dir) >= STUB_TCP_AT) return fail(SYMMEM_SHIM_ERR_BACKEND, "TMPDIR is too long");
  if (mkdtemp(dir) == NULL) return fail(SYMMEM_SHIM_ERR_BACKEND, "mkdtemp failed");
  memset(id, 0, size);
  memcpy(id, dir, strlen(dir));
  return g_single_node ? SYMMEM_SHIM_OK : tcp_listen(id);
}
int symmem_shim_init(int rank, int n_pes, const uint8_t *id, size_t id_size) {
  if (g_initialized) return fail(SYMMEM_SHIM_ERR_STATE, "already initialised");
  if (n_pes < 1 || n_pes > STUB_MAX_PES || rank < 0 || rank >= n_pes || id_size != STUB_ID_SIZE ||
      id[STUB_ID_SIZE - 1] != 0)
    return fail(SYMMEM_SHIM_ERR_INVALID, "init: bad rank, PE count or unique id");
  memcpy(g_dir, id, STUB_TCP_AT);
  g_rank = rank;
  g_n_pes = n_pes;
  char path[PATH_MAX];
  if (!g_single_node) {
    /* This host's folder of the id's name: rank 0's exists, the others' hosts make theirs. */
    if (mkdir(g_dir, 0700) != 0 && errno != EEXIST) return fail(SYMMEM_SHIM_ERR_BACKEND, "cannot make the heap folder");
    snprintf(path, sizeof path, "%s/heap.%d", g_dir, rank);
    g_heaps[rank] = map_file(path, STUB_HEAP, 1);
    if (g_heaps[rank] == NULL) return fail(SYMMEM_SHIM_ERR_BACKEND, "cannot map the heap file");
    int status = tcp_star(rank, n_pes, id);
    if (status != SYMMEM_SHIM_OK) return status;
    /* Every PE has made its heap: the ones in this host's folder are this host's. */
    if (tcp_barrier() != SYMMEM_SHIM_OK) return fail(SYMMEM_SHIM_ERR_BACKEND, "init barrier failed");
    for (int pe = 0; pe < n_pes; pe++) {
      if (pe == rank) continue;
      snprintf(path, sizeof path, "%s/heap.%d", g_dir, pe);
      g_heaps[pe] = access(path, F_OK) == 0 ? map_file(path, STUB_HEAP, 0) : NULL;
    }
  } else {
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
  }
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
  if (g_single_node && g_rank == 0) {
    snprintf(path, sizeof path, "%s/ctl", g_dir);
    unlink(path);
    rmdir(g_dir);
  }
  if (!g_single_node) {
    rmdir(g_dir); /* the last PE of each host empties it */
    for (int pe = 0; pe < STUB_MAX_PES; pe++)
      if (g_tcp[pe] >= 0) close(g_tcp[pe]), g_tcp[pe] = -1;
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
  /* A PE of another host has no mapping here: not load/store reachable. */
  *out = (p >= mine && p < mine + STUB_HEAP && g_heaps[pe]) ? g_heaps[pe] + (p - mine) : NULL;
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
int symmem_shim_device_synchronize(void) {
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
