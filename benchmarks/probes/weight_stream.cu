// The weight stream alone: how fast every SM reads a stage ring of INT4 weights and their scales
// in the packed layout's access pattern, against the same bytes laid out one contiguous run a
// stage, and against a plain streaming read of the buffer.
//
// Why (docs/design/indexed-kernels.md v60): at mid batch both Chord and Humming take about the
// sum of the bytes and compute floors. One reading is that the stream itself runs under the copy
// rate there. The packed layout ([E][N/16][K/64][512 B], chord_kernels/layouts.py) gives a stage
// of 64 K columns one 512-byte run an n-tile: the 512-row mid-batch tile reads 32 runs at a
// 57 KB stride a stage (K=7168), where a stage-contiguous layout would read one 16 KB run. This
// measures whether DRAM cares, with nothing else running: no dequantization, no MMA, no
// activations, no epilogue. The scales ([E][K/32][N] bf16: two runs of rows x 2 bytes a 64-column
// stage) are read the same way in both patterns.
//
// A CTA loops over tiles (expert, column tile of R weight rows) as the tile loop does: tile
// blockIdx.x, then + gridDim.x. Warp 0 issues each stage's bulk copies (cp.async.bulk, one a run)
// into a ring of SLOTS slots; warp 1 waits for each, reads a word and releases the slot. The
// expert count is chosen so the tiles make whole waves on 132 SMs (66 experts), so the table reads
// the stream's rate, not a tail.
//
// Build and run on the device: benchmarks/probes/run_weight_stream.sh (JSON lines and a markdown
// table). CPU CI compiles it (tests/test_probes.py).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/mbarrier_sm90.cuh"
#include "common/tma_sm90.cuh"

