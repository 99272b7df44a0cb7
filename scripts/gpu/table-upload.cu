// Table-upload sweep: how a peer-bases table of a few int64 gets onto the device fastest, and
// what the waits around it cost (issue 33: the Python face's allocate waits for its table). Each
// way writes N values (N = PEs) into device memory on a non-blocking stream, as the shim does,
// and is timed with the host clock: the enqueue alone, then enqueue + stream wait (the table
// complete), median / min of 2000 after 200 warm-ups, one way after another, repeated. Plain
// cudaMalloc memory: no SHMEM library needed. On a GPU machine:
//   nvcc -O2 -arch=sm_90 -std=c++17 scripts/gpu/table-upload.cu -lcuda -o table-upload && ./table-upload
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("%s: %s\n", #x, cudaGetErrorString(e_));                                  \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define CU(x)                                                                          \
  do {                                                                                 \
    CUresult r_ = (x);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char *s_ = nullptr;                                                        \
      cuGetErrorString(r_, &s_);                                                       \
      printf("%s: %s\n", #x, s_ ? s_ : "?");                                           \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

constexpr int kMax = 64;
struct Table {
  int64_t v[kMax];
};

__global__ void write_table(int64_t *dst, Table t, int n) {
  int i = threadIdx.x;
  if (i < n) dst[i] = t.v[i];
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Stat {
  double median, min;
};

static Stat run(const std::function<void()> &f, int iters = 2000, int warm = 200) {
  std::vector<double> t;
  t.reserve(iters);
  for (int i = 0; i < warm + iters; i++) {
    double a = now_us();
    f();
    double b = now_us();
    if (i >= warm) t.push_back(b - a);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0;
  CK(cudaDriverGetVersion(&drv));
  printf("device: %s, driver API %d\n", prop.name, drv);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int64_t *dev = nullptr;
  CK(cudaMalloc(&dev, 4096));
  int64_t *pinned = nullptr;
  CK(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
  CUdevice cudev;
  CU(cuDeviceGet(&cudev, 0));
  int memops = 0;
  cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, cudev);
  printf("stream mem ops attribute: %d\n", memops);

  int64_t seq = 1;
  for (int round = 0; round < 2; round++) {
    for (int n : {1, 8}) {
      std::vector<int64_t> pageable(n);
      auto fill = [&](int64_t *p) {
        for (int i = 0; i < n; i++) p[i] = seq + i;
        seq++;
      };
      struct Way {
        const char *name;
        std::function<void()> enqueue;
      };
      std::vector<Way> ways = {
          {"memcpyAsync pageable", [&] {
             fill(pageable.data());
             CK(cudaMemcpyAsync(dev, pageable.data(), n * 8, cudaMemcpyHostToDevice, s));
           }},
          {"memcpyAsync pinned", [&] {
             fill(pinned);
             CK(cudaMemcpyAsync(dev, pinned, n * 8, cudaMemcpyHostToDevice, s));
           }},
          {"kernel, values as parameters", [&] {
             Table t;
             fill(t.v);
             write_table<<<1, 32, 0, s>>>(dev, t, n);
             CK(cudaGetLastError());
           }},
          {"cuStreamBatchMemOp write64", [&] {
             CUstreamBatchMemOpParams ops[kMax];
             memset(ops, 0, sizeof ops);
             int64_t v[kMax];
             fill(v);
             for (int i = 0; i < n; i++) {
               ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
               ops[i].writeValue.address = (CUdeviceptr)(dev + i);
               ops[i].writeValue.value64 = (cuuint64_t)v[i];
               ops[i].writeValue.flags = 0;
             }
             CU(cuStreamBatchMemOp(s, n, ops, 0));
           }},
      };
      for (auto &w : ways) {
        Stat enq = run([&] { w.enqueue(); });
        CK(cudaStreamSynchronize(s));
        Stat full = run([&] {
          w.enqueue();
          CK(cudaStreamSynchronize(s));
        });
        // Check the last value landed.
        int64_t back[kMax];
        CK(cudaMemcpy(back, dev, n * 8, cudaMemcpyDeviceToHost));
        printf("round %d n=%d %-30s enqueue %6.2f us (min %5.2f)  enqueue+wait %6.2f us (min %5.2f)  last=%lld\n",
               round, n, w.name, enq.median, enq.min, full.median, full.min,
               (long long)back[n - 1]);
      }
    }
    Stat ss = run([&] { CK(cudaStreamSynchronize(s)); });
    Stat ds = run([&] { CK(cudaDeviceSynchronize()); });
    Stat cs = run([&] { CU(cuCtxSynchronize()); });
    Stat sq = run([&] { (void)cudaStreamQuery(s); });
    printf("round %d idle: cudaStreamSynchronize %.2f (min %.2f), cudaDeviceSynchronize %.2f (min %.2f), "
           "cuCtxSynchronize %.2f (min %.2f), cudaStreamQuery %.2f (min %.2f) us\n",
           round, ss.median, ss.min, ds.median, ds.min, cs.median, cs.min, sq.median, sq.min);
  }
  return 0;
}
