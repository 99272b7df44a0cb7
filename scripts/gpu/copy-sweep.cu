// Copy-kernel sweep: how the shape of symmem_copy_kernel (shim/kernels.inc) was chosen.
// Times kernel variants against cudaMemcpyAsync D2D (and cudaMemcpyPeerAsync on the same GPU)
// from 64 MiB to 4 GiB with CUDA events (median of 21 after 3 warm-ups), untranslated (null
// table) and translated (a table that maps the destination onto itself). Plain cudaMalloc
// buffers: no SHMEM library needed. On a GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 scripts/gpu/copy-sweep.cu -o copy-sweep && ./copy-sweep [VARIANT]
// Output of the H200 run: docs/gpu/copy-sweep.txt.
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

__device__ __forceinline__ char *tr(const int64_t *table, int from, int to, const void *p) {
  if (table == nullptr) return (char *)p;
  if (from == to) return (char *)p;
  return (char *)(table[to] + ((int64_t)(intptr_t)p - table[from]));
}
__device__ __forceinline__ char *tr_plain(const int64_t *table, int from, int to, const void *p) {
  if (table == nullptr) return (char *)p;
  return (char *)(table[to] + ((int64_t)(intptr_t)p - table[from]));
}

// Current kernel (baseline), verbatim logic.
__global__ void k_current(const int64_t *table, int cur, const void *src, int src_pe, void *dst, int dst_pe, size_t bytes) {
  const char *s = tr_plain(table, cur, src_pe, src);
  char *d = tr_plain(table, cur, dst_pe, dst);
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t stride = (size_t)blockDim.x * gridDim.x;
  size_t done = 0;
  if ((((uintptr_t)s | (uintptr_t)d) & 15) == 0) {
    size_t vectors = bytes / 16;
    const uint4 *vs = (const uint4 *)s; uint4 *vd = (uint4 *)d;
    size_t i = tid;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
      uint4 a = vs[i], b = vs[i + stride], c = vs[i + 2 * stride], e = vs[i + 3 * stride];
      vd[i] = a; vd[i + stride] = b; vd[i + 2 * stride] = c; vd[i + 3 * stride] = e;
    }
    for (; i < vectors; i += stride) vd[i] = vs[i];
    done = vectors * 16;
  }
  for (size_t i = done + tid; i < bytes; i += stride) d[i] = s[i];
}

// Variant: U vectors per thread per step, HINT 0 plain, 1 streaming (__ldcs/__stcs), 2 ldg+stcs; SHORT: from==to shortcut
template <int U, int HINT, bool SHORT>
__global__ void k_var(const int64_t *table, int cur, const void *src, int src_pe, void *dst, int dst_pe, size_t bytes) {
  const char *s = SHORT ? tr(table, cur, src_pe, src) : tr_plain(table, cur, src_pe, src);
  char *d = SHORT ? tr(table, cur, dst_pe, dst) : tr_plain(table, cur, dst_pe, dst);
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t stride = (size_t)blockDim.x * gridDim.x;
  size_t done = 0;
  if ((((uintptr_t)s | (uintptr_t)d) & 15) == 0) {
    size_t vectors = bytes / 16;
    const uint4 *vs = (const uint4 *)s; uint4 *vd = (uint4 *)d;
    size_t i = tid;
    for (; i + (U - 1) * stride < vectors; i += U * stride) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (HINT == 0) r[u] = vs[i + u * stride];
        else if (HINT == 1) r[u] = __ldcs(vs + i + u * stride);
        else r[u] = __ldg(vs + i + u * stride);
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (HINT == 0) vd[i + u * stride] = r[u];
        else __stcs(vd + i + u * stride, r[u]);
      }
    }
    for (; i < vectors; i += stride) vd[i] = vs[i];
    done = vectors * 16;
  }
  for (size_t i = done + tid; i < bytes; i += stride) d[i] = s[i];
}

typedef void (*kfn)(const int64_t *, int, const void *, int, void *, int, size_t);
struct V { const char *name; kfn f; int U; };

int main(int argc, char **argv) {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t MAX = 4ull << 30;
  char *a, *b; CK(cudaMalloc(&a, MAX)); CK(cudaMalloc(&b, MAX));
  CK(cudaMemset(a, 1, MAX)); CK(cudaMemset(b, 2, MAX));
  int64_t htab[2] = {(int64_t)(intptr_t)b, (int64_t)(intptr_t)b};  // translate dst from 0 to 1: same place
  int64_t *tab; CK(cudaMalloc(&tab, 16)); CK(cudaMemcpy(tab, htab, 16, cudaMemcpyHostToDevice));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  V vars[] = {
    {"cur", k_current, 4},
    {"u4", k_var<4,0,false>, 4}, {"u8", k_var<8,0,false>, 8}, {"u2", k_var<2,0,false>, 2}, {"u1", k_var<1,0,false>, 1},
    {"u4cs", k_var<4,1,false>, 4}, {"u8cs", k_var<8,1,false>, 8}, {"u4ldg", k_var<4,2,false>, 4},
    {"u4S", k_var<4,0,true>, 4}, {"u4csS", k_var<4,1,true>, 4}, {"u8csS", k_var<8,1,true>, 8},
  };
  int blocksizes[] = {256, 512, 1024};
  // grid modes: 0 = full (bytes / (16*U*block)), k>0 = k*SMs blocks (persistent)
  int grids[] = {0, 1, 2, 4, 8, 16};
  const int REPS = 21;
  auto timeit = [&](auto launch) {
    for (int w = 0; w < 3; w++) launch();
    std::vector<float> t;
    for (int r = 0; r < REPS; r++) {
      CK(cudaEventRecord(e0, st)); launch(); CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms);
    }
    std::sort(t.begin(), t.end()); return t[REPS / 2];
  };
  const char *only = argc > 1 ? argv[1] : nullptr;
  for (size_t size = 64ull << 20; size <= MAX; size *= 2) {
    float base = timeit([&] { CK(cudaMemcpyAsync(b, a, size, cudaMemcpyDeviceToDevice, st)); });
    float peer = timeit([&] { CK(cudaMemcpyPeerAsync(b, 0, a, 0, size, st)); });
    printf("size %zu MiB memcpy %.1f us (%.0f GB/s) peer %.3f\n", size >> 20, base * 1e3, size / base / 1e6, base / peer);
    for (auto &v : vars) {
      if (only && !strstr(v.name, only)) continue;
      for (int bs : blocksizes) for (int g : grids) {
        size_t full = (size + 16 * v.U * bs - 1) / (16 * v.U * bs);
        unsigned grid = g == 0 ? (unsigned)std::min<size_t>(full, 1u << 30) : g * sms * (1024 / bs) / 1;
        if (g == 0 && v.f == k_current && bs != 256) continue;
        for (int t = 0; t < 2; t++) {  // t=0 untranslated, t=1 translated
          const int64_t *tb = t ? tab : nullptr;
          float ms = timeit([&] { v.f<<<grid, bs, 0, st>>>(tb, 0, a, 0, b, 1, size); });
          CK(cudaGetLastError());
          printf("  %-6s bs %4d grid %s%-3d %s ratio %.4f\n", v.name, bs, g ? "xSM" : "full", g, t ? "tr" : "un", base / ms);
        }
      }
    }
    fflush(stdout);
  }
  return 0;
}