namespace probe {

using namespace chord;

constexpr int kRunBytes = 512;      // one n-tile's 64 K columns in the packed layout (BLOCK_K 64)
constexpr int kBarrierBytes = 256;  // the ring's barriers, ahead of its slots

struct Geometry {
  int experts, n, k;  // the weight: experts x N x K INT4 codes, group-32 bf16 scales
  int rows;           // weight rows a CTA tile covers (a multiple of 16)
  int stage_k;        // K columns a stage (a multiple of 64)
  int contiguous;     // 1: a stage's weights as one run; 0: the packed layout's runs
  __host__ __device__ int n_tiles() const { return n / 16; }
  __host__ __device__ int k_blocks() const { return k / 64; }
  __host__ __device__ int tile_ntiles() const { return rows / 16; }
  __host__ __device__ int col_tiles() const { return n / rows; }
  __host__ __device__ int tiles() const { return experts * col_tiles(); }
  __host__ __device__ int stages() const { return k / stage_k; }
  // An n-tile's run a stage, the tile's weights a stage, a scale group's run (the tile's rows).
  __host__ __device__ int run_bytes() const { return stage_k / 64 * kRunBytes; }
  __host__ __device__ int weight_stage_bytes() const { return tile_ntiles() * run_bytes(); }
  __host__ __device__ int scale_run_bytes() const { return rows * 2; }
  __host__ __device__ int groups() const { return stage_k / 32; }
  __host__ __device__ int stage_bytes() const { return weight_stage_bytes() + groups() * scale_run_bytes(); }
  __host__ __device__ size_t weight_bytes() const { return size_t(experts) * n * k / 2; }
  __host__ __device__ size_t scale_bytes() const { return size_t(experts) * (k / 32) * n * 2; }
};

// One bulk copy of `bytes` (a multiple of 16) from global to shared memory, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

template <int SLOTS>
__global__ void __launch_bounds__(64) weight_stream(const char* __restrict__ weights, const char* __restrict__ scales,
                                                    Geometry g, int* sink) {
  extern __shared__ __align__(128) char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + SLOTS;
  char* ring = smem + kBarrierBytes;
  static_assert(2 * SLOTS * sizeof(uint64_t) <= kBarrierBytes, "the barriers fit ahead of the slots");
  if (threadIdx.x == 0) {
    for (int s = 0; s < SLOTS; ++s) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int stage_bytes = g.stage_bytes(), stages = g.stages(), col_tiles = g.col_tiles();
  int i = 0;  // ring position
  if (warp == 0) {
    for (int t = blockIdx.x; t < g.tiles(); t += gridDim.x) {
      const int e = t / col_tiles, c = t % col_tiles;
      for (int s = 0; s < stages; ++s, ++i) {
        const int slot = i % SLOTS;
        if (i >= SLOTS) mbarrier_wait(&empty[slot], ((i / SLOTS) + 1) & 1);
        if (lane == 0) mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
        __syncwarp();
        char* dst = ring + size_t(slot) * stage_bytes;
        if (g.contiguous) {
          if (lane == 0)
            bulk_copy(dst, weights + (size_t(t) * stages + s) * g.weight_stage_bytes(), g.weight_stage_bytes(), &full[slot]);
        } else {
          for (int j = lane; j < g.tile_ntiles(); j += 32) {
            const size_t run = (size_t(e) * g.n_tiles() + size_t(c) * g.tile_ntiles() + j) * g.k_blocks() +
                               size_t(s) * (g.stage_k / 64);
            bulk_copy(dst + j * g.run_bytes(), weights + run * kRunBytes, g.run_bytes(), &full[slot]);
          }
        }
        char* sdst = dst + g.weight_stage_bytes();
        for (int q = lane; q < g.groups(); q += 32) {
          const size_t at = ((size_t(e) * (g.k / 32) + size_t(s) * g.groups() + q) * g.n + size_t(c) * g.rows) * 2;
          bulk_copy(sdst + q * g.scale_run_bytes(), scales + at, g.scale_run_bytes(), &full[slot]);
        }
      }
    }
  } else {
    uint32_t fold = 0;
    for (int t = blockIdx.x; t < g.tiles(); t += gridDim.x) {
      for (int s = 0; s < stages; ++s, ++i) {
        const int slot = i % SLOTS;
        mbarrier_wait(&full[slot], (i / SLOTS) & 1);
        fold ^= reinterpret_cast<const uint32_t*>(ring + size_t(slot) * stage_bytes)[lane];
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty[slot]);
      }
    }
    if (fold == 0x9e3779b9u) sink[0] = int(fold);  // keeps the reads; never true for random bytes in practice
  }
}

// The read ceiling: every thread streams 16-byte loads over the buffer, grid-stride.
__global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ buf, size_t n, int* sink) {
  uint32_t fold = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(buf + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) fold ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(buf + i);
    fold ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (fold == 0x9e3779b9u) sink[0] = int(fold);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Case {
  const char* name;  // what production tile the pattern stands for
  Geometry g;
  int slots, ctas_per_sm;
};

using Kernel = void (*)(const char*, const char*, Geometry, int*);

Kernel kernel_for(int slots) {
  switch (slots) {
    case 2: return weight_stream<2>;
    case 3: return weight_stream<3>;
    case 4: return weight_stream<4>;
    case 6: return weight_stream<6>;
    case 8: return weight_stream<8>;
    default: std::fprintf(stderr, "no kernel for %d slots\n", slots); std::exit(2);
  }
}

// Times `launch` `reps` times after a warm-up, each after do_bench's L2 flush (a 256 MB memset),
// and returns the median in µs.
template <class Launch>
double median_us(Launch&& launch, void* flush, size_t flush_bytes, int reps) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  std::vector<double> us;
  for (int rep = 0; rep <= reps; ++rep) {
    check(cudaMemsetAsync(flush, 0, flush_bytes), "flush");
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep > 0) us.push_back(ms * 1e3);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--reps R]\n", argv[0]);
      return 2;
    }
  }
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  // 66 experts: whole waves of tiles on 132 SMs at every tile width below.
  const Geometry gate_up{66, 4096, 7168, 512, 64, 0}, down{66, 7168, 2048, 512, 64, 0};
  std::vector<Case> cases;
  for (const Geometry& base : {gate_up, down}) {
    const char* proj = base.k == 7168 ? "gate_up" : "down";
    for (int contiguous = 0; contiguous < 2; ++contiguous) {
      auto at = [&](int rows, int stage_k) {
        Geometry g = base;
        g.rows = rows, g.stage_k = stage_k, g.contiguous = contiguous;
        return g;
      };
      cases.push_back({proj, at(512, 64), 8, 1});   // the 512 x 16-56 mid-batch tiles (4 warpgroups)
      cases.push_back({proj, at(512, 128), 4, 1});  // the same bytes in flight, 1 KB runs
      cases.push_back({proj, at(256, 64), 6, 1});   // the 2-warpgroup prefill tiles
      cases.push_back({proj, at(128, 256), 2, 4});  // the 8 x 128 decode tile, 2-stage ring, 4 an SM
      cases.push_back({proj, at(128, 256), 3, 3});  // the same on the 3-stage ring, 3 an SM
    }
  }
  size_t weight_max = 0, scale_max = 0;
  for (const Case& c : cases) weight_max = std::max(weight_max, c.g.weight_bytes()), scale_max = std::max(scale_max, c.g.scale_bytes());
  const size_t flush_bytes = size_t(256) << 20;
  char *weights, *scales;
  void* flush;
  int* sink;
  check(cudaMalloc(&weights, weight_max), "weights"), check(cudaMalloc(&scales, scale_max), "scales");
  check(cudaMalloc(&flush, flush_bytes), "flush buffer"), check(cudaMalloc(&sink, 16), "sink");
  check(cudaMemset(weights, 0x5a, weight_max), "fill"), check(cudaMemset(scales, 0x3c, scale_max), "fill");
  for (const Geometry& g : {gate_up, down}) {
    const size_t n16 = g.weight_bytes() / 16;  // the weights alone: the buffer holds no more
    const double us = median_us([&] { read_stream<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(weights), n16, sink); },
                                flush, flush_bytes, reps);
    std::printf("{\"proj\": \"%s\", \"pattern\": \"read_stream\", \"rows\": 0, \"stage_k\": 0, \"slots\": 0, "
                "\"ctas_per_sm\": 8, \"bytes\": %zu, \"us\": %.2f, \"gbs\": %.1f}\n",
                g.k == 7168 ? "gate_up" : "down", n16 * 16, us, n16 * 16 / us / 1e3);
  }
  for (const Case& c : cases) {
    const Kernel kernel = kernel_for(c.slots);
    const int smem = kBarrierBytes + c.slots * c.g.stage_bytes();
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem attribute");
    const int grid = sms * c.ctas_per_sm;
    const double us = median_us([&] { kernel<<<grid, 64, smem>>>(weights, scales, c.g, sink); }, flush, flush_bytes, reps);
    check(cudaGetLastError(), "launch");
    const size_t bytes = c.g.weight_bytes() + c.g.scale_bytes();
    std::printf("{\"proj\": \"%s\", \"pattern\": \"%s\", \"rows\": %d, \"stage_k\": %d, \"slots\": %d, "
                "\"ctas_per_sm\": %d, \"bytes\": %zu, \"us\": %.2f, \"gbs\": %.1f}\n",
                c.name, c.g.contiguous ? "contiguous" : "packed", c.g.rows, c.g.stage_k, c.slots, c.ctas_per_sm, bytes,
                us, bytes / us / 1e3);
    std::fflush(stdout);
  }
  cudaFree(weights), cudaFree(scales), cudaFree(flush), cudaFree(sink);
  return 0;
}
